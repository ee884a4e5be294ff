"""A small OTLP/HTTP and Loki push receiver on loopback, for tests, soaks, benchmarks and the local mode.

It decodes what the bridge sends with the official formats (``opentelemetry-proto`` messages for
``/v1/logs`` and ``/v1/traces``; Loki's JSON push schema for ``/loki/api/v1/push``), validates it
strictly, and can be told to refuse requests (``refuse(503)``) to exercise retries. With
``out_dir`` it also appends what it receives, as JSON lines, to ``spans.jsonl`` and ``logs.jsonl``.
Threading: requests are served on their own threads; every shared list is guarded by ``lock``.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import socket
import threading
import zlib
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class PushSchemaError(ValueError):
    """A Loki push body that does not follow the documented JSON schema."""


@dataclass
class LokiEntry:
    labels: dict[str, str]
    timestamp_ns: int
    line: str
    metadata: dict[str, str]
    value: list  # the entry as pushed: [ts, line] or [ts, line, metadata]


def validate_loki_push(payload: Any) -> list[LokiEntry]:
    """Check a decoded push body against Loki's schema: ``{"streams": [{"stream": {label: value},
    "values": [[ns-string, line] or [ns-string, line, {structured metadata}]]}]}``."""
    if not isinstance(payload, dict) or not isinstance(payload.get("streams"), list):
        raise PushSchemaError("body must be an object with a 'streams' array")
    entries = []
    for stream in payload["streams"]:
        labels, values = stream.get("stream"), stream.get("values")
        if (
            not isinstance(labels, dict)
            or not labels
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
        ):
            raise PushSchemaError(f"'stream' must be a non-empty object of string labels, not {labels!r}")
        if not isinstance(values, list):
            raise PushSchemaError("'values' must be an array")
        for value in values:
            if not isinstance(value, list) or len(value) not in (2, 3):
                raise PushSchemaError(f"each value is [ts, line] or [ts, line, metadata], not {value!r}")
            ts, line = value[0], value[1]
            if not isinstance(ts, str) or not ts.isdigit():
                raise PushSchemaError(f"timestamps are nanosecond strings, not {ts!r}")
            if not isinstance(line, str):
                raise PushSchemaError("the log line must be a string")
            meta = value[2] if len(value) == 3 else {}
            if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
                raise PushSchemaError(f"structured metadata must map strings to strings, not {meta!r}")
            entries.append(LokiEntry(labels, int(ts), line, meta, value))
    return entries


def attributes(kvs: Any) -> dict[str, Any]:
    """OTLP attributes as a plain dict (strings, numbers, booleans; anything else as text)."""
    out = {}
    for kv in kvs:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = (
            getattr(kv.value, kind)
            if kind in ("string_value", "int_value", "double_value", "bool_value")
            else str(kv.value)
        )
    return out


def span_json(resource_spans: Any, span: Any) -> dict[str, Any]:
    return {
        "service": attributes(resource_spans.resource.attributes).get("service.name"),
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex() or None,
        "name": span.name,
        "start_ns": span.start_time_unix_nano,
        "duration_ms": (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6,
        "status": span.status.code,
        "attributes": attributes(span.attributes),
    }


def log_json(resource_logs: Any, record: Any) -> dict[str, Any]:
    return {
        "service": attributes(resource_logs.resource.attributes).get("service.name"),
        "time_ns": record.time_unix_nano,
        "severity": record.severity_text,
        "trace_id": record.trace_id.hex(),
        "span_id": record.span_id.hex(),
        "body": record.body.string_value,
        "attributes": attributes(record.attributes),
    }


@dataclass
class Refusal:
    status: int
    retry_after: str | None = None
    remaining: int | None = None  # None: until cleared
    body: bytes = b"refused by the test receiver"


@dataclass
class Receiver:
    host: str = "127.0.0.1"
    port: int = 0
    keep: bool = True  # keep decoded records; a soak only needs the counts
    lock: threading.Lock = field(default_factory=threading.Lock)
    log_records: list[tuple[dict[str, Any], Any]] = field(default_factory=list)  # (resource attrs, LogRecord)
    spans: list[tuple[dict[str, Any], Any]] = field(default_factory=list)
    loki: list[LokiEntry] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], int]] = field(default_factory=list)  # (path, headers, status)
    span_ids: Counter = field(default_factory=Counter)  # log records by span ID, for loss/dup counts
    refusal: Refusal | None = None
    out_dir: Path | None = None  # append decoded spans and log records there, as JSON lines
    connections: set[socket.socket] = field(default_factory=set)  # open ones, dropped by ``stop``

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # headers and body go out in two writes: without this, Nagle holds the body until the
                # client's delayed ACK (about 40 ms a request)
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with receiver.lock:
                    receiver.connections.add(self.connection)

            def finish(self) -> None:
                super().finish()
                with receiver.lock:
                    receiver.connections.discard(self.connection)

            def log_message(self, *_args: Any) -> None:
                pass

            def handle(self) -> None:
                with contextlib.suppress(ConnectionError):  # the sender was killed mid-request: it sends again
                    super().handle()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, reply, ctype, retry_after = receiver.handle(self.path, dict(self.headers), body)
                self.send_response(status)
                if retry_after:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="receiver", daemon=True)
        self.thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop listening and drop every open connection: the peer sees the server go down."""
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            for connection in self.connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def refuse(self, status: int, times: int | None = None, retry_after: str | None = None, body: bytes = b"") -> None:
        with self.lock:
            self.refusal = Refusal(status, retry_after, times, body or b"refused by the test receiver")

    def accept(self) -> None:
        with self.lock:
            self.refusal = None

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, str, str | None]:
        """(status, body, content type, Retry-After) for one request."""
        lowered = {k.lower(): v for k, v in headers.items()}
        with self.lock:
            refusal = self.refusal
            if refusal is not None:
                if refusal.remaining is not None:
                    refusal.remaining -= 1
                    if refusal.remaining <= 0:
                        self.refusal = None
                self.requests.append((path, lowered, refusal.status))
                return refusal.status, refusal.body, "text/plain", refusal.retry_after
        try:
            if lowered.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            status, reply, ctype = self._decode(path, body)
        except (PushSchemaError, ValueError, DecodeError, gzip.BadGzipFile, EOFError, zlib.error) as exc:
            # a body that does not decode (bad gzip, not protobuf, not JSON): refused, as a real receiver does;
            # not an OSError of its own (writing out_dir): that is the receiver's failure, not the sender's
            status, reply, ctype = 400, f"{type(exc).__name__}: {exc}".encode(), "text/plain"
        with self.lock:
            self.requests.append((path, lowered, status))
        return status, reply, ctype, None

    def _decode(self, path: str, body: bytes) -> tuple[int, bytes, str]:
        if path == "/v1/logs":
            request = ExportLogsServiceRequest.FromString(body)
            with self.lock:
                for resource_logs in request.resource_logs:
                    resource = {kv.key: kv.value.string_value for kv in resource_logs.resource.attributes}
                    for scope_logs in resource_logs.scope_logs:
                        for record in scope_logs.log_records:
                            self.span_ids[record.span_id.hex()] += 1
                            if self.keep:
                                self.log_records.append((resource, record))
                self._write(
                    "logs.jsonl",
                    [
                        log_json(resource_logs, record)
                        for resource_logs in request.resource_logs
                        for scope in resource_logs.scope_logs
                        for record in scope.log_records
                    ],
                )
            return 200, ExportLogsServiceResponse().SerializeToString(), "application/x-protobuf"
        if path == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(body)
            with self.lock:
                for resource_spans in request.resource_spans:
                    resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        if self.keep:
                            self.spans.extend((resource, span) for span in scope_spans.spans)
                self._write(
                    "spans.jsonl",
                    [
                        span_json(resource_spans, span)
                        for resource_spans in request.resource_spans
                        for scope in resource_spans.scope_spans
                        for span in scope.spans
                    ],
                )
            return 200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf"
        if path == "/loki/api/v1/push":
            entries = validate_loki_push(orjson.loads(body))
            with self.lock:
                for entry in entries:
                    self.span_ids[entry.metadata.get("span_id", "")] += 1
                if self.keep:
                    self.loki.extend(entries)
            return 204, b"", "text/plain"
        return 404, b"unknown path", "text/plain"

    def _write(self, name: str, rows: list[dict[str, Any]]) -> None:
        if self.out_dir is None or not rows:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.out_dir / name, "ab") as fh:
            fh.write(b"".join(orjson.dumps(row) + b"\n" for row in rows))
            fh.flush()
            os.fsync(fh.fileno())

    def total(self) -> int:
        with self.lock:
            return sum(self.span_ids.values())
