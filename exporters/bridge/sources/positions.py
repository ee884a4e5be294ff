"""The positions file: how far each file has been acknowledged by every sink.

Written atomically (temp file, fsync, rename, fsync of the folder) after each acknowledged batch
that moved them, so a ``kill -9`` at any instant leaves either the old or the new positions, never a
torn file. A commit that changes nothing (the same files at the same offsets) writes nothing: the
fsyncs are the cost of a save, and an idle or slow file must not pay them once per batch.
Entries are keyed by file identity (device, inode and fingerprint digest), not by name, so a
renamed file keeps its offset and a reused inode with new content does not inherit one.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

VERSION = 1


@dataclass(frozen=True, slots=True)
class Position:
    path: str
    dev: int
    ino: int
    fingerprint: str  # hex digest of the file's first ``fingerprint_bytes`` bytes (see fingerprint.py)
    offset: int
    fingerprint_bytes: int = 0  # how many bytes ``fingerprint`` covers; 0 (saved before): the first line


class PositionsError(RuntimeError):
    pass


class PositionsFile:
    """Load and save positions. ``path=None`` keeps them in memory only (``--no-positions``)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.saved: list[Position] | None = None  # what the file holds, once this process wrote it

    def load(self) -> list[Position]:
        if self.path is None or not self.path.exists():
            return []
        try:
            data = orjson.loads(self.path.read_bytes())
            if data.get("version") != VERSION:
                raise PositionsError(f"unsupported version {data.get('version')!r}")
            return [Position(**entry) for entry in data["files"]]
        except (orjson.JSONDecodeError, KeyError, TypeError, PositionsError) as exc:
            raise PositionsError(
                f"positions file {self.path} is unreadable ({exc}); move it aside to start from the "
                "beginning of every file"
            ) from exc

    def save(self, positions: list[Position]) -> None:
        if self.path is None or positions == self.saved:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        entries = [
            {
                "path": p.path,
                "dev": p.dev,
                "ino": p.ino,
                "fingerprint": p.fingerprint,
                "offset": p.offset,
                "fingerprint_bytes": p.fingerprint_bytes,
            }
            for p in positions
        ]
        payload = orjson.dumps({"version": VERSION, "files": entries}, option=orjson.OPT_INDENT_2)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        with contextlib.suppress(OSError):  # not every filesystem lets a folder be fsynced
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        self.saved = list(positions)
