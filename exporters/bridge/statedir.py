"""The state dir (positions, held links, dead letters): private to its owner, and writable, checked
before anything is read or shipped.

A bridge that can ship but not commit would ship the same lines again at every start, and fail each
time after shipping them; so a state file that cannot be written is a config error up front. What
the bridge keeps there copies the source logs (a dead letter holds whole lines), so the state dir is
created 0700 and its files 0600, and what an older version left open to group and others is
tightened once. The contents of a held-links folder are hard links to the source logs themselves:
their modes belong to the logs and are never touched.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from obsbox.config import ConfigError
from obsbox.exporters.bridge.deadletter import DeadLetter
from obsbox.exporters.bridge.modes import PRIVATE_FILE, private_dir
from obsbox.exporters.bridge.sources.hold import folder_for
from obsbox.exporters.bridge.sources.positions import PositionsFile, temporary

log = logging.getLogger(__name__)

STATE_FIX = "make it writable, or point settings.state_dir (--state-dir) at a writable folder"


def state_files(components: Iterable[object]) -> tuple[list[Path], list[Path]]:
    """The files the components will write there: positions files, and dead-letter files."""
    positions: list[Path] = []
    dead_letters: list[Path] = []
    for component in components:
        for value in vars(component).values():
            if isinstance(value, PositionsFile) and value.path is not None:
                positions.append(value.path)
            elif isinstance(value, DeadLetter):
                dead_letters.append(value.path)
    return positions, dead_letters


def prepare(state_dir: Path, components: Iterable[object]) -> None:
    """Create the state dir 0700, tighten what an older version left open, and check that every
    state file can be written; a ``ConfigError`` naming the path and the fix when one cannot."""
    positions, dead_letters = state_files(components)
    files = [*positions, *dead_letters, *state_dir.glob("dead-letter-*.jsonl")]  # any sink's give-up file
    folders = list(dict.fromkeys([state_dir, *(f.parent for f in files)]))
    for folder in folders:
        _writable_folder(folder)
    for path in files:
        _probe_file(path)
    held = [folder_for(p) for p in positions]  # the tail source's links (see hold): the folder only
    temporaries = [temporary(p) for p in positions]  # one a kill -9 left would keep its mode through the rename
    owned = (*folders, *files, *held, *temporaries)
    _tighten([p for p in owned if p == state_dir or state_dir in p.parents])


def _tighten(paths: Iterable[Path]) -> None:
    """Take group and other access away from the bridge's own paths; say so once."""
    changed: list[str] = []
    for path in dict.fromkeys(paths):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid() or not mode & 0o077:
            continue
        os.chmod(path, mode & ~0o077)
        changed.append(f"{path} {mode:04o} → {mode & ~0o077:04o}")
    if changed:
        log.warning("state files were readable by others (left by an older version); tightened: %s", ", ".join(changed))


def _writable_folder(folder: Path) -> None:
    """Create ``folder`` 0700 if missing, then a file in it and remove it: what saving positions needs."""
    probe = folder / f".obsbox-write-check-{os.getpid()}"
    try:
        private_dir(folder)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
        os.unlink(probe)
    except OSError as exc:
        raise _unwritable(folder, exc) from None


def _probe_file(path: Path) -> None:
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _unwritable(path, exc) from None


def _unwritable(path: Path, exc: OSError) -> ConfigError:
    return ConfigError(
        f"{path} cannot be written ({exc.strerror}); the bridge would ship lines it cannot commit, and ship "
        f"them again at every start: {STATE_FIX}",
        key="settings.state_dir",
    )
