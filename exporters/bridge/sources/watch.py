"""Folder watching: be told at once when a watched folder's entries change.

A scan once a ``scan_interval`` misses a file that lives under its watched name for less than one
interval: Docker renames a rotated file twice and deletes it within about 1.5 s at 200 KB/s. On
Linux the folders are watched with inotify (through ``ctypes``, no dependency), as Vector and Fluent
Bit do, and a scan runs as soon as an entry the globs may name is created, moved in or out, or
deleted (the caller judges the paths :meth:`FolderWatch.wait` returns, so a positions file saved
beside the logs wakes nothing); ``IN_Q_OVERFLOW`` (events were dropped), a folder that comes or goes
or a watch the kernel removed mean "scan", as every scan looks at everything. ``IN_MODIFY`` is not
asked for: growth is read by the pipeline's own polls, and an event per write would wake the watcher
thousands of times a second for nothing. Elsewhere, or when inotify is refused (no more instances or
watches), :meth:`FolderWatch.wait` only sleeps and the periodic scan remains, as it remains anyway as
a safety net.

Threading: one watcher thread owns a :class:`FolderWatch`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import select
import struct
import sys
from dataclasses import dataclass, field

from obsbox.exporters.bridge.metrics import BridgeMetrics

log = logging.getLogger(__name__)

IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000
RESCAN = IN_Q_OVERFLOW | IN_IGNORED | IN_ISDIR | IN_DELETE_SELF | IN_MOVE_SELF
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000
MASK = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


@dataclass
class Seen:
    """What one wait saw: the paths of the entries that changed, or ``everything`` (scan it all)."""

    paths: list[str] = field(default_factory=list)
    everything: bool = False


class FolderWatch:
    """inotify watches on a set of folders; ``enabled`` is False where there are none to be had."""

    def __init__(self, metrics: BridgeMetrics) -> None:
        self.metrics = metrics
        self.libc = _libc()
        self.fd = -1
        self.folders: dict[str, int] = {}  # folder → watch descriptor
        self.refused: set[str] = set()  # folders a watch was refused for (said once each)
        if self.libc is not None:
            self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if self.fd < 0:
                self._refused("inotify_init1", ctypes.get_errno())

    @property
    def enabled(self) -> bool:
        return self.fd >= 0

    def watch(self, folders: set[str]) -> None:
        """Watch ``folders`` (and stop watching those no longer asked for)."""
        if not self.enabled or self.libc is None:
            return
        for folder in list(self.folders):
            if folder not in folders:
                self.libc.inotify_rm_watch(self.fd, self.folders.pop(folder))
        for folder in folders - self.folders.keys():
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(folder), MASK)
            if wd >= 0:
                self.folders[folder] = wd
                self.refused.discard(folder)
                continue
            code = ctypes.get_errno()
            if code not in (errno.ENOENT, errno.ENOTDIR) and folder not in self.refused:
                self.refused.add(folder)  # e.g. ENOSPC: fs.inotify.max_user_watches reached
                self._refused(f"a watch on {folder}", code)

    def wait(self, timeout: float) -> Seen:
        """Block until a watched folder changes or ``timeout`` seconds pass (nothing seen)."""
        seen = Seen()
        if not self.enabled:
            return seen
        try:
            ready, _, _ = select.select([self.fd], [], [], timeout)
        except (OSError, ValueError):
            return seen
        if ready:
            self._drain(seen)
        return seen

    def _drain(self, seen: Seen) -> None:
        """Read every queued event; forget watches the kernel removed (their folder is gone)."""
        by_wd = {wd: folder for folder, wd in self.folders.items()}
        while True:
            try:
                data = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return
            except OSError:
                seen.everything = True
                return
            if not data:
                return
            at = 0
            while at + EVENT.size <= len(data):
                wd, mask, _cookie, size = EVENT.unpack_from(data, at)
                name = data[at + EVENT.size : at + EVENT.size + size].rstrip(b"\0")
                at += EVENT.size + size
                if mask & RESCAN or wd not in by_wd:
                    seen.everything = True
                else:
                    seen.paths.append(os.path.join(by_wd[wd], os.fsdecode(name)))
                if mask & IN_IGNORED:
                    self.folders = {f: w for f, w in self.folders.items() if w != wd}

    def close(self) -> None:
        if self.enabled:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def _refused(self, what: str, code: int) -> None:
        self.metrics.errors.labels("inotify").inc()
        log.warning(
            "inotify refused %s (%s): files there are found by the scan every scan_interval only",
            what,
            os.strerror(code),
        )
