"""Discovery: which regular files the globs name now. Pure functions of the filesystem, no state.

A file is keyed by its identity, (device, inode), so a renamed file is the same file and a name
reused by a new file is a new one (compare the collector's ``fileconsumer/matcher`` and Vector's
``paths_provider``).

The runtimes' rotated names are known too, so a generation renamed away before a scan saw it under
its live name is still found, and generations are read oldest first:

- Docker json-file (``daemon/logger/loggerutils/logfile.go``): ``<id>-json.log`` is renamed to
  ``.1``, ``.1`` to ``.2`` ... up to ``max-file - 1``, the oldest deleted (``.N.gz`` with ``compress``);
- kubelet (``pkg/kubelet/logs/container_log_manager.go``): ``0.log`` is renamed to
  ``0.log.20240102-150405`` (``.gz`` once compressed);
- logrotate's default numbering, ``app.log.1``, is Docker's (``.N.gz``, or ``.bz2``, ``.xz``, ``.zst``
  with its ``compresscmd``, once compressed).
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import stat
from collections.abc import Callable

FileKey = tuple[int, int]  # (st_dev, st_ino)

COMPRESSED = ["*.gz", "*.bz2", "*.xz", "*.zst", "*.zip", "*.lz4"]  # excluded by default with ``compression: none``
NEVER_READ = ["*.zip", "*.lz4"]  # ... and with ``compression: auto``, which reads the others (``compressed.py``)

Place = tuple[str, tuple[int, int]]  # (the stream's live path, order among its files: older first)
LIVE = (2, 0)
_ROTATED = re.compile(r"(?P<live>.+\.log)\.(?:(?P<index>\d{1,4})|(?P<time>\d{8}-\d{6}))(?:\.gz|\.bz2|\.xz|\.zst)?")


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


def rotation_place(path: str) -> Place:
    """Which stream ``path`` belongs to, and where in it: a rotated name (``x.log.2``,
    ``0.log.20240102-150405``) comes before the live name ``x.log``, the higher number and the earlier
    time first. Any other path is a stream of its own."""
    match = _ROTATED.fullmatch(path)
    if match is None:
        return path, LIVE
    if match["index"] is not None:
        return match["live"], (1, -int(match["index"]))
    return match["live"], (0, int(match["time"].replace("-", "")))


def find_rotated(include: list[str], exclude: list[str], found: dict[FileKey, str]) -> dict[FileKey, str]:
    """The rotated generations of the files ``include`` names (``<live>.N``, ``<live>.<time>``) that
    no glob matches itself, by identity."""
    rotated: dict[FileKey, str] = {}
    for include_pattern in include:
        pattern = os.path.expanduser(include_pattern)
        for path in glob.glob(pattern + ".*"):
            live, order = rotation_place(path)
            if order == LIVE or not fnmatch.fnmatch(live, pattern) or excluded(path, exclude):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if stat.S_ISREG(st.st_mode) and key not in found:
                rotated.setdefault(key, path)
    return rotated


def may_name(path: str, include: list[str]) -> bool:
    """Could a glob of ``include``, or a rotated name of what it matches, name ``path``? A change
    there is worth a scan."""
    patterns = (os.path.abspath(os.path.expanduser(pattern)) for pattern in include)
    return any(fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, pattern + ".*") for pattern in patterns)


def watched_folders(include: list[str]) -> set[str]:
    """The folders whose entries can change what ``include`` matches: each glob's folder, and where
    that folder is a glob itself, its deepest plain ancestor (a new pod's folder appears there)."""
    folders: set[str] = set()
    for pattern in include:
        folder = os.path.dirname(os.path.abspath(os.path.expanduser(pattern)))
        parts = folder.split(os.sep)
        plain = next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts))
        folders.add(os.sep.join(parts[:plain]) or os.sep)
        for depth in range(plain + 1, len(parts) + 1):
            folders.update(p for p in glob.glob(os.sep.join(parts[:depth])) if os.path.isdir(p))
    return folders
