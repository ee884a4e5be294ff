"""The tracker: which file is which across rotations and restarts, and what each one is for.

Every file the globs match, and every rotated generation of one (``finder.find_rotated``), is
opened once, keyed by (device, inode), and given a :class:`FileState` (compare the collector's
``fileconsumer/internal/tracker``). A file's *identity* is its inode plus the fingerprint of its
first line; its *generation* counts the truncations it went through. A saved position is claimed
only by a file there at start that holds the bytes its print covers (``FileReader.holds``): an inode
reused by a new file, even one with the same first line, starts at 0. Files of one *stream* (a live
name and its rotated generations) are read oldest first (``readable``).

State transitions (``update`` runs them after each glob scan; ``truncated`` when a read finds one):

====================  =====================================================  ==========
from                  when                                                   to
====================  =====================================================  ==========
(opened)              a glob matches a new inode, or a held link is found    PENDING
PENDING               first line complete; there at start, and a saved       ACTIVE at the saved offset
                      position has this inode and its first bytes
PENDING               first line equals an ACTIVE file's (a copy of it,      PARKED
                      made by copytruncate or cp)
PENDING               there at start; a saved position has its first bytes,  ACTIVE at the saved offset
                      not its inode (renamed or copied while stopped)
PENDING               none of the above: a new file                          ACTIVE at 0 (or at the end,
                                                                             ``start_at: end``, first scan)
PENDING               left the globs and idle for ``rotate_wait``            closed
PARKED                its original is truncated                              ACTIVE where the original
                                                                             was read to (it takes over)
PARKED                its content departs from the original's                ACTIVE at 0
PARKED                the original was drained and closed                    ACTIVE at the original's
                                                                             last line start
PARKED                left the globs, idle, every line acknowledged from     closed
                      the original's same generation
ACTIVE                truncated (size below offset, or first line changed)   PENDING, generation + 1,
                                                                             then classified again
ACTIVE                left the globs and their rotated names, idle for       closed
                      ``rotate_wait``, read to its end, every line acked
====================  =====================================================  ==========

A rotated generation no saved position claims at start is read from 0, like any new file: an
earlier run keeps the position of every generation it tracked while a rotated name names it, so an
unclaimed one is one no run acknowledged anything of (a copytruncate copy made while the bridge was
down, or while a sink refused and nothing was saved).

Offsets advance only through ``commit`` (every sink acknowledged a batch). A batch read from a file
that was truncated since carries the old generation; its acknowledgement goes to the copy that took
over (``successors``). Threading: called under the tail source's lock only.
"""

from __future__ import annotations

import enum
import errno
import itertools
import logging
import os
import stat
import time
from collections.abc import Callable, Mapping
from typing import Any

from obsbox.exporters.bridge.metrics import BridgeMetrics
from obsbox.exporters.bridge.record import Clock, Record
from obsbox.exporters.bridge.sources.access import Problems, escalation, unreadable
from obsbox.exporters.bridge.sources.backlog import Backlog
from obsbox.exporters.bridge.sources.finder import FileKey, find_files, find_in_folder, rotation_place
from obsbox.exporters.bridge.sources.hold import Holder
from obsbox.exporters.bridge.sources.positions import Position
from obsbox.exporters.bridge.sources.reader import FileReader

log = logging.getLogger(__name__)


class FileState(enum.Enum):
    PENDING = "pending"  # opened; its first line, so its identity, is not complete yet
    PARKED = "parked"  # a copy of an ACTIVE file: read only if it has to take over
    ACTIVE = "active"  # being read


class Tracked:
    """The tracker's entry for one file: its reader, its state, and where it stands in rotation."""

    def __init__(self, fid: int, reader: FileReader, held: str | None) -> None:
        self.id = fid
        self.reader = reader
        self.state = FileState.PENDING
        self.parked_on: Tracked | None = None
        self.parked_generation = 0  # the original's generation when this copy was parked on it
        self.generation = 0
        self.live = True  # a path matching the globs still names this inode
        self.rotated_name = False  # a rotated name of a file the globs match names it (x.log.1)
        self.held = held  # our hard link to it (see hold.py)
        self.backlog = Backlog()  # what waits in it, for the lag and age gauges
        self.stream, self.order = rotation_place(reader.path)  # which live name it was or is, and how old
        self.carried_from: Tracked | None = None  # an older generation whose open join this one completes

    def place(self, path: str) -> None:
        """Follow a rename; the new name says where the file now stands among its stream's."""
        self.reader.rename(path)
        self.stream, self.order = rotation_place(path)

    @property
    def key(self) -> FileKey:
        return (self.reader.dev, self.reader.ino)

    @property
    def path(self) -> str:
        return self.reader.path

    @property
    def emitted(self) -> int:
        return self.reader.emitted

    @property
    def acked(self) -> int:
        return self.reader.acked

    def activate(self, offset: int, acked: int | None = None, clock: Clock = ()) -> None:
        self.state = FileState.ACTIVE
        self.parked_on = None
        self.reader.start_at(offset, acked, clock)


FileMark = tuple[int, int]  # (file id, generation): a checkpoint maps each to the offset emitted up to,
# so a batch that read a file before and after a truncation acknowledges both generations


class Tracker:
    """Identity and rotation for one tail source (see the module docstring for the transitions)."""

    def __init__(
        self,
        include: list[str],
        exclude: list[str],
        reader_options: Mapping[str, Any],
        *,
        saved: list[Position],
        holder: Holder,
        metrics: BridgeMetrics,
        once: bool,
        start_at_end: bool,
        rotate_wait: float,
        max_open_files: int,
        problems: Problems | None = None,
    ) -> None:
        self.include, self.exclude = include, exclude
        self.problems = problems or Problems(metrics)
        self.reader_options = dict(reader_options)
        self.saved = saved
        self.holder = holder
        self.metrics = metrics
        self.once = once
        self.start_at_end = start_at_end and not once
        self.rotate_wait = rotate_wait
        self.max_open_files = max_open_files
        self.files: dict[FileKey, Tracked] = {}
        self.by_id: dict[int, Tracked] = {}
        self.successors: dict[tuple[int, int], Tracked] = {}  # (file id, old generation) → the copy taking over
        self.refused: set[FileKey] = set()  # files whose saved position was refused (logged once)
        self.resumable: set[FileKey] = set()  # files there at start whose first line is not complete yet
        self.claimed: list[Position] = []  # the saved positions files started at (``--once`` says so)
        self.next_id = 0
        self.scans = 0
        self.closed_bytes = 0  # bytes read from files since closed, so progress never goes back
        self.recovering = False  # a file rotated while we were down could not be opened or checked yet
        self.open_failures = 0

    # ---------------------------------------------------------------- discovery

    def update(self, found: Mapping[FileKey, str], rotated: Mapping[FileKey, str]) -> None:
        """Apply a glob scan (``found``, and ``rotated``: the rotated names of what the globs match):
        follow renames, open new files, run the state transitions."""
        for key, tracked in self.files.items():
            path = found.get(key) or rotated.get(key)
            tracked.live = key in found
            tracked.rotated_name = key in rotated
            if path is not None and path != tracked.path:
                self.metrics.lag.remove_path(tracked.path)
                self.metrics.unacked_age.remove_path(tracked.path)
                self.metrics.file_format.remove_path(tracked.path)
                tracked.place(path)
                if tracked.state is not FileState.PENDING:
                    self.metrics.file_format.set_path(path, tracked.reader.read_as())
        rotated_paths = set(rotated.values())
        for tracked in self._open_new({**rotated, **found}):
            if tracked.path in rotated_paths:
                tracked.live, tracked.rotated_name = False, True
        first = self.scans == 0
        if first:
            self._reopen_held()
        if first or self.recovering:
            self.recovering = not self._recover_safely()
        pending = self.in_state(FileState.PENDING)
        # same inode, same content: resume, before any look-alike claims it
        self._each(pending, self._resume_by_inode)
        self._each([t for t in pending if t.state is FileState.PENDING], self.classify)
        if first:
            self.resumable = {tracked.key for tracked in self.in_state(FileState.PENDING)}
        if not self.recovering:  # unclaimed saved positions are let go once rotated files are checked
            self._forget_saved()
        self._each(self.in_state(FileState.PARKED), self._check_parked)
        for tracked in self.files.values():
            tracked.reader.recheck = True
        self._close_drained()
        self._each(self.in_state(FileState.ACTIVE), lambda t: t.reader.spare())
        self.scans += 1

    def _forget_saved(self) -> None:
        """Saved positions are for the files there at start. Once none of those waits for its first
        line, the positions left name files that no longer exist; a file that appears later is new,
        even on the inode (and with the first bytes) of one of them."""
        files = self.files
        if self.saved and not any(key in files and files[key].state is FileState.PENDING for key in self.resumable):
            log.info("%d saved positions name files that no longer exist; forgetting them", len(self.saved))
            self.metrics.resumes.labels("forgotten").inc(len(self.saved))
            self.saved.clear()

    def in_state(self, state: FileState) -> list[Tracked]:
        return [t for t in self.files.values() if t.state is state]

    def _open(self, path: str, key: FileKey, follow: bool = True) -> Tracked | None:
        if len(self.files) >= self.max_open_files:
            self.metrics.errors.labels("open_files_limit").inc()
            log.warning(
                "not opening %s: %d files are open (max_open_files); rotated files that are deleted "
                "before the bridge catches up will be lost",
                path,
                len(self.files),
            )
            return None
        fd = self._descriptor(path, key)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != key:  # replaced between stat and open: open what it names now
                os.close(fd)
                return self._open_replaced(path, key) if follow else None
            reader = FileReader(path, fd, *key, **self.reader_options)
            tracked = Tracked(self.next_id, reader, self.holder.hold(*key, path))
        except OSError as exc:
            os.close(fd)
            self.open_failures += 1
            self.problems.report(("path", path), "read", f"cannot read {path}: {exc.strerror or exc}; tried again")
            return None
        self.problems.clear(("path", path), f"reading {path}")
        log.debug("opened %s (inode %d, %d bytes, held: %s)", path, key[1], st.st_size, tracked.held)
        self.next_id += 1
        self.files[key] = tracked
        self.by_id[tracked.id] = tracked
        return tracked

    def _open_replaced(self, path: str, seen: FileKey) -> Tracked | None:
        """``path`` names another file than the scan's stat saw (a rotation renamed a copy onto it
        since): that file, opened now, once. Left to the next scan, it could be replaced in turn
        before that scan, and with it the only copy of a generation nothing acknowledged yet."""
        try:
            st = os.stat(path)
        except OSError:
            return None  # gone too: the next scan sees what comes
        key = (st.st_dev, st.st_ino)
        if key == seen or key in self.files or not stat.S_ISREG(st.st_mode):
            return None
        return self._open(path, key, follow=False)

    def _descriptor(self, path: str, key: FileKey) -> int | None:
        """``path`` opened for reading, unless a symlink on its way escalates (see ``access``) or it
        cannot be opened: then None, and said once."""
        try:
            refused = escalation(path, key)
            if refused is None:
                return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None  # vanished since the scan
        except OSError as exc:
            self.open_failures += 1
            kind = "permission" if exc.errno in (errno.EACCES, errno.EPERM) else "open"
            self.problems.report(("path", path), kind, unreadable(path, exc))
            return None
        self.open_failures += 1
        self.problems.report(("path", path), "symlink", refused)
        return None

    def _open_new(self, found: Mapping[FileKey, str]) -> list[Tracked]:
        """Open what is not open yet, each stream's oldest generation first."""
        new = sorted(((path, key) for key, path in found.items() if key not in self.files), key=_oldest_first)
        opened = (self._open(path, key) for path, key in new)
        return [tracked for tracked in opened if tracked is not None]

    def _reopen_held(self) -> None:
        """Files an earlier run held with links: some may be gone from the globs, even deleted."""
        for link in self.holder.held():
            try:
                st = os.stat(link)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in self.files:
                self.files[key].held = link
                continue
            tracked = self._open(link, key)
            if tracked is not None:  # a generation seen during an outage has no position yet: read it
                tracked.live = False
                for saved in self.saved:  # deleted since: the oldest of the stream it was saved in
                    if (saved.dev, saved.ino) == key:
                        tracked.stream = rotation_place(saved.path)[0]

    def _recover_rotated(self) -> None:
        """Saved files no glob matches any more were rotated while we were down: drain them."""
        for saved in list(self.saved):
            key = (saved.dev, saved.ino)
            if key in self.files:
                continue
            path = find_in_folder(os.path.dirname(saved.path), key)
            if path is None:
                continue
            tracked = self._open(path, key)
            if tracked is None:
                continue
            if not tracked.reader.holds(saved):
                self.forget(tracked)  # the inode was reused by another file
                continue
            self.metrics.resumes.labels("resumed").inc()
            tracked.live = False
            self.resumable.add(key)  # there at start, though opened at a later scan if the first failed
            self.classify(tracked)
            log.info("draining %s, rotated away from %s while the bridge was stopped", path, saved.path)

    def _recover_safely(self) -> bool:
        """``_recover_rotated``, where one file's OS error leaves the rest to the next scan (that file
        is open by then, so skipped, and classified like any other once it can be read)."""
        failures = self.open_failures
        try:
            self._recover_rotated()
        except OSError as exc:
            why = f"cannot check the files rotated while the bridge was stopped ({exc.strerror or exc}); trying again"
            self.problems.report(("scan", "recover"), "read", why)
            return False
        self.problems.clear(("scan", "recover"), "checked the files rotated while the bridge was stopped")
        return self.open_failures == failures

    # ---------------------------------------------------------------- classification

    def _identify(self, tracked: Tracked) -> bool:
        """Learn the file's identity; False while its first line is still being written."""
        reader = tracked.reader
        if not reader.identify(allow_incomplete=self.once):
            if reader.problem is not None:
                why = f"{tracked.path} {reader.problem}: not read, nothing of it shipped; read when it changes"
                self.problems.report(("file", tracked.key), reader.problem.kind, why)
            return False
        if reader.compressed:
            self.problems.clear(("file", tracked.key), f"reading {tracked.path}, {reader.compressed}-compressed")
        self.metrics.file_format.set_path(tracked.path, tracked.reader.read_as())
        if self.once:
            tracked.reader.limit = os.fstat(tracked.reader.fd).st_size
        return True

    def _resume_by_inode(self, tracked: Tracked) -> None:
        if self._identify(tracked):
            saved = self._claim_saved(tracked, by_inode=True)
            if saved is not None:
                self._start(tracked, saved.offset, "its saved position", saved.clock)

    def classify_grown(self) -> None:
        """PENDING files whose first line may have been completed since the last look."""
        self._each(self.in_state(FileState.PENDING), self._classify_if_grown)

    def _classify_if_grown(self, tracked: Tracked) -> None:
        if os.fstat(tracked.reader.fd).st_size > len(tracked.reader.fp.head):
            self.classify(tracked)

    def classify(self, tracked: Tracked) -> None:
        """Run the PENDING transitions for one file."""
        if not self._identify(tracked):
            return  # identity unknown, and nothing to emit yet
        saved = self._claim_saved(tracked, by_inode=True)
        if saved is not None:
            self._start(tracked, saved.offset, "its saved position", saved.clock)
            return
        original = self._original_of(tracked)
        if original is not None:
            tracked.state, tracked.parked_on, tracked.parked_generation = (
                FileState.PARKED,
                original,
                original.generation,
            )
            log.debug("%s (inode %d) parked as a copy of %s", tracked.path, tracked.reader.ino, original.path)
            return
        saved = self._claim_saved(tracked, by_inode=False)
        if saved is not None:  # renamed or copied while we were not running
            self._start(tracked, saved.offset, f"the saved position of {saved.path} (inode {saved.ino})", saved.clock)
            return
        reader = tracked.reader
        at_end = self.scans == 0 and self.start_at_end
        self._start(tracked, reader.line_boundary_before(reader.current_size()) if at_end else 0, "a new file")

    def _start(self, tracked: Tracked, offset: int, why: str, clock: Clock = ()) -> None:
        tracked.activate(offset, clock=clock)
        log.debug("%s (inode %d) starts at %d: %s", tracked.path, tracked.reader.ino, offset, why)

    def _claim_saved(self, tracked: Tracked, by_inode: bool) -> Position | None:
        """The saved position whose content this file holds (on its inode, or on any), taken out of
        ``saved``. A position on this inode whose content the file does not hold is refused: the
        inode was reused by a new file (deleted and created while the bridge was stopped)."""
        if self.scans and tracked.key not in self.resumable:
            return None  # appeared while the bridge runs: new
        for i, saved in enumerate(self.saved):
            same_inode = (saved.dev, saved.ino) == tracked.key
            if by_inode and not same_inode:
                continue
            if tracked.reader.holds(saved):
                del self.saved[i]
                self.claimed.append(saved)
                self.metrics.resumes.labels("resumed" if same_inode else "moved").inc()
                return saved
            if same_inode and tracked.key not in self.refused:
                self.refused.add(tracked.key)
                self.metrics.resumes.labels("new_content").inc()
                log.warning(
                    "%s (inode %d) does not hold the content its saved position was taken of (a new file on "
                    "a reused inode, or one rewritten while the bridge was stopped): not resuming at offset %d",
                    tracked.path,
                    saved.ino,
                    saved.offset,
                )
        return None

    def _original_of(self, tracked: Tracked) -> Tracked | None:
        head = tracked.reader.fp.head
        for other in self.files.values():
            if (
                other is not tracked
                and other.state is FileState.ACTIVE
                and other.reader.fp.complete
                and other.reader.fp.head == head
            ):
                return other
        return None

    def _check_parked(self, copy: Tracked) -> None:
        """A parked copy whose content departs from its original is a file of its own after all."""
        original = copy.parked_on
        if original is None or original.id not in self.by_id:
            # the original was drained and closed: the copy supplies anything beyond it
            if original is None:
                copy.activate(0)
            else:
                copy.activate(original.reader.line_start(), clock=original.reader.clock)
            return
        if copy.reader.continues(original.reader) is False:
            log.info(
                "%s shares its first line with %s but not its content: reading it as a new file",
                copy.path,
                original.path,
            )
            copy.activate(0)

    # ---------------------------------------------------------------- order within a stream

    def readable(self) -> list[Tracked]:
        """The ACTIVE files to read now. Of one stream (a live name and its rotated generations) the
        oldest comes first, and a file is read only once every older one is read to its end: a
        rotated generation is drained before the file that replaced it is read further. An older
        generation read to its end hands its open join (a line the runtime cut across the rotation)
        to the next one; a multiline record it holds goes out first (with that join, or alone,
        before the next one is read)."""
        streams: dict[str, list[Tracked]] = {}
        for tracked in self.files.values():
            if tracked.state is FileState.ACTIVE:
                streams.setdefault(tracked.stream, []).append(tracked)
        ready: list[Tracked] = []
        for files in streams.values():
            files.sort(key=_age)
            for older, newer in itertools.pairwise(files):
                ready.append(older)
                if not older.reader.read_to_end():
                    break
                older.reader.superseded = True  # a record it holds goes out now, ahead of the newer's lines
                if newer.reader.take_join(older.reader):  # hands its held records over too
                    newer.carried_from = older
                elif older.reader.holding():
                    break
            else:
                ready.append(files[-1])
        return ready

    def settle(self, tracked: Tracked, checkpoint: dict[FileMark, int]) -> None:
        """Once the line ``tracked`` took over from an older generation is complete, the batch that
        carries it also acknowledges the rest of that generation."""
        older = tracked.carried_from
        if older is None or tracked.reader.joining():
            return
        tracked.carried_from = None
        if older.id in self.by_id:
            checkpoint[(older.id, older.generation)] = older.reader.release_join()

    # ---------------------------------------------------------------- truncation

    def truncated(self, tracked: Tracked, why: str, previous_size: int) -> list[Record]:
        """A read found ``tracked`` truncated (copytruncate): hand its unread lines over to its copy,
        if one matches the globs, and start its new generation. Returns its last, partial lines when
        no copy exists (the start of a line is better than nothing)."""
        self.metrics.rotations.labels("copytruncate").inc()
        reader = tracked.reader
        resume = reader.line_start()
        copies = self._copies_of(tracked)
        if not copies:  # truncated between scans: look again for a copy that just appeared
            self._each(self._open_new(find_files(self.include, self.exclude)), self.classify)
            copies = self._copies_of(tracked)
        copy = max(copies, key=lambda f: f.reader.current_size()) if copies else None
        for other in copies:  # earlier snapshots of the same content: the largest copy has their lines
            if other is not copy:
                self.forget(other)
        last: list[Record] = []
        if copy is not None:
            log.info(
                "%s was truncated (%s); %s supplies the lines from offset %d", tracked.path, why, copy.path, resume
            )
            # lines before ``resume`` may still be in the batch in flight: the copy is acknowledged only as
            # far as the original was, and that batch's checkpoint is carried over to the copy on commit
            copy.activate(resume, acked=reader.acked, clock=reader.clock)  # the lines in flight keep their times
            self.successors[(tracked.id, tracked.generation)] = copy
        else:
            last = reader.take_partial(advance=not self.once)
            log.warning(
                "%s was truncated (%s) and no copy of it matches the globs; lines written "
                "after offset %d and before the truncation cannot be read",
                tracked.path,
                why,
                resume,
            )
            self.metrics.unread.inc(max(0, previous_size - reader.read_offset))
        tracked.generation += 1
        reader.restart()
        tracked.state = FileState.PENDING
        self.classify(tracked)
        return last

    def _copies_of(self, original: Tracked) -> list[Tracked]:
        return [f for f in self.files.values() if f.parked_on is original and f.state is FileState.PARKED]

    # ---------------------------------------------------------------- acknowledgement and closing

    def commit(self, checkpoint: Mapping[FileMark, int]) -> list[Position]:
        """Every sink acknowledged the batch that carried ``checkpoint``; the positions to save."""
        for (fid, generation), offset in checkpoint.items():
            tracked = self.by_id.get(fid)
            if tracked is None or tracked.generation != generation:
                # that content lives in its copy now (even once the original is closed); kept, as
                # several batches in flight may carry it
                tracked = self.successors.get((fid, generation))
            if tracked is not None and tracked.id in self.by_id and offset > tracked.reader.acked:
                tracked.reader.acked = min(offset, tracked.reader.emitted)
        for tracked in self.in_state(FileState.ACTIVE):
            tracked.reader.advance_clock()
            self._gauge(tracked, tracked.reader.size, time.monotonic())
        return self.positions()

    def positions(self) -> list[Position]:
        """The positions to save as they stand: acknowledged offsets and clock anchors."""
        entries = []
        for tracked in self.in_state(FileState.ACTIVE):
            reader = tracked.reader
            fingerprint, covers = reader.head_mark()
            entries.append(
                Position(
                    reader.path,
                    reader.dev,
                    reader.ino,
                    fingerprint,
                    reader.acked,
                    covers,
                    reader.clock,
                    bool(reader.compressed),
                )
            )
        return entries + self.saved

    # ---------------------------------------------------------------- what waits, and failures

    def measure(self) -> None:
        """Lag and oldest unacknowledged age of every file from its size now (on every scan, so
        both grow while a sink is down or a worker holds lines)."""
        now = time.monotonic()
        for tracked in list(self.files.values()):
            if tracked.state is FileState.PARKED:  # its bytes are counted on its original
                self.metrics.lag.remove_path(tracked.path)
                self.metrics.unacked_age.remove_path(tracked.path)
                continue
            try:
                size = tracked.reader.current_size()
            except OSError as exc:
                self.failed(tracked, exc)
                continue
            self._gauge(tracked, size, now)

    def _gauge(self, tracked: Tracked, size: int, now: float) -> None:
        backlog, acked = tracked.backlog, tracked.reader.acked
        backlog.seen(size, tracked.generation, now)
        self.metrics.lag.set_path(tracked.path, backlog.lag(acked))
        self.metrics.unacked_age.set_path(tracked.path, backlog.age(acked, now))

    def _each(self, files: list[Tracked], action: Callable[[Tracked], object]) -> None:
        """Run ``action`` on each file; an OS error is that file's alone (see ``failed``)."""
        for tracked in files:
            self._safely(tracked, action)

    def _safely(self, tracked: Tracked, action: Callable[[Tracked], object]) -> None:
        try:
            action(tracked)
        except OSError as exc:
            self.failed(tracked, exc)

    def failed(self, tracked: Tracked, exc: OSError) -> None:
        """An OS call on one file failed (EIO from a bad disk, ESTALE on NFS, ...): said once,
        counted, and the file is tried again later; the other files go on."""
        self.problems.report(
            ("file", tracked.key),
            "read",
            f"cannot read {tracked.path}: {exc.strerror or exc}; the other files go on, this one is tried again",
        )

    def at_rest(self, tracked: Tracked) -> bool:
        """A trailing partial line is final at the end of a --once read, or when its file was rotated
        away and stayed idle (the writer moved on): emit it rather than lose it."""
        if not tracked.reader.has_partial():
            return False
        return self.once or (not tracked.live and tracked.reader.idle_for() > self.rotate_wait)

    def _close_drained(self) -> None:
        self._each(list(self.files.values()), self._close_if_drained)

    def _close_if_drained(self, tracked: Tracked) -> None:
        idle = tracked.reader.idle_for() > self.rotate_wait
        if tracked.live or tracked.state is FileState.PENDING:
            if not tracked.live and not tracked.rotated_name and idle:
                self.forget(tracked)  # gone before its first line was complete
            return
        if tracked.state is FileState.PARKED:
            if idle and self._covered(tracked):
                self.forget(tracked)  # a copy that left the globs: its original has the lines
        elif idle and tracked.reader.drained() and not tracked.rotated_name:
            # a partial line left is emitted by the next poll, closed after its ack; a generation still
            # under a rotated name stays open, so a later scan does not take it for a new file
            self.forget(tracked)

    def _covered(self, copy: Tracked) -> bool:
        """Every line of a parked copy has been acknowledged from its original (same generation).

        Until then the copy stays open even after it leaves the globs: the original may have been
        truncated since, unseen while a sink was down, and the copy then holds the only lines."""
        original = copy.parked_on
        if original is None or original.id not in self.by_id:
            return False  # _check_parked activates it instead
        size = os.fstat(copy.reader.fd).st_size
        return original.generation == copy.parked_generation and original.reader.acked >= size

    def forget(self, tracked: Tracked, release: bool = True) -> None:
        """Close a file we are done with; ``release`` also drops its hard link (not at shutdown:
        the next run still needs what was not acknowledged)."""
        reader = tracked.reader
        self.closed_bytes += reader.read_offset
        log.debug(
            "closing %s (inode %d, %s, read %d, acked %d of %d, release %s)",
            reader.path,
            reader.ino,
            tracked.state.value,
            reader.read_offset,
            reader.acked,
            reader.size,
            release,
        )
        reader.close()
        if release:
            self.holder.release(tracked.held)
        # a copy taking over from this file keeps its entry: batches in flight may still carry its lines
        self.successors = {k: v for k, v in self.successors.items() if v is not tracked}
        del self.files[tracked.key]
        del self.by_id[tracked.id]
        self.metrics.lag.remove_path(reader.path)
        self.metrics.unacked_age.remove_path(reader.path)
        self.metrics.file_format.remove_path(reader.path)
        for other in self.files.values():
            if other.parked_on is tracked:
                self._check_parked(other)

    def close_all(self) -> None:
        """Shutdown: close every file, keeping the hard links of what is not acknowledged."""
        for tracked in list(self.files.values()):
            self.forget(tracked, release=False)


def _age(tracked: Tracked) -> tuple[bool, tuple[int, int], int]:
    """Older generations of a stream sort first: those no name names any more (rotated past the
    last number, deleted), then by their names' order at the last scan, then by when they were opened."""
    present = tracked.live or tracked.rotated_name
    return present, tracked.order if present else (0, 0), tracked.id


def _oldest_first(item: tuple[str, FileKey]) -> tuple[str, tuple[int, int], str]:
    stream, order = rotation_place(item[0])
    return stream, order, item[0]
