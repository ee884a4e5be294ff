"""A writer that produces the files Docker's json-file log driver produces, rotation included.

Ported from moby's ``daemon/logger``: the copier cuts a line longer than its 16 KiB buffer into
partial messages of exactly 16 KiB (the last one carries the rest and the newline; all share the
first piece's time); ``jsonfilelog.marshalMessage`` writes ``{"log":...,"stream":...,"time":...}``
with Go's escaping (``<``, ``>``, ``&`` and control bytes as ``\\u00XX``) and RFC 3339 nanosecond
time; ``loggerutils.LogFile.WriteLogEntry`` rotates *before* a write once the file holds
``max-size`` bytes or more, so a line's pieces can land in two files, and ``rotate`` deletes
``.<max-file - 1>``, renames ``.N-1`` to ``.N`` down to ``.1``, the live file to ``.1``, and opens
the live name anew (``O_WRONLY|O_TRUNC|O_CREATE``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

BUF_SIZE = 16 * 1024  # daemon/logger/copier.go: defaultBufSize


def go_json_string(data: bytes) -> bytes:
    """``ffjsonWriteJSONBytesAsString`` of jsonlog/jsonlogbytes.go, for valid UTF-8."""
    out = bytearray(b'"')
    for char in data.decode("utf-8", "replace"):
        code = ord(char)
        if char in '\\"':
            out += b"\\" + char.encode()
        elif char == "\n":
            out += b"\\n"
        elif char == "\r":
            out += b"\\r"
        elif code < 0x20 or char in "<>&":
            out += b"\\u00%02x" % code
        elif char in "\u2028\u2029":
            out += b"\\u202%x" % (code & 0xF)
        else:
            out += char.encode()
    return bytes(out + b'"')


def go_time(moment: datetime) -> bytes:
    """Go's ``time.RFC3339Nano`` in UTC: trailing zeros of the fraction dropped, ``Z``."""
    fraction = f"{moment.microsecond:06d}000".rstrip("0")
    return (moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z").encode()


def entry(piece: bytes, stream: str, moment: datetime) -> bytes:
    return (
        b'{"log":'
        + go_json_string(piece)
        + b',"stream":"'
        + stream.encode()
        + b'","time":"'
        + go_time(moment)
        + b'"}\n'
    )


class JsonFileLog:
    """One container's ``<id>-json.log`` with ``--log-opt max-size`` and ``max-file``."""

    def __init__(self, path: Path, max_size: int, max_file: int) -> None:
        self.path, self.max_size, self.max_file = path, max_size, max_file
        self.fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o640)
        self.size = 0
        self.rotations = 0
        self.inodes = [os.fstat(self.fd).st_ino]  # the inode of every generation, in order
        self.lock = threading.Lock()

    def log(self, line: bytes, stream: str = "stdout") -> list[int]:
        """Write one application line (without its newline) as Docker does; returns the generation
        (rotation count) each of its pieces went to."""
        moment = datetime.now(UTC)
        pieces = [line[at : at + BUF_SIZE] for at in range(0, len(line), BUF_SIZE)] or [b""]
        landed = []
        with self.lock:
            for n, piece in enumerate(pieces):
                last = n == len(pieces) - 1
                landed.append(self._write(entry(piece + b"\n" if last else piece, stream, moment)))
        return landed

    def _write(self, data: bytes) -> int:
        if self.size >= self.max_size:
            self._rotate()
        os.write(self.fd, data)
        self.size += len(data)
        return self.rotations

    def _rotate(self) -> None:
        os.close(self.fd)
        name = str(self.path)
        if self.max_file >= 2:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{name}.{self.max_file - 1}")
            for n in range(self.max_file - 1, 1, -1):
                if os.path.exists(f"{name}.{n - 1}"):
                    os.rename(f"{name}.{n - 1}", f"{name}.{n}")
            os.rename(name, f"{name}.1")
        else:
            os.unlink(name)
        self.fd = os.open(name, os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o640)
        self.size = 0
        self.rotations += 1
        self.inodes.append(os.fstat(self.fd).st_ino)

    def close(self) -> None:
        os.close(self.fd)


class Container(threading.Thread):
    """Writes ``lines`` to a :class:`JsonFileLog` at about ``rate`` bytes a second."""

    def __init__(self, log: JsonFileLog, lines: list[bytes], rate: float) -> None:
        super().__init__(daemon=True)
        self.log, self.lines, self.rate = log, lines, rate

    def run(self) -> None:
        start, written = time.monotonic(), 0
        for line in self.lines:
            self.log.log(line)
            written += len(line) + 70
            ahead = written / self.rate - (time.monotonic() - start)
            if ahead > 0.002:
                time.sleep(ahead)
