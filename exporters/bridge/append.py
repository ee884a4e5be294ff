"""Append whole records or nothing: what the file sink and the dead-letter file write is never torn.

On a full filesystem a write can take part of a batch and then fail (ENOSPC); retried as it stands,
the file would keep the part, and the retry would glue a whole record onto a torn one. So the size
before the write is taken, and on any error (the write, or the fsync after it) the file is cut back
to it before the error goes on. The file must have one writer: this process.
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
