"""Discovery: which regular files the globs name now. Pure functions of the filesystem, no state.

A file is keyed by its identity, (device, inode), so a renamed file is the same file and a name
reused by a new file is a new one (compare the collector's ``fileconsumer/matcher`` and Vector's
``paths_provider``).
"""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
from collections.abc import Callable

FileKey = tuple[int, int]  # (st_dev, st_ino)

COMPRESSED = ["*.gz", "*.bz2", "*.xz", "*.zst", "*.zip", "*.lz4"]


def excluded(path: str, exclude: list[str]) -> bool:
    """``exclude`` patterns match the whole path or the file's name."""
    name = os.path.basename(path)
    return any(fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(name, pattern) for pattern in exclude)


def find_files(
    include: list[str],
    exclude: list[str],
    *,
    matched: dict[str, int] | None = None,
    failed: Callable[[str, OSError], None] | None = None,
) -> dict[FileKey, str]:
    """Every regular file the ``include`` globs match and ``exclude`` does not, by identity; the first
    path found names a file that several globs or links match. ``matched`` gets how many regular
    files each pattern matches; ``failed`` hears of a path that could not be looked at (not one
    that vanished), so that nothing is skipped unsaid."""
    found: dict[FileKey, str] = {}
    for pattern in include:
        count = 0
        for path in sorted(glob.glob(os.path.expanduser(pattern))):
            if excluded(path, exclude):
                continue
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # vanished between glob and stat, or a dangling link
            except OSError as exc:
                if failed is not None:
                    failed(path, exc)
                continue
            if stat.S_ISREG(st.st_mode):
                found.setdefault((st.st_dev, st.st_ino), path)
                count += 1
        if matched is not None:
            matched[pattern] = count
    return found


def find_in_folder(folder: str, key: FileKey) -> str | None:
    """The path, in ``folder``, of the file whose identity is ``key``: where a rotation moved a file
    that no glob matches any more."""
    try:
        entries = list(os.scandir(folder or "."))
    except OSError:
        return None
    for entry in entries:
        try:
            st = entry.stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == key:
            return entry.path
    return None
