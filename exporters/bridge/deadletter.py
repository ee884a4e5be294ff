"""The dead-letter file: records a server rejected for good (a 4xx), or that could not be delivered
within the retry policy's maximum elapsed time, kept with the reason.

One JSON object per record: when, which sink, the HTTP status and reason, where the line came
from, its trace ID, and the line itself (as text, or base64 when it is not UTF-8). Nothing a sink
rejects is lost; ``obsbox_bridge_dead_letter_records_total{sink}`` counts them.

The file is its owner's only (0600): it holds whole source lines. A write that fails (a full disk)
leaves no torn entry behind and raises, so the records are not counted as written; an entry a
``kill -9`` cut short is taken off before the next one (its records were never acknowledged, and
come back).
"""

from __future__ import annotations

import base64
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from obsbox.exporters.bridge.append import append_whole, cut_torn_tail
from obsbox.exporters.bridge.modes import PRIVATE_FILE, private_dir
from obsbox.exporters.bridge.record import Record

log = logging.getLogger(__name__)


def default_path(state_dir: Path, sink: str) -> Path:
    """One file per sink in the state dir: ``dead-letter-loki-archive.jsonl`` for ``loki/archive``."""
    return state_dir / f"dead-letter-{sink.replace('/', '-')}.jsonl"


class DeadLetter:
    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, sink: str, records: Sequence[Record], reason: str, status: int | None) -> None:
        private_dir(self.path.parent)
        now = time.time()
        lines = []
        for rec in records:
            entry = {
                "time": now,
                "sink": sink,
                "status": status,
                "reason": reason,
                "path": rec.origin.path,
                "offset": rec.offset,
                "trace_id": rec.trace_id,
                "span_id": rec.span_id,
            }
            raw = rec.raw + rec.rest if rec.rest else rec.raw  # a multiline record's lines after its first
            try:
                entry["line"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                entry["line_base64"] = base64.b64encode(raw).decode()
            lines.append(orjson.dumps(entry))
        if not records:  # a rejection the server did not attribute to particular records
            lines.append(orjson.dumps({"time": now, "sink": sink, "status": status, "reason": reason}))
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
        try:
            cut = cut_torn_tail(fd)
            if cut:
                log.warning("%s ended in a torn entry (%d bytes) from an interrupted run; cut off", self.path, cut)
            append_whole(fd, b"\n".join(lines) + b"\n", fsync=True)
        finally:
            os.close(fd)
