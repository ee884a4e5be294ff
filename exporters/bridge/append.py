"""Append whole records or nothing: what the file sink and the dead-letter file write is never torn.

On a full filesystem a write can take part of a batch and then fail (ENOSPC); retried as it stands,
the file would keep the part, and the retry would glue a whole record onto a torn one. So the size
before the write is taken, and on any error (the write, or the fsync after it) the file is cut back
to it before the error goes on. The file must have one writer: this process.

A ``kill -9`` can still cut a write short (Linux's ``generic_perform_write`` stops between pages
once a fatal signal is pending, and returns what it copied): ``cut_torn_tail`` takes such a last,
unterminated record off before the next write, which then writes it again whole (it was never
acknowledged).
"""

from __future__ import annotations

import os


def append_whole(fd: int, data: bytes, fsync: bool = False) -> None:
    """Append ``data`` to the end of ``fd`` (opened ``O_APPEND``), or leave the file as it was and raise."""
    start = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except OSError:
        os.ftruncate(fd, start)
        raise


def cut_torn_tail(fd: int, window: int = 4 * 1024 * 1024) -> int:
    """Truncate ``fd`` after its last newline (looking back ``window`` bytes); the bytes cut."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    start = max(0, size - window)
    tail = os.pread(fd, size - start, start)
    keep = start + tail.rfind(b"\n") + 1 if b"\n" in tail else start
    os.ftruncate(fd, keep)
    return size - keep
