"""``file``: enriched JSON lines appended to a file. Lines that are not JSON are written byte for byte.

A batch is written with one ``write`` and acknowledged after it (and after ``fsync`` when asked).
If the bridge was killed in the middle of a write, the file ends in a torn line; that line was never
acknowledged, so it is cut off at start-up and written again whole.
Threading: the pipeline's export thread only (flush and shutdown come after it stopped).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from obsbox.exporters.bridge.component import ExportResult, Sink
from obsbox.exporters.bridge.record import Record

log = logging.getLogger(__name__)


@dataclass
class FileConfig:
    path: Path
    fsync: bool = False


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def lines(records: list[Record]) -> bytes:
    """The batch as the bytes a line sink writes: each record's line, newline-terminated."""
    return b"\n".join([rec.line() for rec in records]) + b"\n" if records else b""


class LineEncoding:
    """A batch's lines, made a chunk at a time in a worker (see ``component.Encoding``)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def add(self, records: list[Record]) -> None:
        self.parts.append(lines(records))

    def payload(self) -> bytes:
        return b"".join(self.parts)


class FileSink(Sink):
    type = "file"
    url_option = "path"  # --to file:PATH
    Config = FileConfig

    def __init__(self, config: FileConfig, context) -> None:
        super().__init__(config, context)
        config.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(config.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._cut_torn_line()

    def _cut_torn_line(self) -> None:
        size = os.fstat(self.fd).st_size
        if size == 0 or os.pread(self.fd, 1, size - 1) == b"\n":
            return
        start = max(0, size - 4 * 1024 * 1024)
        tail = os.pread(self.fd, size - start, start)
        keep = start + tail.rfind(b"\n") + 1 if b"\n" in tail else start
        os.ftruncate(self.fd, keep)
        log.warning(
            "%s ended in a torn line (%d bytes) from an interrupted run; it is written again",
            self.config.path,
            size - keep,
        )

    @staticmethod
    def make_encoder(config: FileConfig, context) -> Callable[[], LineEncoding]:
        """For worker processes: the batch's bytes are made there, and written here in order."""
        return LineEncoding

    def export(self, records: list[Record]) -> ExportResult:
        return self.export_encoded(lines(records), records)

    def export_encoded(self, payload: bytes, records: Sequence[Record]) -> ExportResult:
        """Write what ``lines`` made of ``records`` (in a worker, or just now)."""
        if payload:
            write_all(self.fd, payload)
            if self.config.fsync:
                os.fsync(self.fd)
        return ExportResult.SUCCESS

    def shutdown(self) -> None:
        os.close(self.fd)
