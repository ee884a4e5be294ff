"""What the tail source may read, and how it says what it cannot.

- Symlinks are followed (Kubernetes' ``/var/log/containers/*.log`` are root's links into
  ``/var/log/pods``), but a link only escalates: a file reached through a link, or a chain of them,
  is read only if every link's owner could read it themselves (owner, group and other bits, and
  search permission on its folders). Root's links and the bridge's own user's are trusted. Anyone
  who can write into a watched folder then cannot make a root bridge ship ``/etc/shadow``.
- A folder the globs cannot list, a file the bridge may not open, a pattern that matches nothing:
  each is named with what it lacks, so an unreadable log folder is never a silent run of 0 lines.
- :class:`Problems`: a problem with one path is logged once, again only when it changes, or after
  it was fixed and came back; counted in ``obsbox_bridge_errors_total{kind}`` each time it starts,
  and shown in ``obsbox_bridge_source_problems{kind}`` while it lasts.

Permission bits are read the way the kernel checks them (the owner's class, else the group's,
else others'); ACLs and capabilities are not modelled, so a link is refused rather than trusted
when only an ACL would let its owner read the target.
"""

from __future__ import annotations

import errno
import glob
import grp
import logging
import os
import pwd
import re
import stat
from collections.abc import Container, Hashable

from obsbox.exporters.bridge.metrics import BridgeMetrics
from obsbox.exporters.bridge.sources.finder import FileKey, excluded

log = logging.getLogger(__name__)

MAX_LINKS = 40  # the kernel's limit on links followed in one path lookup (ELOOP beyond)
READ, SEARCH, LIST = 4, 1, 5  # permission bits wanted: read a file, search a folder, list one (r + x)
MAGIC = re.compile(r"[*?[]")


class Problems:
    """Per-path problems, said once (see the module docstring). A subject is (category, what):
    ("file", a tracked file's identity), ("path", a path), ("pattern", an include pattern)."""

    def __init__(self, metrics: BridgeMetrics) -> None:
        self.metrics = metrics
        self.current: dict[tuple[str, Hashable], tuple[str, str]] = {}  # subject → (kind, message)

    def report(self, subject: tuple[str, Hashable], kind: str, message: str) -> None:
        previous = self.current.get(subject)
        if previous == (kind, message):
            return
        if previous is not None:
            self.metrics.source_problems.labels(previous[0]).dec()
        self.current[subject] = (kind, message)
        self.metrics.errors.labels(kind).inc()
        self.metrics.source_problems.labels(kind).inc()
        log.warning("%s", message)

    def clear(self, subject: tuple[str, Hashable], fixed: str = "") -> None:
        """The problem of ``subject`` is over; ``fixed`` says so in the log (nothing said when empty)."""
        previous = self.current.pop(subject, None)
        if previous is None:
            return
        self.metrics.source_problems.labels(previous[0]).dec()
        if fixed:
            log.info("%s (was: %s)", fixed, previous[1])

    def retain(self, category: str, alive: Container[Hashable]) -> None:
        """Forget, silently, the problems of ``category`` whose subject is not ``alive`` (a file
        closed since, a path no glob matches any more)."""
        for subject in [s for s in self.current if s[0] == category and s[1] not in alive]:
            self.clear(subject)


# ---------------------------------------------------------------- who may read what


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def describe(st: os.stat_result) -> str:
    """``drwx--x--- root:root``, as ``ls -l`` shows it."""
    return f"{stat.filemode(st.st_mode)} {owner_name(st.st_uid)}:{group_name(st.st_gid)}"


def groups_of(uid: int, fallback_gid: int) -> set[int]:
    """The primary and supplementary groups of ``uid``; a user without a passwd entry (a container's
    arbitrary uid) is taken to have only the group its link was created with."""
    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        return {fallback_gid}
    return {user.pw_gid, *(g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem)}


def permits(uid: int, groups: set[int], st: os.stat_result, want: int) -> bool:
    """May ``uid`` (in ``groups``) do ``want`` (bits of rwx) with the file ``st``? The kernel's rule:
    the owner's bits for the owner, else the group's for a member, else the others'."""
    if uid == 0:
        return True
    if uid == st.st_uid:
        bits = st.st_mode >> 6
    elif st.st_gid in groups:
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & want == want


def may_read(uid: int, groups: set[int], path: str) -> bool:
    """May ``uid`` open the file at the resolved ``path``: search every folder above it, read it."""
    folder = os.path.dirname(path)
    while True:
        if not permits(uid, groups, os.stat(folder), SEARCH):
            return False
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return permits(uid, groups, os.stat(path), READ)


def remedy(st: os.stat_result, want: int) -> str:
    """Who would have ``want`` on ``st``: what to run the bridge as."""
    ways = ["as root"]
    if st.st_uid != 0 and (st.st_mode >> 6) & want == want:
        ways.append(f"as {owner_name(st.st_uid)}")
    if (st.st_mode >> 3) & want == want:
        ways.append(f"in group {group_name(st.st_gid)}")
    return "run the bridge " + " or ".join(ways)


# ---------------------------------------------------------------- symlinks


def resolve(path: str) -> tuple[str, list[tuple[str, os.stat_result]]]:
    """The file ``path`` names, and every link met on the way to it (a link to a folder in the path,
    a chain of links), each with its ``lstat``. Resolved one component at a time, as the kernel does."""
    parts = os.path.abspath(path).split(os.sep)[::-1]
    current = os.sep
    links: list[tuple[str, os.stat_result]] = []
    while parts:
        name = parts.pop()
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        st = os.lstat(candidate)
        if not stat.S_ISLNK(st.st_mode):
            current = candidate
            continue
        if len(links) >= MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        links.append((candidate, st))
        target = os.readlink(candidate)
        if target.startswith(os.sep):
            current = os.sep
        parts.extend(reversed(target.split(os.sep)))
    return current, links


def escalation(path: str, key: FileKey) -> str | None:
    """Why ``path`` must not be read: a link on its way whose owner could not read the file it
    reaches (None: nothing escalates). ``key`` is the file the glob found; the tracker opens only
    that inode, so a link swapped after this check is caught there."""
    target, links = resolve(path)
    bridge = os.geteuid()
    untrusted = [(link, st) for link, st in links if st.st_uid not in (0, bridge)]
    if not untrusted:
        return None
    st = os.stat(target)
    if (st.st_dev, st.st_ino) != key:
        return f"not reading {path}: it changed while its links were checked"
    for link, link_st in untrusted:
        if not may_read(link_st.st_uid, groups_of(link_st.st_uid, link_st.st_gid), target):
            return (
                f"not reading {path}: the link {link} belongs to {owner_name(link_st.st_uid)}, who may not read "
                f"{target} ({describe(st)}); a symlink never gives the bridge's privileges to its owner"
            )
    return None


# ---------------------------------------------------------------- why a pattern matches nothing


def unreadable(path: str, exc: OSError) -> str:
    """The line that says why the bridge cannot open ``path``."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        try:
            return f"cannot read {path} ({describe(os.stat(path))}): {remedy(os.stat(path), READ)}"
        except OSError:
            pass
    return f"cannot open {path}: {exc.strerror or exc}"


def blocked(pattern: str) -> str | None:
    """The first folder on the way of ``pattern`` that the bridge may not search, or list where the
    pattern has a wildcard, with what it lacks; None when every folder on the way is open to it."""
    absolute = pattern.startswith(os.sep)
    parts = [p for p in pattern.split(os.sep) if p]
    folders = [os.sep if absolute else "."]
    for depth, part in enumerate(parts):
        nearer: list[str] = []
        for folder in folders:
            wild = MAGIC.search(part) is not None
            want = LIST if wild else SEARCH
            if not os.access(folder, os.R_OK | os.X_OK if wild else os.X_OK):
                try:
                    st = os.stat(folder)
                except OSError:
                    continue
                verb = "list" if wild else "search"
                return f"cannot {verb} {folder} ({describe(st)}): {remedy(st, want)}"
            if depth == len(parts) - 1:
                continue
            paths = glob.glob(os.path.join(glob.escape(folder), part)) if wild else [os.path.join(folder, part)]
            nearer.extend(p for p in paths if os.path.isdir(p))
        folders = nearer
    return None


def nothing_matched(pattern: str, exclude: list[str]) -> tuple[str, str]:
    """(kind, message) for an include pattern that names no regular file."""
    expanded = os.path.expanduser(pattern)
    paths = sorted(glob.glob(expanded))
    folders = [p for p in paths if os.path.isdir(p)]
    if folders:
        return "not_a_file", f"{pattern} names a folder, not files: give a glob such as {folders[0]}/*.log"
    if paths and all(excluded(p, exclude) for p in paths):
        return "no_match", f"{pattern} matches only excluded files (exclude: {', '.join(exclude)})"
    if paths:
        return "no_match", f"{pattern} matches no regular file ({paths[0]} is not one)"
    why = blocked(expanded)
    if why is not None:
        return "permission", why
    return "no_match", f"{pattern} matches no file (yet)"
