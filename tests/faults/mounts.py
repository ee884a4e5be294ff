"""Real filesystems for faults a test cannot fake: a full disk (a small tmpfs) and a read-only
folder (a read-only bind mount). Both need root, as CI has; without it the test fails and says so."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def need_root(why: str) -> None:
    if os.geteuid() != 0:
        pytest.fail(f"this test needs root to {why} (CI runs as root); run it as root")


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "256k") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``: writes past it fail with ENOSPC, as on a full disk."""
    need_root("mount a small tmpfs (a real full filesystem)")
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """``path`` bind-mounted read-only over itself: even root gets EROFS there."""
    need_root("bind-mount a folder read-only (chmod does not stop root)")
    _mount("--bind", str(path), str(path))
    try:
        _mount("-o", "remount,ro,bind", str(path))
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill the filesystem of ``folder`` up to ``leave`` bytes free; the filler file, to free it later."""
    filler = folder / "filler"
    with open(filler, "ab", buffering=0) as handle:
        while True:
            st = os.statvfs(folder)
            room = st.f_bavail * st.f_frsize - leave
            if room <= 0:
                break
            try:
                handle.write(b"\0" * min(room, 64 * 1024))
            except OSError:
                break
    return filler
