"""``tail``: follow files and globs, through rename and copytruncate rotation, without losing a line.

The work is split as the collector's ``fileconsumer`` splits it:

- ``finder``: which files the globs name now (pure functions);
- ``tracker``: which file is which across rotations and restarts (a state machine; its docstring has
  the transition table);
- ``reader``: one open file read into lines, returning what it saw;
- this module: the orchestration, polling the readers, committing positions, the watcher thread
  and shutdown.

How each rotation is handled:

- rename + create: the old inode stays open and is read to its end; the new file is read from 0.
  A renamed file that still matches the globs is recognised by its inode and not read twice. The
  watcher learns of a new file at once where the platform tells (inotify, see ``watch``), and the
  runtimes' rotated names (``x.log.1``, ``0.log.<time>``) are known (see ``finder``), so a
  generation rotated away before any scan saw it is found there. Of one live name, the oldest
  generation is read first: a rotated file is drained before its successor is read further, and a
  line the runtime cut across the rotation is joined in the successor (see ``Tracker.readable``).
- copytruncate: the truncation is seen (size below our offset, or a changed first line). A copy that
  matches the globs was parked as "copy of" the original when it appeared; it now supplies the lines
  from where the original was read to, and the original restarts from the top.
- compress (logrotate's ``compress``, ``delaycompress``): a compressed generation is known by its
  magic bytes and read decompressed (see ``compressed``), so its first lines are those of the plain
  file it was compressed from: parked as a copy of it while that file is open, or claiming its saved
  position at a restart, it is not read again; one never seen before is read whole, once.
- restart: saved positions are matched by inode and the file's first bytes (as many as the saved
  print covers), then by those bytes alone (the file was renamed or copied while we were down); a
  saved file that left the globs is looked for beside its old path and drained. How each was judged
  is counted in ``obsbox_bridge_resumes_total{outcome}``.

Offsets advance only through ``commit`` (every sink acknowledged), so delivery is at-least-once.
A line without a time of its own gets the time it was first read, from clock anchors saved with its
file's position before any line is stamped with them (see ``reader``): a file that starts a new
anchor has the positions saved before ``poll`` hands its lines out, so a replay after ``kill -9``
gives every line the time it was shipped with the first time, and Loki drops the copy.

While a sink is down the pipeline thread blocks in retries, yet files keep rotating: a watcher
thread keeps matching the globs and opening what appears, so a generation that is rotated away
and deleted during an outage is still held open, and read once the sink is back (the files are
the buffer; ``max_open_files`` bounds it). Each tracked file is also held by a hard link in the
state dir (see ``hold``), so what a rotation deletes survives ``kill -9`` as well.

Threading: ``poll``/``commit`` come from the pipeline thread, ``scan`` also from the watcher;
``self.lock`` guards all state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from obsbox.config import FieldError
from obsbox.exporters.bridge.component import Context, Source
from obsbox.exporters.bridge.record import Batch, Lines, Record
from obsbox.exporters.bridge.sources import multiline
from obsbox.exporters.bridge.sources.access import nothing_matched
from obsbox.exporters.bridge.sources.compressed import Compression
from obsbox.exporters.bridge.sources.finder import (
    COMPRESSED,
    NEVER_READ,
    find_files,
    find_rotated,
    may_name,
    watched_folders,
)
from obsbox.exporters.bridge.sources.fingerprint import DEFAULT_LIMIT
from obsbox.exporters.bridge.sources.hold import Holder, folder_for
from obsbox.exporters.bridge.sources.positions import Position, PositionsFile
from obsbox.exporters.bridge.sources.tracker import FileMark, FileState, Tracked, Tracker
from obsbox.exporters.bridge.sources.watch import FolderWatch

log = logging.getLogger(__name__)

TailCheckpoint = Mapping[FileMark, int]  # (file id, generation) → the offset emitted up to


@dataclass
class TailConfig:
    include: list[str]
    exclude: list[str] | None = None  # None: the compressed names not read (``skipped``)
    positions: Path | None = None
    save_positions: bool = True
    start_at: Literal["beginning", "end"] = "beginning"
    # auto: per file, from its first line and path; logfmt: the application's lines are logfmt
    format: Literal["auto", "json", "cri", "docker", "logfmt"] = "auto"
    compression: Compression = "auto"  # auto: gzip, bzip2, xz (zstd with its wheel) read, by magic bytes
    kubernetes_metadata: bool = True  # k8s.* resource attributes from kubelet's log paths
    max_line_bytes: int = 1024 * 1024
    read_chunk_bytes: int = 1024 * 1024
    scan_interval: float = 1.0
    rotate_wait: float = 5.0
    fingerprint_bytes: int = DEFAULT_LIMIT
    max_open_files: int = 1024
    # hard links that keep unread rotated files across a restart (hold.py): auto holds the files
    # container runtimes rotate; logrotate refuses to rotate or compress a file with another link
    hold_files: bool | Literal["auto"] = "auto"
    # stack traces grouped with their line (multiline.py): auto, none, [java, python, ...], or a
    # custom rule (start_pattern, condition_pattern, mode); timeout: how long an open record is held
    multiline: Any = "auto"

    @property
    def skipped(self) -> list[str]:
        """``exclude``; by default the compressed names that are not read (all of them with
        ``compression: none``, which would read them as bytes)."""
        if self.exclude is not None:
            return self.exclude
        return list(NEVER_READ if self.compression == "auto" else COMPRESSED)

    def __post_init__(self) -> None:
        if not self.include:
            raise ValueError("include needs at least one file or glob")
        if self.max_line_bytes < 64:
            raise ValueError("max_line_bytes must be at least 64")
        try:
            self.multiline = multiline.parse(self.multiline)
        except ValueError as exc:
            raise FieldError("multiline", str(exc)) from None
        for name in ("read_chunk_bytes", "max_open_files"):  # at 0 the source reads nothing, for ever
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


class TailSource(Source[TailCheckpoint]):
    """Follow ``include`` globs (see the module docstring for the rotation rules)."""

    type = "tail"
    Config = TailConfig

    def __init__(self, config: TailConfig, context: Context) -> None:
        super().__init__(config, context)
        self.cfg = config
        self.metrics = context.metrics
        self.once = context.once
        positions_path = config.positions or context.state_dir / f"positions-{context.pipeline}-{context.name}.json"
        self.positions = PositionsFile(positions_path if config.save_positions else None)
        holding = config.hold_files is not False and config.save_positions and not self.once
        self.tracker = Tracker(
            config.include,
            config.skipped,
            {
                "max_line_bytes": config.max_line_bytes,
                "read_chunk_bytes": config.read_chunk_bytes,
                "fingerprint_bytes": config.fingerprint_bytes,
                "format": config.format,
                "compression": config.compression,
                "kubernetes_metadata": config.kubernetes_metadata,
                "multiline": config.multiline,
            },
            saved=self.positions.load(),
            holder=Holder(folder_for(positions_path) if holding else None, every=config.hold_files is True),
            metrics=self.metrics,
            once=self.once,
            start_at_end=config.start_at == "end",
            rotate_wait=config.rotate_wait,
            max_open_files=config.max_open_files,
        )
        self.next_scan = 0.0
        self.rr = 0  # round-robin start, so one busy file cannot starve the others
        self.total_bytes = self.start_bytes = 0
        self.lock = threading.RLock()
        self.watcher: threading.Thread | None = None
        self.closing = threading.Event()
        self.problems = self.tracker.problems
        self.failing: set[tuple[int, int]] = set()  # files whose last OS call failed: skipped until the next scan
        self.unsaved_clock = False  # a file read in this poll started a clock anchor not saved yet

    @property
    def files(self) -> dict[tuple[int, int], Tracked]:
        return self.tracker.files

    def scan(self) -> None:
        """Match the globs (and the rotated names of what they match), let the tracker apply what it
        finds, measure what waits, and say what matches nothing. A failure here is said once and tried
        again at the next scan: neither the watcher nor the pipeline thread dies of it."""
        with self.lock:
            try:
                self._scan()
            except Exception as exc:
                why = f"scanning {self.cfg.include} failed ({exc!r}); trying again"
                self.problems.report(("scan", None), "scan", why)
                log.debug("scan failed", exc_info=True)
            else:
                self.problems.clear(("scan", None), f"scanning {self.cfg.include} works again")

    def _scan(self) -> None:
        matched: dict[str, int] = {}
        unlooked: set[str] = set()

        def failed(path: str, exc: OSError) -> None:
            unlooked.add(path)
            self.problems.report(("path", path), "stat", f"cannot look at {path}: {exc.strerror or exc}")

        include, exclude = self.cfg.include, self.cfg.skipped
        found = find_files(include, exclude, matched=matched, failed=failed)
        self.failing.clear()
        self.tracker.update(found, find_rotated(include, exclude, found))
        self.tracker.measure()
        self.metrics.files.set(len(self.tracker.files))
        for pattern, count in matched.items():
            self.metrics.files_matched.labels(pattern).set(count)
            if count:
                self.problems.clear(("pattern", pattern), f"{pattern} matches {count} files")
            else:
                self.problems.report(("pattern", pattern), *nothing_matched(pattern, exclude))
        if self.problems.current:
            self.problems.retain("file", self.tracker.files)
            self.problems.retain("path", unlooked.union(found.values()))

    def _watch(self) -> None:
        """Keep discovering files while the pipeline thread may be blocked on a sink: at once when a
        watched folder changes (see ``watch``), and every ``scan_interval`` in any case."""
        folders = FolderWatch(self.metrics)
        try:
            while not self.closing.is_set():
                folders.watch(watched_folders(self.cfg.include))
                seen = folders.wait(self.cfg.scan_interval)
                if not folders.enabled and self.closing.wait(self.cfg.scan_interval):
                    break
                changed = seen.everything or any(may_name(path, self.cfg.include) for path in seen.paths)
                with self.lock:
                    if changed or time.monotonic() >= self.next_scan:
                        self.scan()
                        self.next_scan = time.monotonic() + self.cfg.scan_interval
        finally:
            folders.close()

    def poll(self, max_records: int, max_bytes: int) -> Batch[TailCheckpoint] | None:
        with self.lock:
            return self._poll(max_records, max_bytes)

    def _poll(self, max_records: int, max_bytes: int) -> Batch[TailCheckpoint] | None:
        now = time.monotonic()
        if self.watcher is None and not self.once:
            self.watcher = threading.Thread(target=self._watch, name=f"tail-watch-{self.context.name}", daemon=True)
            self.watcher.start()
        if now >= self.next_scan:
            self.scan()
            self.next_scan = now + self.cfg.scan_interval
            if self.once and not self.total_bytes:
                self.total_bytes = sum(f.reader.limit or 0 for f in self.files.values())
                self.start_bytes = sum(f.reader.read_offset for f in self.files.values())
        self.tracker.classify_grown()
        records = Lines()
        checkpoint: dict[FileMark, int] = {}
        read_bytes = 0
        active = self.tracker.readable()
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
                checkpoint[(tracked.id, tracked.generation)] = tracked.reader.emitted
                self.tracker.settle(tracked, checkpoint)
        if self.unsaved_clock:
            self._save_clocks()
        if not records:
            return None
        self.metrics.lines_read.labels(self.context.pipeline).inc(len(records))
        self.metrics.bytes_read.labels(self.context.pipeline).inc(read_bytes)
        return Batch(records, checkpoint, read_bytes)

    def _read(self, tracked: Tracked, out: Lines, room: int, byte_room: int) -> int:
        """Read one file; act on what the reader saw (a truncation, a final partial line). An OS
        error is this file's alone: said once, and the file is skipped until the next scan."""
        if self.failing and tracked.key in self.failing:
            return 0
        try:
            return self._read_file(tracked, out, room, byte_room)
        except OSError as exc:
            self.tracker.failed(tracked, exc)
            self.failing.add(tracked.key)
            return 0

    def _read_file(self, tracked: Tracked, out: Lines, room: int, byte_room: int) -> int:
        seen = tracked.reader.read(out, room, byte_room, verify_head=not self.once)
        if tracked.reader.unsaved:
            self.unsaved_clock = True
        if self.problems.current:
            self.problems.clear(("file", tracked.key), f"reading {tracked.path} again")
        if seen.overlong:
            self.metrics.truncated.inc(seen.overlong)
        last: list[Record] = []
        if seen.truncated is not None:
            last = self.tracker.truncated(tracked, seen.truncated, seen.previous_size)
        elif not seen.grew and self.tracker.at_rest(tracked):
            last = tracked.reader.take_partial(advance=not self.once)
        elif not seen.grew and tracked.reader.group_due():
            last = tracked.reader.take_group()
        grouper = tracked.reader.grouper
        if grouper is not None and grouper.grouped:
            self.metrics.multiline_lines.inc(grouper.grouped)
            grouper.grouped = 0
        if last:
            out.extend(last)
            self.metrics.truncated.inc(sum(1 for rec in last if rec.truncated))
        return seen.bytes_read

    def commit(self, checkpoint: TailCheckpoint) -> None:
        """Save the positions. A save that fails (the disk filled up or went read-only since the
        start) is said once and counted; the bridge goes on, and the next commit saves them all,
        so a restart meanwhile reads again, never skips."""
        with self.lock:
            self._save(self.tracker.commit(checkpoint))

    def _save_clocks(self) -> None:
        """Ahead of handing out lines stamped with new clock anchors: save the positions as they
        stand, with those anchors (at most once a second a file, and only for files whose lines
        lack a time of their own; see ``reader``). When the save fails the lines still go out: a
        crash before the next save may then ship them again with other times."""
        self.unsaved_clock = False
        for tracked in self.files.values():
            tracked.reader.unsaved = False
        self._save(self.tracker.positions())

    def _save(self, positions: list[Position]) -> None:
        where = ("positions", None)
        try:
            self.positions.save(positions)
        except OSError as exc:
            why = f"cannot save positions to {self.positions.path} ({exc.strerror or exc}); trying again later"
            self.problems.report(where, "positions", why)
        else:
            self.problems.clear(where, f"positions are saved to {self.positions.path} again")

    def exhausted(self) -> bool:
        with self.lock:
            if not self.once or not self.tracker.scans:
                return False
            for tracked in self.tracker.in_state(FileState.ACTIVE):
                reader = tracked.reader
                if reader.read_offset < (reader.limit or 0) or reader.has_partial():
                    return False
            return True

    def progress(self) -> tuple[int, int]:
        with self.lock:
            read = sum(f.reader.read_offset for f in self.files.values())
            done = self.tracker.closed_bytes + read - self.start_bytes
            return max(0, done), max(0, self.total_bytes - self.start_bytes)

    def resumed(self) -> tuple[int, Path | None]:
        with self.lock:
            return sum(1 for saved in self.tracker.claimed if saved.offset), self.positions.path

    def shutdown(self) -> None:
        self.closing.set()
        if self.watcher is not None:
            self.watcher.join(5)
        with self.lock:
            self.tracker.close_all()
