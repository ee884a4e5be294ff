"""The positions file: how far each file has been acknowledged by every sink.

Written atomically (temp file, fsync, rename, fsync of the folder) after each acknowledged batch
that moved them, so a ``kill -9`` at any instant leaves either the old or the new positions, never a
torn file. A commit that changes nothing (the same files at the same offsets) writes nothing: the
fsyncs are the cost of a save, and an idle or slow file must not pay them once per batch.
Entries are keyed by file identity (device, inode and fingerprint digest), not by name, so a
renamed file keeps its offset and a reused inode with new content does not inherit one.
Each entry also keeps its file's clock anchors (``clock``: [[offset, Unix ns], ...], see
``reader.FileReader.advance_clock``), from which a line without a time of its own gets the same
time on every replay; a file saved without them (an older version) starts a new clock. An entry of a
compressed file read decompressed says so (``compressed: true``; absent, as in older versions, for a
plain file): its offset and print count decompressed bytes.
The file is created for its owner only (0600). What is loaded is checked entry by entry: a file
edited by hand into another shape stops the bridge with one line saying which entry is wrong,
never a traceback halfway through a run.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from obsbox.config import ConfigError
from obsbox.exporters.bridge.append import append_whole
from obsbox.exporters.bridge.modes import PRIVATE_FILE, private_dir
from obsbox.exporters.bridge.record import Clock

VERSION = 1
FIX = "move it aside to start from the beginning of every file"
FIELDS = {"path": str, "dev": int, "ino": int, "fingerprint": str, "offset": int}
WANTED = {int: "a whole number of at least 0", str: "a string", list: "a list", bool: "true or false"}
OPTIONAL = {"fingerprint_bytes": int, "clock": list, "compressed": bool}  # an older version saved none


@dataclass(frozen=True, slots=True)
class Position:
    path: str
    dev: int
    ino: int
    fingerprint: str  # hex digest of the file's first ``fingerprint_bytes`` bytes (see fingerprint.py)
    offset: int
    fingerprint_bytes: int = 0  # how many bytes ``fingerprint`` covers; 0 (saved before): the first line
    clock: Clock = ()  # (offset, Unix ns) anchors of its lines' read times; () (saved before): a new clock
    compressed: bool = False  # read decompressed: its offset and print count decompressed bytes (written when true)


def temporary(path: Path) -> Path:
    """Where the next positions are written before they are renamed over ``path``."""
    return path.with_name(f".{path.name}.tmp")


def _anchor(pair: object) -> bool:
    return (
        isinstance(pair, list)
        and len(pair) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in pair)
    )


class PositionsError(ConfigError):
    """The positions file cannot be used as it is (the CLI prints it in one line, exit 2)."""


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
        except (OSError, orjson.JSONDecodeError) as exc:
            raise self._error(f"is unreadable ({exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise self._error("is not an object with a list of 'files'")
        if data.get("version") != VERSION:
            raise self._error(f"has unsupported version {data.get('version')!r}")
        return [self._position(index, entry) for index, entry in enumerate(data["files"])]

    def _position(self, index: int, entry: object) -> Position:
        if not isinstance(entry, dict):
            raise self._error(f"files[{index}] is not an object")
        where = f"files[{index}] ({entry['path']})" if isinstance(entry.get("path"), str) else f"files[{index}]"
        missing = [key for key in FIELDS if key not in entry]
        unknown = [key for key in entry if key not in FIELDS and key not in OPTIONAL]
        if missing or unknown:
            raise self._error(f"{where} has {'missing' if missing else 'unknown'} keys {missing or unknown}")
        for key, kind in {**FIELDS, **OPTIONAL}.items():
            if key not in entry:
                continue
            value = entry[key]
            boolean = isinstance(value, bool)
            if not isinstance(value, kind) or boolean is not (kind is bool) or (isinstance(value, int) and value < 0):
                wanted = WANTED[kind]
                raise self._error(f"{where}: {key} is {value!r}, not {wanted}")
        clock = entry.get("clock", [])
        if not all(_anchor(pair) for pair in clock):
            raise self._error(f"{where}: clock is {clock!r}, not a list of [offset, nanoseconds] pairs")
        return Position(**{**entry, "clock": tuple(tuple(pair) for pair in clock)})

    def _error(self, problem: str) -> PositionsError:
        return PositionsError(f"positions file {self.path} {problem}; {FIX}")

    def save(self, positions: list[Position]) -> None:
        if self.path is None or positions == self.saved:
            return
        private_dir(self.path.parent)
        keys = (*FIELDS, *OPTIONAL)
        entries = [{key: getattr(p, key) for key in keys if key != "compressed" or p.compressed} for p in positions]
        payload = orjson.dumps({"version": VERSION, "files": entries}, option=orjson.OPT_INDENT_2)
        tmp = temporary(self.path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        try:
            append_whole(fd, payload, fsync=True)  # all of it: a short write on a full disk must not be renamed
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
