"""``file``: enriched JSON lines appended to a file (logfmt lines with the IDs appended as pairs).
Lines that are neither are written byte for byte.

A batch is written with one ``write`` and acknowledged after it (and after ``fsync`` when asked).
If the bridge was killed in the middle of a write, the file ends in a torn line; that line was never
acknowledged, so it is cut off at start-up and written again whole. A write that fails (a full
disk) is cut back to where the batch began (see ``append``), and the batch is tried again.

An output moved away (logrotate's ``mv out.jsonl out.jsonl.1``) or removed is reopened at its path
before the next batch, as a logrotate-friendly writer does: the path's (st_dev, st_ino) is compared
with the open file's, one ``stat`` a batch. Otherwise the lines after the move would go into the
moved file, and into a deleted inode once rotation removed it: acknowledged, and lost.
The file is created with ``mode`` (0600 by default: the lines are the source logs' own); an
existing file keeps its mode.
Threading: the pipeline's export thread only (flush and shutdown come after it stopped).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from obsbox.config import ConfigError
from obsbox.exporters.bridge.append import append_whole, cut_torn_tail
from obsbox.exporters.bridge.component import ExportResult, Sink
from obsbox.exporters.bridge.modes import PRIVATE_FILE, parse_mode
from obsbox.exporters.bridge.record import Record

log = logging.getLogger(__name__)


@dataclass
class FileConfig:
    path: Path
    fsync: bool = False
    mode: Any = PRIVATE_FILE  # for a file it creates: YAML's 0640 (an octal int) or "0640"

    def __post_init__(self) -> None:
        self.mode = parse_mode(self.mode)


def lines(records: list[Record]) -> bytes:
    """The batch as the bytes a line sink writes: each record's line, newline-terminated."""
    return b"\n".join([rec.whole() if rec.rest else rec.line() for rec in records]) + b"\n" if records else b""


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
        self.fd = -1
        try:
            config.path.parent.mkdir(parents=True, exist_ok=True)
            self._open()
        except OSError as exc:
            raise ConfigError(f"{config.path} cannot be opened for writing ({exc.strerror})", key="path") from None

    def _open(self) -> None:
        """Open the path for appending (created with ``mode``), and cut a torn last line."""
        flags = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.config.path, flags | os.O_CREAT | os.O_EXCL, self.config.mode)
            os.fchmod(fd, self.config.mode)  # the mode asked for, whatever the umask
        except FileExistsError:  # it keeps its mode (made with the umask's if removed just now)
            fd = os.open(self.config.path, flags | os.O_CREAT, self.config.mode)
        st = os.fstat(fd)
        self.fd, self.identity = fd, (st.st_dev, st.st_ino)
        self._cut_torn_line()

    def _follow_path(self) -> None:
        """Reopen the path when it no longer names the open file (moved, or removed)."""
        try:
            st = os.stat(self.config.path)
            if (st.st_dev, st.st_ino) == self.identity:
                return
        except FileNotFoundError:
            pass
        log.info("%s was moved or removed; writing to the path anew", self.config.path)
        self.shutdown()
        self._open()

    def _cut_torn_line(self) -> None:
        cut = cut_torn_tail(self.fd)
        if cut:
            log.warning(
                "%s ended in a torn line (%d bytes) from an interrupted run; it is written again", self.config.path, cut
            )

    @staticmethod
    def make_encoder(config: FileConfig, context) -> Callable[[], LineEncoding]:
        """For worker processes: the batch's bytes are made there, and written here in order."""
        return LineEncoding

    def export(self, records: list[Record]) -> ExportResult:
        return self.export_encoded(lines(records), records)

    def export_encoded(self, payload: bytes, records: Sequence[Record]) -> ExportResult:
        """Write what ``lines`` made of ``records`` (in a worker, or just now): all of it, or none."""
        if not payload:
            return ExportResult.SUCCESS
        try:
            self._follow_path()
            append_whole(self.fd, payload, self.config.fsync)
        except OSError as exc:
            self.context.metrics.errors.labels("file_write").inc()
            log.warning("%s: %s; nothing of the batch was kept, it is written again", self.config.path, exc)
            return ExportResult.FAILURE
        return ExportResult.SUCCESS

    def shutdown(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)
