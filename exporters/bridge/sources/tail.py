"""``tail``: follow files and globs, through rename and copytruncate rotation, without losing a line.

A file is known by its identity, (device, inode) plus a fingerprint of its first line, never by its
name. How each rotation is handled:

- rename + create: the old inode stays open and is read to its end; the new file is read from 0.
  A renamed file that still matches the globs is recognised by its inode and not read twice.
- copytruncate: the truncation is seen (size below our offset, or a changed first line). A copy that
  matches the globs was parked as "copy of" the original when it appeared; it now supplies the lines
  from where the original was read to, and the original restarts from the top.
- restart: saved positions are matched by inode and fingerprint, then by fingerprint alone (the file
  was renamed or copied while we were down); a saved file that left the globs is looked for beside
  its old path and drained.

Offsets advance only through ``commit`` (every sink acknowledged), so delivery is at-least-once.

While a sink is down the pipeline thread blocks in retries, yet files keep rotating: a watcher
thread keeps matching the globs and opening what appears, so a generation that is rotated away
and deleted during an outage is still held open, and read once the sink is back (the files are
the buffer; ``max_open_files`` bounds it). Each tracked file is also held by a hard link in the
state dir (see ``hold``), so what a rotation deletes survives ``kill -9`` as well.

Threading: ``poll``/``commit`` come from the pipeline thread, ``scan`` also from the watcher;
``self.lock`` guards all state.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from obsbox.exporters.bridge.component import Source
from obsbox.exporters.bridge.record import Batch, Origin, Record
from obsbox.exporters.bridge.sources.fingerprint import DEFAULT_LIMIT, Fingerprint, read_fingerprint
from obsbox.exporters.bridge.sources.hold import Holder
from obsbox.exporters.bridge.sources.positions import Position, PositionsFile

log = logging.getLogger(__name__)

COMPRESSED = ["*.gz", "*.bz2", "*.xz", "*.zst", "*.zip", "*.lz4"]
SAMPLE = 64  # bytes remembered from the end of what was read, to tell a true copy from a look-alike


@dataclass
class TailConfig:
    include: list[str]
    exclude: list[str] = field(default_factory=lambda: list(COMPRESSED))
    positions: Path | None = None
    save_positions: bool = True
    start_at: Literal["beginning", "end"] = "beginning"
    once: bool = False
    max_line_bytes: int = 1024 * 1024
    read_chunk_bytes: int = 1024 * 1024
    poll_interval: float = 0.1
    scan_interval: float = 1.0
    rotate_wait: float = 5.0
    fingerprint_bytes: int = DEFAULT_LIMIT
    max_open_files: int = 1024
    hold_files: bool = True

    def __post_init__(self) -> None:
        if not self.include:
            raise ValueError("include needs at least one file or glob")
        if self.max_line_bytes < 64:
            raise ValueError("max_line_bytes must be at least 64")


class Tracked:
    """One open file (one inode) and how far it has been read, emitted and acknowledged."""

    def __init__(self, fid: int, path: str, fd: int, dev: int, ino: int) -> None:
        self.id, self.path, self.fd, self.dev, self.ino = fid, path, fd, dev, ino
        self.fp = Fingerprint(b"", False)
        self.origin = Origin(path, b"")
        self.state: Literal["pending", "parked", "active"] = "pending"
        self.parked_on: Tracked | None = None
        self.parked_generation = 0  # the original's generation when this copy was parked on it
        self.generation = 0
        self.read_offset = 0  # next byte to read
        self.partial = b""  # bytes after the last newline, not yet a line
        self.skipping: Record | None = None  # an overlong line, truncated, waiting for its newline
        self.emitted = 0  # end of the last line handed out
        self.acked = 0  # end of the last line every sink acknowledged
        self.limit: int | None = None  # --once: read up to the size seen at the start
        self.size = 0
        self.live = True  # a path matching the globs still names this inode
        self.held: str | None = None  # our hard link to it (see hold.py)
        self.last_growth = time.monotonic()
        self.sample: tuple[int, bytes] = (0, b"")  # (end offset, bytes before it) of our last read
        self.recheck = False  # verify the first line at the next read, even if the file did not grow

    def line_start(self) -> int:
        """Offset of the first byte not yet part of an emitted line."""
        if self.skipping is not None:
            return self.skipping.offset
        return self.read_offset - len(self.partial)

    def identify(self, fp: Fingerprint) -> None:
        self.fp = fp
        self.origin = Origin(self.path, fp.digest)

    def start_at(self, offset: int, acked: int | None = None) -> None:
        """Read from ``offset``; ``acked`` is lower when lines before it are still in flight."""
        self.state = "active"
        self.parked_on = None
        self.read_offset = self.emitted = offset
        self.acked = offset if acked is None else acked
        self.partial, self.skipping = b"", None


class TailSource(Source):
    """Follow ``include`` globs (see the module docstring for the rotation rules)."""

    type = "tail"
    Config = TailConfig

    def __init__(self, config: TailConfig, context) -> None:
        super().__init__(config, context)
        self.cfg = config
        self.metrics = context.metrics
        self.positions = PositionsFile(self._positions_path() if config.save_positions else None)
        self.saved: list[Position] = self.positions.load()
        self.files: dict[tuple[int, int], Tracked] = {}
        self.by_id: dict[int, Tracked] = {}
        self.next_id = 0
        self.next_scan = 0.0
        self.rr = 0  # round-robin start, so one busy file cannot starve the others
        self.started = False
        self.total_bytes = self.start_bytes = 0
        self.closed_bytes = 0  # bytes read from files since closed, so progress never goes back
        self.lock = threading.RLock()
        self.watcher: threading.Thread | None = None
        self.closing = threading.Event()
        holding = config.hold_files and config.save_positions and not config.once
        self.successors: dict[tuple[int, int], Tracked] = {}  # (file id, old generation) → the copy taking over
        self.holder = Holder(self._positions_path().with_suffix(".held") if holding else None)

    # ---------------------------------------------------------------- discovery

    def _positions_path(self) -> Path:
        if self.cfg.positions is not None:
            return self.cfg.positions
        return self.context.state_dir / f"positions-{self.context.pipeline}-{self.context.name}.json"

    def _matches(self) -> dict[tuple[int, int], str]:
        found: dict[tuple[int, int], str] = {}
        for pattern in self.cfg.include:
            for path in sorted(glob.glob(os.path.expanduser(pattern))):
                if any(
                    fnmatch.fnmatch(path, ex) or fnmatch.fnmatch(os.path.basename(path), ex) for ex in self.cfg.exclude
                ):
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # vanished between glob and stat
                if stat.S_ISREG(st.st_mode):
                    found.setdefault((st.st_dev, st.st_ino), path)
        return found

    def _open(self, path: str, key: tuple[int, int]) -> Tracked | None:
        if len(self.files) >= self.cfg.max_open_files:
            self.metrics.errors.labels("open_files_limit").inc()
            log.warning(
                "not opening %s: %d files are open (max_open_files); rotated files that are deleted "
                "before the bridge catches up will be lost",
                path,
                len(self.files),
            )
            return None
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            self.metrics.errors.labels("open").inc()
            log.warning("cannot open %s: %s", path, exc)
            return None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != key:  # replaced between stat and open; next scan sees it
            os.close(fd)
            return None
        tracked = Tracked(self.next_id, path, fd, *key)
        tracked.size = st.st_size
        tracked.held = self.holder.hold(*key, path)
        log.debug("opened %s (inode %d, %d bytes, held: %s)", path, key[1], st.st_size, tracked.held)
        self.next_id += 1
        self.files[key] = tracked
        self.by_id[tracked.id] = tracked
        return tracked

    def scan(self) -> None:
        """Match the globs: pick up new files, notice renames, classify new identities."""
        found = self._matches()
        for key, tracked in self.files.items():
            path = found.get(key)
            tracked.live = path is not None
            if path is not None and path != tracked.path:
                self._rename(tracked, path)
        self._open_new(found)
        first = not self.started
        if first:
            self.started = True
            self._reopen_held()
            self._recover_rotated()
        pending = [t for t in self.files.values() if t.state == "pending"]
        for tracked in pending:  # same inode, same content: resume, before any look-alike claims it
            self._resume_by_inode(tracked)
        for tracked in pending:
            if tracked.state == "pending":
                self._classify(tracked)
        if first and self.saved and not any(t.state == "pending" for t in self.files.values()):
            log.info("%d saved positions name files that no longer exist; forgetting them", len(self.saved))
            self.saved.clear()
        for tracked in list(self.files.values()):
            if tracked.state == "parked":
                self._check_parked(tracked)
            tracked.recheck = True
        self._close_drained()
        self.metrics.files.set(len(self.files))

    def _rename(self, tracked: Tracked, path: str) -> None:
        self.metrics.lag.remove_path(tracked.path)
        tracked.path = path
        tracked.origin = Origin(path, tracked.origin.key)

    def _identify(self, tracked: Tracked) -> bool:
        """Read the fingerprint; False while the first line is still being written."""
        fp = read_fingerprint(tracked.fd, self.cfg.fingerprint_bytes)
        if not fp.complete and not self.cfg.once:
            return False
        tracked.identify(fp)
        if self.cfg.once:
            tracked.limit = os.fstat(tracked.fd).st_size
        return True

    def _resume_by_inode(self, tracked: Tracked) -> None:
        if self._identify(tracked):
            saved = self._claim_saved(tracked, by_inode=True)
            if saved is not None:
                self._start(tracked, saved.offset, "its saved position")

    def _classify(self, tracked: Tracked) -> None:
        if not self._identify(tracked):
            return  # identity unknown, and nothing to emit yet
        saved = self._claim_saved(tracked, by_inode=True)
        if saved is not None:
            self._start(tracked, saved.offset, "its saved position")
            return
        original = self._original_of(tracked)
        if original is not None:
            tracked.state, tracked.parked_on, tracked.parked_generation = "parked", original, original.generation
            log.debug("%s (inode %d) parked as a copy of %s", tracked.path, tracked.ino, original.path)
            return
        saved = self._claim_saved(tracked, by_inode=False)
        if saved is not None:  # renamed or copied while we were not running
            self._start(tracked, saved.offset, f"the saved position of {saved.path} (inode {saved.ino})")
            return
        at_end = self.cfg.start_at == "end" and not self.cfg.once and not self.next_scan
        offset = self._line_boundary_before(tracked, os.fstat(tracked.fd).st_size) if at_end else 0
        self._start(tracked, offset, "a new file")

    def _start(self, tracked: Tracked, offset: int, why: str) -> None:
        tracked.start_at(offset)
        log.debug("%s (inode %d) starts at %d: %s", tracked.path, tracked.ino, offset, why)

    def _line_boundary_before(self, tracked: Tracked, offset: int) -> int:
        probe = max(0, offset - self.cfg.max_line_bytes)
        tail = os.pread(tracked.fd, offset - probe, probe)
        newline = tail.rfind(b"\n")
        return probe + newline + 1 if newline >= 0 else probe

    def _claim_saved(self, tracked: Tracked, by_inode: bool) -> Position | None:
        for i, saved in enumerate(self.saved):
            same_inode = (saved.dev, saved.ino) == (tracked.dev, tracked.ino)
            if saved.fingerprint == tracked.fp.hex and (same_inode or not by_inode):
                del self.saved[i]
                return saved
        return None

    def _original_of(self, tracked: Tracked) -> Tracked | None:
        for other in self.files.values():
            if (
                other is not tracked
                and other.state == "active"
                and other.fp.complete
                and other.fp.head == tracked.fp.head
            ):
                return other
        return None

    def _check_parked(self, copy: Tracked) -> None:
        """A parked copy whose content departs from its original is a file of its own after all."""
        original = copy.parked_on
        if original is None or original.id not in self.by_id:
            # the original was drained and closed: the copy supplies anything beyond it
            copy.start_at(original.line_start() if original else 0)
            return
        end, sample = original.sample
        if not sample or os.fstat(copy.fd).st_size < end:
            return
        if os.pread(copy.fd, len(sample), end - len(sample)) != sample:
            log.info(
                "%s shares its first line with %s but not its content: reading it as a new file",
                copy.path,
                original.path,
            )
            copy.start_at(0)

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

    def _recover_rotated(self) -> None:
        """Saved files no glob matches any more were rotated while we were down: drain them."""
        for saved in list(self.saved):
            folder = os.path.dirname(saved.path) or "."
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                try:
                    st = entry.stat()
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key != (saved.dev, saved.ino) or key in self.files:
                    continue
                tracked = self._open(entry.path, key)
                if tracked is None:
                    break
                if read_fingerprint(tracked.fd, self.cfg.fingerprint_bytes).hex != saved.fingerprint:
                    self._forget(key, tracked)  # the inode was reused by another file
                    break
                tracked.live = False
                self._classify(tracked)
                log.info("draining %s, rotated away from %s while the bridge was stopped", entry.path, saved.path)
                break

    def _close_drained(self) -> None:
        now = time.monotonic()
        for key, tracked in list(self.files.items()):
            if tracked.live or tracked.state == "pending":
                if not tracked.live and now - tracked.last_growth > self.cfg.rotate_wait:
                    self._forget(key, tracked)  # gone before its first line was complete
                continue
            idle = now - tracked.last_growth > self.cfg.rotate_wait
            if tracked.state == "parked":
                if idle and self._covered(tracked):
                    self._forget(key, tracked)  # a copy that left the globs: its original has the lines
            elif idle and tracked.acked >= tracked.emitted and tracked.read_offset >= self._size(tracked):
                if tracked.partial or tracked.skipping is not None:
                    continue  # emitted as a final line by the next poll, closed after its ack
                self._forget(key, tracked)

    def _size(self, tracked: Tracked) -> int:
        """The file's size now: ``tracked.size`` is only refreshed by reads, which stop while a sink is down."""
        tracked.size = os.fstat(tracked.fd).st_size
        return tracked.size

    def _covered(self, copy: Tracked) -> bool:
        """Every line of a parked copy has been acknowledged from its original (same generation).

        Until then the copy stays open even after it leaves the globs: the original may have been
        truncated since, unseen while a sink was down, and the copy then holds the only lines."""
        original = copy.parked_on
        if original is None or original.id not in self.by_id:
            return False  # _check_parked activates it instead
        size = os.fstat(copy.fd).st_size
        return original.generation == copy.parked_generation and original.acked >= size

    def _forget(self, key: tuple[int, int], tracked: Tracked, release: bool = True) -> None:
        """Close a file we are done with; ``release`` also drops its hard link (not at shutdown:
        the next run still needs what was not acknowledged)."""
        self.closed_bytes += tracked.read_offset
        log.debug(
            "closing %s (inode %d, %s, read %d, acked %d of %d, release %s)",
            tracked.path,
            tracked.ino,
            tracked.state,
            tracked.read_offset,
            tracked.acked,
            tracked.size,
            release,
        )
        os.close(tracked.fd)
        if release:
            self.holder.release(tracked.held)
        self.successors = {k: v for k, v in self.successors.items() if v is not tracked and k[0] != tracked.id}
        del self.files[key]
        del self.by_id[tracked.id]
        self.metrics.lag.remove_path(tracked.path)
        for other in self.files.values():
            if other.parked_on is tracked:
                self._check_parked(other)

    # ---------------------------------------------------------------- reading

    def _watch(self) -> None:
        """Keep discovering files while the pipeline thread may be blocked on a sink."""
        while not self.closing.wait(self.cfg.scan_interval):
            with self.lock:
                if time.monotonic() >= self.next_scan:
                    self.scan()
                    self.next_scan = time.monotonic() + self.cfg.scan_interval

    def poll(self, max_records: int, max_bytes: int) -> Batch | None:
        with self.lock:
            return self._poll(max_records, max_bytes)

    def _poll(self, max_records: int, max_bytes: int) -> Batch | None:
        now = time.monotonic()
        if self.watcher is None and not self.cfg.once:
            self.watcher = threading.Thread(target=self._watch, name=f"tail-watch-{self.context.name}", daemon=True)
            self.watcher.start()
        if now >= self.next_scan:
            self.scan()
            self.next_scan = now + self.cfg.scan_interval
            if self.cfg.once and not self.total_bytes:
                self.total_bytes = sum(f.limit or 0 for f in self.files.values())
                self.start_bytes = sum(f.read_offset for f in self.files.values())
        for tracked in [f for f in self.files.values() if f.state == "pending"]:
            if os.fstat(tracked.fd).st_size > len(tracked.fp.head):  # its first line may be complete now
                self._classify(tracked)
        records: list[Record] = []
        checkpoint: dict[int, tuple[int, int]] = {}
        read_bytes = 0
        active = [f for f in self.files.values() if f.state == "active"]
        if active:
            self.rr = (self.rr + 1) % len(active)
            active = active[self.rr :] + active[: self.rr]
        for tracked in active:
            room = max_records - len(records)
            if room <= 0 or read_bytes >= max_bytes:
                break
            before = len(records)
            read_bytes += self._read(tracked, records, room, max_bytes - read_bytes)
            if len(records) > before:
                checkpoint[tracked.id] = (tracked.generation, tracked.emitted)
        if not records:
            return None
        self.metrics.lines_read.labels(self.context.pipeline).inc(len(records))
        self.metrics.bytes_read.labels(self.context.pipeline).inc(read_bytes)
        return Batch(records, checkpoint, read_bytes)

    def _read(self, tracked: Tracked, out: list[Record], room: int, byte_room: int) -> int:
        try:
            size = os.fstat(tracked.fd).st_size
        except OSError:
            return 0
        seen, tracked.size = tracked.size, size
        if size < tracked.read_offset:
            self._truncated(tracked, out, f"size {size} below offset {tracked.read_offset}", seen)
            return 0
        end = size if tracked.limit is None else min(size, tracked.limit)
        grew = end > tracked.read_offset
        # a copytruncate can regrow a file past, or exactly to, our offset: the first line tells. Checked
        # on growth, and once per scan for idle files (a new generation as long as our offset looks idle)
        if (grew or tracked.recheck) and not self.cfg.once and tracked.fp.complete:
            tracked.recheck = False
            if os.pread(tracked.fd, len(tracked.fp.head), 0) != tracked.fp.head:
                self._truncated(tracked, out, "its first line changed", seen)
                return 0
        if not grew:
            if self._at_rest(tracked):
                self._final_partial(tracked, out)
            return 0
        want = min(self.cfg.read_chunk_bytes, end - tracked.read_offset, max(byte_room, 4096))
        data = os.pread(tracked.fd, want, tracked.read_offset)
        if not data:
            return 0
        tracked.last_growth = time.monotonic()
        start = tracked.read_offset
        tracked.read_offset += len(data)
        end, previous = tracked.sample
        tail = (previous + data[-SAMPLE:])[-SAMPLE:] if end == start else data[-SAMPLE:]
        tracked.sample = (tracked.read_offset, tail)
        self._split(tracked, data, out, room)
        return len(data)

    def _split(self, tracked: Tracked, data: bytes, out: list[Record], room: int) -> None:
        """Cut ``data`` into lines. Hot path: one ``split``, one Record per line, nothing else."""
        max_line = self.cfg.max_line_bytes
        if tracked.skipping is not None:
            newline = data.find(b"\n")
            if newline < 0:
                return  # still inside the overlong line; its bytes are skipped, and counted
            skipped = tracked.skipping
            tracked.skipping = None
            out.append(skipped)
            room -= 1
            base = tracked.read_offset - len(data) + newline + 1
            tracked.emitted = base
            data = data[newline + 1 :]
            self.metrics.truncated.inc()
        else:
            base = tracked.read_offset - len(data) - len(tracked.partial)
            if tracked.partial:
                data = tracked.partial + data
        parts = data.split(b"\n")
        partial = parts.pop()
        origin = tracked.origin
        pos = base
        for taken, line in enumerate(parts):
            if taken == room:  # batch full: give the rest back, to be read again next poll
                tracked.read_offset = pos
                tracked.partial = b""
                tracked.emitted = pos
                return
            if len(line) > max_line:
                out.append(Record(line[:max_line], origin, pos, truncated=True))
                self.metrics.truncated.inc()
            else:
                out.append(Record(line, origin, pos))
            pos += len(line) + 1
        tracked.emitted = pos
        if len(partial) > max_line:
            tracked.skipping = Record(partial[:max_line], origin, pos, truncated=True)
            partial = b""
        tracked.partial = partial

    def _at_rest(self, tracked: Tracked) -> bool:
        """A trailing partial line is final at the end of a --once read, or when its file has been
        rotated away and stayed idle (the writer moved on): emit it rather than lose it."""
        if not (tracked.partial or tracked.skipping is not None):
            return False
        if self.cfg.once:
            return True
        return not tracked.live and time.monotonic() - tracked.last_growth > self.cfg.rotate_wait

    def _final_partial(self, tracked: Tracked, out: list[Record]) -> None:
        if tracked.skipping is not None:
            out.append(tracked.skipping)
            self.metrics.truncated.inc()
            tracked.skipping = None
        elif tracked.partial:
            out.append(Record(tracked.partial, tracked.origin, tracked.read_offset - len(tracked.partial)))
        tracked.partial = b""
        if not self.cfg.once:  # --once leaves the offset before a partial line: a later run completes it
            tracked.emitted = tracked.read_offset

    def _truncated(self, tracked: Tracked, out: list[Record], why: str, seen_size: int) -> None:
        self.metrics.rotations.labels("copytruncate").inc()
        resume = tracked.line_start()
        copies = self._copies_of(tracked)
        if not copies:
            self.scan_for_copy(tracked)
            copies = self._copies_of(tracked)
        copy = max(copies, key=lambda f: os.fstat(f.fd).st_size) if copies else None
        for other in copies:  # earlier snapshots of the same content: the largest copy has their lines
            if other is not copy:
                self._forget((other.dev, other.ino), other)
        if copy is not None:
            log.info(
                "%s was truncated (%s); %s supplies the lines from offset %d", tracked.path, why, copy.path, resume
            )
            # lines before ``resume`` may still be in the batch in flight: the copy is acknowledged only as
            # far as the original was, and that batch's checkpoint is carried over to the copy on commit
            copy.start_at(resume, acked=tracked.acked)
            self.successors[(tracked.id, tracked.generation)] = copy
        else:
            self._final_partial(tracked, out)  # the start of a line is better than nothing
            unread = max(0, seen_size - tracked.read_offset)
            log.warning(
                "%s was truncated (%s) and no copy of it matches the globs; lines written "
                "after offset %d and before the truncation cannot be read",
                tracked.path,
                why,
                resume,
            )
            self.metrics.unread.inc(unread)
        tracked.generation += 1
        tracked.start_at(0)
        tracked.state = "pending"
        tracked.sample = (0, b"")
        self._classify(tracked)

    def _copies_of(self, original: Tracked) -> list[Tracked]:
        return [f for f in self.files.values() if f.parked_on is original and f.state == "parked"]

    def _open_new(self, found: dict[tuple[int, int], str]) -> list[Tracked]:
        """Open the matched files not tracked yet."""
        opened = (self._open(path, key) for key, path in found.items() if key not in self.files)
        return [tracked for tracked in opened if tracked is not None]

    def scan_for_copy(self, original: Tracked) -> None:
        """Truncation seen between scans: look again for a copy that just appeared."""
        for tracked in self._open_new(self._matches()):
            self._classify(tracked)

    # ---------------------------------------------------------------- acknowledgement

    def commit(self, checkpoint: dict[int, tuple[int, int]]) -> None:
        with self.lock:
            self._commit(checkpoint)

    def _commit(self, checkpoint: dict[int, tuple[int, int]]) -> None:
        for fid, (generation, offset) in checkpoint.items():
            tracked = self.by_id.get(fid)
            if tracked is not None and tracked.generation != generation:
                tracked = self.successors.pop((fid, generation), None)  # that content lives in its copy now
            if tracked is not None and tracked.id in self.by_id and offset > tracked.acked:
                tracked.acked = min(offset, tracked.emitted)
        entries = []
        for tracked in self.files.values():
            if tracked.state != "active":
                continue
            entries.append(Position(tracked.path, tracked.dev, tracked.ino, tracked.fp.hex, tracked.acked))
            self.metrics.lag.set_path(tracked.path, max(0, tracked.size - tracked.acked))
        self.positions.save(entries + self.saved)

    def exhausted(self) -> bool:
        with self.lock:
            return self._exhausted()

    def _exhausted(self) -> bool:
        if not self.cfg.once or not self.started:
            return False
        for tracked in self.files.values():
            if tracked.state != "active":
                continue
            if tracked.read_offset < (tracked.limit or 0) or tracked.partial or tracked.skipping:
                return False
        return True

    def progress(self) -> tuple[int, int]:
        with self.lock:
            done = self.closed_bytes + sum(f.read_offset for f in self.files.values()) - self.start_bytes
            return max(0, done), max(0, self.total_bytes - self.start_bytes)

    def shutdown(self) -> None:
        self.closing.set()
        if self.watcher is not None:
            self.watcher.join(5)
        with self.lock:
            for key, tracked in list(self.files.items()):
                self._forget(key, tracked, release=False)
            self.files.clear()
            self.by_id.clear()
