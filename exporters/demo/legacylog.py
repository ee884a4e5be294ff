"""The demo gateway's legacy JSON log: one object per line, the shape of an old .NET service,
for the bridge to tail.

``ActivityId`` is the request's OTel trace ID written as a GUID and ``ParentId`` the server span's
ID, so a line found in Loki leads to its trace in Tempo. Each line is written with a single
``os.write`` on an ``O_APPEND`` descriptor, so lines from concurrent requests never interleave.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from obsbox.exporters.instrumentation.propagation import guid_from_trace_id

# LatencyBreakdown keys, in stage order (conventions.STAGES).
BREAKDOWN_KEYS = {
    "network": "NetworkMs",
    "tls": "TlsMs",
    "jwt_verify": "JwtVerifyMs",
    "pre_cache_validation": "PreCacheValidationMs",
    "context_serialization": "ContextSerializationMs",
    "retrieval": "RetrievalMs",
    "scheduler_wait": "SchedulerWaitMs",
    "prefill": "PrefillMs",
    "decode": "DecodeMs",
}
FILE_NAME = "gateway.json"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


class LegacyLogWriter:
    """Appends request lines to ``<log_dir>/gateway.json``. Thread-safe; ``close()`` when done."""

    def __init__(self, log_dir: Path, service: str = "gateway") -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.path = log_dir / FILE_NAME
        self.fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.service = service
        self.lines = 0
        self._lock = threading.Lock()

    def request(
        self,
        *,
        trace_id: int,
        span_id: int,
        route: str,
        model: str,
        status: int,
        duration_ms: float,
        message: str,
        level: str,
        stages_s: dict[str, float],
    ) -> dict[str, Any]:
        """Write one request line (at completion) and return it."""
        line = {
            "Timestamp": utc_now(),
            "Level": level,
            "Service": self.service,
            "ActivityId": guid_from_trace_id(trace_id),
            "ParentId": format(span_id, "016x"),
            "Route": route,
            "Model": model,
            "StatusCode": status,
            "DurationMs": round(duration_ms, 3),
            "Message": message,
            "LatencyBreakdown": {
                key: round(stages_s.get(stage, 0.0) * 1000.0, 3) for stage, key in BREAKDOWN_KEYS.items()
            },
        }
        self.write(line)
        return line

    def write(self, record: dict[str, Any]) -> None:
        data = orjson.dumps(record) + b"\n"
        with self._lock:
            if self.fd is None:
                raise RuntimeError(f"legacy log {self.path} is closed")
            os.write(self.fd, data)
            self.lines += 1

    def close(self) -> None:
        with self._lock:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
