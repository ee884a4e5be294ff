"""Hold tracked files with hard links in the state dir, so rotation cannot delete unread lines.

An open descriptor keeps a rotated-and-deleted file readable only while the process lives. A hard
link keeps it across ``kill -9`` too, at no copying cost: logrotate may delete the file while a sink
is down, and the bridge still reads it after a restart. The link is removed once every line of the
file is acknowledged and the file has left the globs.

Hard links need the state dir on the same filesystem as the logs and write access to it; where
that is not so (a read-only mount, another volume) holding turns itself off, says so once, and the
bridge falls back to descriptors. The folder is its owner's only (0700); the links keep the modes
of the logs they are.

logrotate (3.19 and later) will not touch a file with more than one link: it skips rotating it
("Rotation of files with multiple hard links is not allowed", said only with -v) and fails to
compress it, so a held file under logrotate would grow for ever. By default (``auto``) only the
files container runtimes rotate are held (``containers.rotated_by_a_runtime``): kubelet and Docker
rename and compress in their own code. ``every`` holds any file, for rotation that allows it
(logrotate's ``allowhardlink``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from pathlib import Path

from obsbox.exporters.bridge.modes import private_dir
from obsbox.exporters.bridge.sources.containers import rotated_by_a_runtime

log = logging.getLogger(__name__)


def folder_for(positions: Path) -> Path:
    """Where a tail source whose positions are kept in ``positions`` holds its links."""
    return positions.with_suffix(".held")


class Holder:
    def __init__(self, folder: Path | None, every: bool = False) -> None:
        self.folder = folder
        self.enabled = folder is not None
        self.every = every  # hold any file, not only those a container runtime rotates
        self.count = 0  # links made by this process

    def link_path(self, dev: int, ino: int) -> Path:
        if self.folder is None:
            raise RuntimeError("Holder.link_path: holding is off (no folder for the links)")
        return self.folder / f"{dev}-{ino}"

    def hold(self, dev: int, ino: int, path: str) -> str | None:
        """Link the file we opened as (dev, ino) at ``path``; the link's path, or None."""
        folder = self.folder
        if not self.enabled or folder is None or not (self.every or rotated_by_a_runtime(path)):
            return None
        target = self.link_path(dev, ino)
        try:
            private_dir(folder)  # the links are the logs themselves: only the owner may list them
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(target)
                if (st.st_dev, st.st_ino) == (dev, ino):
                    return str(target)  # held already, by an earlier run
                target.unlink()  # a stale link to an inode number since reused
            # by name, then verified below: linking the descriptor itself (linkat with AT_EMPTY_PATH or
            # through /proc/self/fd) needs privileges or kernel support that cannot be assumed
            os.link(path, target)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.EROFS, errno.EACCES, errno.EMLINK, errno.ENOTSUP):
                self.enabled = False
                log.info(
                    "not holding rotated files with hard links (%s: %s); a rotated file deleted while "
                    "the bridge is stopped is lost",
                    path,
                    exc.strerror,
                )
            return None  # ENOENT: the file was deleted before it could be held; the descriptor still reads it
        st = os.stat(target)
        if (st.st_dev, st.st_ino) != (dev, ino):  # the name moved on to a newer file: never hold the wrong data
            target.unlink()
            return None
        self.count += 1
        return str(target)

    def release(self, link: str | None) -> None:
        if link:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)

    def held(self) -> list[str]:
        """Every link left by an earlier run."""
        folder = self.folder
        if not self.enabled or folder is None or not folder.is_dir():
            return []
        return sorted(str(p) for p in folder.iterdir() if p.is_file())
