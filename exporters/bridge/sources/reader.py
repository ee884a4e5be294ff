"""The file reader: one open file (one inode), read from an offset into lines.

It owns its descriptor, its offsets and the partial line at its end, and it **returns** what it saw
(how many bytes it read, whether the file grew, whether it looks truncated, how many lines were cut
at ``max_line_bytes``); deciding what a truncation means, or which file is a copy of which, is the
tracker's job (compare the collector's ``fileconsumer/internal/reader`` and Vector's
``FileWatcher``).

What a read yields goes into :class:`Lines`: its whole lines as one :class:`Block`, the bytes read,
found with ``memchr`` scans and never cut here; they are cut into Records line by line only where
they must be: an overlong line among them, the file's first read (a byte order mark), container
runtime entries to unwrap. Offsets:

- ``read_offset``: the next byte to read;
- ``emitted``: the end of the last line handed out;
- ``acked``: the end of the last line every sink acknowledged (set by the tracker on commit).

Its ``clock`` gives a line without a time of its own the time it was first read, the same on every
replay: a few anchors (offset A, Unix ns T), kept with the saved position; the line at byte X reads
``T + (X - A)`` from the newest anchor with A <= X (``Origin.read_ns``). Every save of the position
P keeps the anchors that still cover bytes from P on and adds one at the first line not handed out
yet (``advance_clock``), so lines read later use an anchor already saved, and lines in flight keep
theirs. A file that was idle (every line acknowledged) for more than ``CLOCK_STALE`` seconds, or new
to this run, starts a new anchor when it grows (``unsaved``: the tail source saves it before the
lines go out), unless its first new line has its own time. Lines that were there at a restart keep
the saved anchors: the previous run may have shipped them. Container runtimes' lines carry the
runtime's time, which wins; their files get no new anchor ahead of a save.

A compressed file (``compressed.py``, ``compression: auto``) is decompressed whole once it is
complete, when it is identified: from then on ``fd`` is the decompressed copy's, and the file is read,
fingerprinted and positioned in decompressed bytes, like the plain file it was compressed from. One
that cannot be read (cut short, corrupt, a form not supported) stays unidentified, with ``problem``
saying why, until its bytes change.

Threading: used under its tail source's lock only.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Literal

import orjson

from obsbox.exporters.bridge.record import Block, Clock, Lines, Origin, Record, count_lines, records_of
from obsbox.exporters.bridge.sources.compressed import (
    LONGEST,
    Compression,
    CompressionError,
    decompress,
    sniff,
    sparse_copy,
)
from obsbox.exporters.bridge.sources.containers import (
    Format,
    Joiner,
    detect_format,
    kubernetes_resource,
    logfmt_inside,
)
from obsbox.exporters.bridge.sources.fingerprint import Fingerprint, digest, head_print, read_fingerprint
from obsbox.exporters.bridge.sources.multiline import Grouper, MultilineConfig
from obsbox.exporters.bridge.sources.positions import Position
from obsbox.logfields import timestamp_ns

SAMPLE = 64  # bytes remembered from the end of what was read, to tell a true copy from a look-alike
BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark, which .NET writers put at the start of a file
CLOCK_STALE = 1.0  # seconds: an idle file's anchor older than this is renewed, ahead of a save, when it grows
MAX_ANCHORS = 64  # anchors a file keeps between its saved position and what it handed out


@dataclass(slots=True)
class ReadResult:
    """What one ``read`` saw."""

    grew: bool = False  # there was more to read than before
    bytes_read: int = 0
    overlong: int = 0  # lines cut at max_line_bytes (shipped truncated and flagged)
    truncated: str | None = None  # why the file looks truncated; nothing was read then
    size: int = 0  # the file's size as this read found it
    previous_size: int = 0  # ... and as the read before it did


class FileReader:
    """Read one file into :class:`Record` lines (see the module docstring)."""

    def __init__(
        self,
        path: str,
        fd: int,
        dev: int,
        ino: int,
        *,
        max_line_bytes: int,
        read_chunk_bytes: int,
        fingerprint_bytes: int,
        format: Literal["auto", "json", "cri", "docker", "logfmt"] = "auto",
        kubernetes_metadata: bool = True,
        compression: Compression = "auto",
        multiline: MultilineConfig | None = None,
    ) -> None:
        self.path, self.fd, self.dev, self.ino = path, fd, dev, ino
        self.compression = compression
        self.compressed = ""  # the compression ``fd`` was decompressed from ("": a plain file)
        self.raw_fd: int | None = None  # the file's own descriptor, when ``fd`` is its decompressed copy
        self.problem: CompressionError | None = None  # why a compressed file cannot be read
        self.tried: tuple[int, int] | None = None  # (size, mtime) of the last failed decompression
        self.spared = False  # the decompressed copy keeps only its first and last bytes (``spare``)
        self.max_line_bytes = max_line_bytes
        self.read_chunk_bytes = read_chunk_bytes
        self.line_bytes = 0  # the mean line length last seen: a batch's last read takes what fits
        self.fingerprint_bytes = fingerprint_bytes
        self.fp = Fingerprint(b"", False)
        self.head = b""  # the first bytes this generation is known to hold (see ``head_mark``)
        self.mark = ("", 0)  # (hex digest, bytes covered) of the head, as a saved position keeps it
        self.prints: dict[int, str | None] = {}  # bytes covered → the head's print, while judging resumes
        self.origin = Origin(path, b"")
        self.read_offset = 0
        self.partial = b""  # bytes after the last newline, not yet a line
        self.skipping: Record | None = None  # an overlong line, truncated, waiting for its newline
        self.emitted = 0
        self.acked = 0
        self.limit: int | None = None  # --once: read up to the size seen at the start
        self.size = os.fstat(fd).st_size
        self.last_growth = time.monotonic()
        self.sample: tuple[int, bytes] = (0, b"")  # (end offset, bytes before it) of the last read
        self.recheck = False  # verify the first line at the next read, even if the file did not grow
        self.format_option = format
        self.format: Format = "json"
        self.joiner: Joiner | None = None  # unwraps CRI / Docker entries, joining partials
        self.handed: int | None = None  # read to here, with an open join handed to the next generation
        self.resource = kubernetes_resource(path) if kubernetes_metadata else ()
        self.clock: Clock = ()  # anchors of its lines' read times (see the module docstring)
        self.clock_taken = 0.0  # monotonic time of the newest anchor; 0: renewed at the next read
        self.replay_end = 0  # a resumed file's size at start: lines before it may have been shipped
        self.unsaved = False  # an anchor was renewed that the positions file does not hold yet
        rules = multiline.compile() if multiline is not None else None
        self.grouper = Grouper(rules, max_line_bytes) if rules is not None else None  # see _split_grouped
        self.superseded = False  # a newer generation of its stream is being read: hold no record

    # ---------------------------------------------------------------- identity and position

    def identify(self, allow_incomplete: bool = False) -> bool:
        """Read the fingerprint; False (and nothing learnt) while the first line is incomplete, or
        while a compressed file cannot be read yet."""
        if self.compression == "auto" and not self.compressed and not self._decompressed(allow_incomplete):
            return False
        fp = read_fingerprint(self.fd, self.fingerprint_bytes)
        if not fp.complete and not allow_incomplete:
            return False
        self.fp = fp
        option = self.format_option
        if option in ("json", "cri", "docker"):
            self.format = option
        else:  # auto, and logfmt, which names the application's lines: their wrapping is still detected
            self.format = detect_format(self.path, fp.head)
        logfmt = option == "logfmt" or (option != "json" and logfmt_inside(self.format, fp.head))
        self.origin = Origin(self.path, fp.digest, self.resource, self.clock, logfmt)
        self.joiner = Joiner(self.format, self.max_line_bytes) if self.format != "json" else None
        return True

    def read_as(self) -> str:
        """How the file is read, for ``obsbox_bridge_file_format``: its container format, else logfmt or json."""
        return "logfmt" if self.format == "json" and self.origin.logfmt else self.format

    def _decompressed(self, allow_incomplete: bool) -> bool:
        """Is the file plain, or decompressed now? A compressed file that does not decode is judged
        at the second look at the same bytes (it may still be being written at the first one),
        at once in a --once run; then ``problem`` says why, until its size or mtime change."""
        kind = sniff(os.pread(self.fd, LONGEST, 0))
        if not kind:
            return kind is None or allow_incomplete
        st = os.fstat(self.fd)
        stamp = (st.st_size, st.st_mtime_ns)
        if self.problem is not None and self.tried == stamp:
            return False
        try:
            plain = decompress(self.fd, kind)
        except CompressionError as exc:
            judged = allow_incomplete or self.tried == stamp or exc.kind == "compression_unsupported"
            self.problem, self.tried = (exc if judged else None), stamp
            return False
        self.raw_fd, self.fd, self.compressed = self.fd, plain, kind
        self.problem, self.size = None, os.fstat(plain).st_size
        return True

    def spare(self) -> None:
        """A compressed file read and acknowledged to its end: its decompressed copy is replaced by a
        sparse one of the same size, holding only what is still read of it (the head, for the saved
        position's print and the first line's check; the bytes before the end, for a copy's check)."""
        if not self.compressed or self.spared or not self.drained():
            return
        size = self.current_size()
        plain = sparse_copy(self.fd, size, [(0, self.fingerprint_bytes), (max(0, size - SAMPLE), SAMPLE)])
        os.close(self.fd)
        self.fd, self.spared = plain, True

    def head_mark(self) -> tuple[str, int]:
        """The print a saved position keeps of this file: its first bytes, up to ``fingerprint_bytes``,
        as this generation of the file is known to hold them (at least its first line, read when it
        was identified). It grows with the file, but only over bytes that continue what was known:
        a file truncated and rewritten since (not noticed yet: reads stop while a sink is down)
        keeps its old print, so the saved offset, which belongs to the old content, is refused at the
        next start and the file read again (duplicates), never applied to the new content (a loss)."""
        known = self.head or self.fp.head
        if len(known) < min(self.size, self.fingerprint_bytes):
            head = os.pread(self.fd, self.fingerprint_bytes, 0)
            known = head if head.startswith(known) else known
        self.head = known
        if len(known) != self.mark[1]:
            self.mark = (digest(known).hex(), len(known))
        return self.mark

    def holds(self, saved: Position) -> bool:
        """Does this file hold the content ``saved`` was taken of? Judged on as many bytes as its
        print covers (the first line, for a position saved before prints covered more)."""
        covers = saved.fingerprint_bytes
        if saved.compressed and not self.compressed:  # its offset counts decompressed bytes
            return False
        if covers not in self.prints:  # many saved positions may be tried on one file at start
            first_line = read_fingerprint(self.fd, self.fingerprint_bytes).hex if not covers else None
            self.prints[covers] = head_print(self.fd, covers) if covers else first_line
        return self.prints[covers] == saved.fingerprint

    def rename(self, path: str) -> None:
        self.path = path
        self.origin = Origin(path, self.origin.key, self.origin.resource, self.clock, self.origin.logfmt)

    def start_at(self, offset: int, acked: int | None = None, clock: Clock = ()) -> None:
        """Read from ``offset``; ``acked`` is lower when lines before it are still in flight.
        ``clock``: the anchors saved with (or handed over with) the lines from ``acked`` on; without
        them the file starts a new one at its first read."""
        self.prints.clear()  # judged: a truncation makes this file new content again
        self.head, self.mark = b"", ("", 0)
        self.read_offset = self.emitted = offset
        self.acked = offset if acked is None else acked
        self.partial, self.skipping = b"", None
        if self.joiner is not None:
            self.joiner.reset()
        if self.grouper is not None:
            self.grouper.open.clear()
        self.clock_taken, self.unsaved = 0.0, False
        self.replay_end = self.current_size() if clock else 0
        self._set_clock(clock or ((offset, time.time_ns()),))

    def _set_clock(self, clock: Clock) -> None:
        """Stamp the lines handed out from now on with ``clock``; an overlong line begun before,
        not handed out yet, too (it starts where the newest anchor does)."""
        self.clock = clock
        self.origin = Origin(self.path, self.origin.key, self.origin.resource, clock, self.origin.logfmt)
        if self.skipping is not None:
            self.skipping.origin = self.origin

    def advance_clock(self) -> None:
        """At a save of the position: keep the anchors that cover bytes from ``acked`` on, and add
        one at the first line not handed out yet, which the lines read after this save will use."""
        clock, acked, start = self.clock, self.acked, self.line_start()
        first = 0
        for i, (at, _) in enumerate(clock):
            if at <= acked:
                first = i
        kept = clock[first:]
        if kept and start > kept[-1][0] and len(kept) < MAX_ANCHORS:
            kept += ((start, time.time_ns()),)
            self.clock_taken = time.monotonic()
        if kept != clock:
            self._set_clock(kept)

    def _renew_clock(self, data: bytes, now: float) -> None:
        """An idle file grew: a new anchor where its next line starts. It must be saved before those
        lines go out (``unsaved``), unless the first of them has a time of its own."""
        self._set_clock(((self.line_start(), time.time_ns()),))
        self.clock_taken = now
        newline = data.find(b"\n")
        self.unsaved = newline < 0 or not _timed((self.partial + data[:newline]).removeprefix(BOM))

    def restart(self) -> None:
        """The file was truncated: its content starts again from 0."""
        self.start_at(0)
        self.sample = (0, b"")

    def line_start(self) -> int:
        """Offset of the first byte not yet part of an emitted line (or of a join still open)."""
        start = self.skipping.offset if self.skipping is not None else self.read_offset - len(self.partial)
        joined = self.joiner.pending_start() if self.joiner is not None else None
        grouped = self.grouper.pending_start() if self.grouper is not None else None
        return min(offset for offset in (start, joined, grouped) if offset is not None)

    def line_boundary_before(self, offset: int) -> int:
        """The start of the line that holds ``offset`` (looking back at most ``max_line_bytes``)."""
        probe = max(0, offset - self.max_line_bytes)
        tail = os.pread(self.fd, offset - probe, probe)
        newline = tail.rfind(b"\n")
        return probe + newline + 1 if newline >= 0 else probe

    def current_size(self) -> int:
        """The file's size now (``size`` is refreshed only by reads, which stop while a sink is down)."""
        self.size = os.fstat(self.fd).st_size
        return self.size

    def idle_for(self) -> float:
        return time.monotonic() - self.last_growth

    def has_partial(self) -> bool:
        return (
            bool(self.partial)
            or self.skipping is not None
            or bool(self.joiner and self.joiner.open)
            or bool(self.grouper and self.grouper.open)
        )

    def drained(self) -> bool:
        """Everything written so far was read and acknowledged, and no partial line waits."""
        return (
            self.acked >= self.emitted
            and self.read_offset >= self.current_size()
            and not self.has_partial()
            and self.handed is None
        )

    def read_to_end(self) -> bool:
        """Nothing is left to read (up to ``limit``, in a --once run)."""
        end = self.current_size() if self.limit is None else min(self.limit, self.current_size())
        return self.read_offset >= end

    # ---------------------------------------------------------------- a line cut across a rotation

    def take_join(self, older: FileReader) -> bool:
        """Take over the joins ``older`` (the generation before this one, read to its end) left open,
        before this file is read: the runtime cut a line across the rotation. ``older`` keeps its
        position before them until :meth:`release_join`, so a restart reads them again."""
        if older.joiner is None or not older.joiner.open or self.joiner is None or self.read_offset:
            return False
        if older.joiner.format != self.joiner.format:
            return False
        older.joiner.hand_over(self.joiner, older.origin)
        older.handed = older.read_offset
        if older.grouper is not None and self.grouper is not None:  # its held records go first
            closed: list[Record] = []
            older.grouper.flush(closed)
            self.grouper.ready[:0] = [(index - len(closed), rec) for index, rec in enumerate(closed)]
        return True

    def joining(self) -> bool:
        """A line taken over from the generation before is still open here."""
        return self.joiner is not None and self.joiner.carrying()

    def release_join(self) -> int:
        """The line handed on is complete: ``emitted`` moves past it; the offset to acknowledge."""
        end = self.handed if self.handed is not None else self.emitted
        self.emitted, self.handed = max(self.emitted, end), None
        return end

    def continues(self, other: FileReader) -> bool | None:
        """Does this file hold ``other``'s content where ``other`` was last read? None: too early to say."""
        end, sample = other.sample
        if not sample or os.fstat(self.fd).st_size < end:
            return None
        return os.pread(self.fd, len(sample), end - len(sample)) == sample

    def close(self) -> None:
        for fd in (self.fd, self.raw_fd):
            if fd is not None:
                with contextlib.suppress(OSError):  # EIO on close: the descriptor is released all the same
                    os.close(fd)

    # ---------------------------------------------------------------- reading

    def read(self, out: Lines, room: int, byte_room: int, *, verify_head: bool) -> ReadResult:
        """Append up to ``room`` complete lines to ``out``. ``verify_head``: check that the first line
        is still the one we know (a copytruncate can regrow a file past, or exactly to, our offset)."""
        size = os.fstat(self.fd).st_size  # an OSError is this file's alone: the tail source reports it
        result = ReadResult(size=size, previous_size=self.size)
        self.size = size
        if size < self.read_offset:
            result.truncated = f"size {size} below offset {self.read_offset}"
            return result
        end = size if self.limit is None else min(size, self.limit)
        grew = end > self.read_offset
        if (grew or self.recheck) and verify_head and self.fp.complete:
            self.recheck = False
            if os.pread(self.fd, len(self.fp.head), 0) != self.fp.head:
                result.truncated = "its first line changed"
                return result
        if not grew:
            return result
        result.grew = True
        want = min(self.read_chunk_bytes, end - self.read_offset, max(byte_room, 4096))
        if self.line_bytes and room > 0:  # bytes read past the batch's room are read again next time
            want = min(want, max(4096, room * self.line_bytes * 5 // 4))
        data = os.pread(self.fd, want, self.read_offset)
        if not data:
            return result
        now = self.last_growth = time.monotonic()
        if (
            self.joiner is None
            and self.acked >= self.emitted >= self.replay_end
            and now - self.clock_taken > CLOCK_STALE
        ):
            self._renew_clock(data, now)
        start = self.read_offset
        self.read_offset += len(data)
        sample_end, previous = self.sample
        tail = (previous + data[-SAMPLE:])[-SAMPLE:] if sample_end == start else data[-SAMPLE:]
        self.sample = (self.read_offset, tail)
        result.bytes_read = len(data)
        if self.joiner is None:
            split = self._split if self.grouper is None else self._split_grouped
            result.overlong = split(data, out, room)
        else:
            result.overlong = self._split_entries(data, out, room)
        return result

    def _lines_from(self, data: bytes, out: Lines) -> tuple[bytes, int] | None:
        """The bytes to cut into lines (the partial line kept, then ``data``) and the offset they start
        at; None while still inside an overlong line, whose bytes are skipped. An overlong line that
        ends in ``data`` is appended to ``out`` (truncated and flagged)."""
        if self.skipping is not None:
            newline = data.find(b"\n")
            if newline < 0:
                return None
            out.append(self.skipping)
            self.skipping = None
            base = self.read_offset - len(data) + newline + 1
            self.emitted = base
            return data[newline + 1 :], base
        base = self.read_offset - len(data) - len(self.partial)
        return (self.partial + data if self.partial else data), base

    def _block(self, joined: bytes, base: int, out: Lines, room: int, hold_last: bool = False) -> bool:
        """The hot path: the whole lines in ``joined`` (what ``_lines_from`` gives), as one
        :class:`Block`. False, with nothing changed: lines must be cut one by one (an overlong line
        may be among them, the file's first read may start with a byte order mark, there is no
        newline), which ``_split`` does. ``hold_last`` (multiline records): only for a read of JSON
        lines (``Rules.plain_block``), and the last whole line stays in ``partial``, as a record the
        next line may continue."""
        if base == 0 and joined.startswith(BOM):
            return False
        end = joined.rfind(b"\n") + 1
        max_line = self.max_line_bytes
        if not end or (end > max_line and not _lines_within(joined, end, max_line)):
            return False
        kept = end  # where the lines handed out end
        if hold_last:
            assert self.grouper is not None
            if len(joined) - end > max_line or not self.grouper.rules.plain_block(joined, end):
                return False
            kept = joined.rfind(b"\n", 0, end - 1) + 1
        lines, cut = count_lines(joined, kept, room)
        if cut < kept:  # batch full: give the rest back, to be read again next poll
            kept, self.read_offset, self.partial = cut, base + cut, b""
        elif hold_last:
            self.partial = joined[kept:]
        else:
            self._keep_partial(joined[end:], base + end)
        if lines:
            out.append(Block(self.origin, joined[:kept], base, lines))
            self.line_bytes = kept // lines
        self.emitted = base + kept
        return True

    def _keep_partial(self, partial: bytes, offset: int) -> None:
        """Keep the bytes after the last newline; past ``max_line_bytes`` they are the start of an
        overlong line, truncated there, whose other bytes are skipped until its newline."""
        line = partial[3:] if offset == 0 and partial.startswith(BOM) else partial
        if len(line) > self.max_line_bytes:
            self.skipping = Record(line[: self.max_line_bytes], self.origin, offset, truncated=True)
            partial = b""
        self.partial = partial

    def _split(self, data: bytes, out: Lines, room: int) -> int:
        """Cut ``data`` into lines: a Block where it can be (``_block``), else one Record per line.
        Returns how many lines were cut at ``max_line_bytes``."""
        max_line = self.max_line_bytes
        before = len(out)
        start = self._lines_from(data, out)
        if start is None:
            return 0  # still inside the overlong line; its bytes are skipped
        data, base = start
        overlong = len(out) - before  # the overlong line that ended here
        room -= overlong
        if self._block(data, base, out, room):
            return overlong
        parts = data.split(b"\n")
        partial = parts.pop()
        origin = self.origin
        pos = base
        if base == 0 and parts and parts[0].startswith(BOM):  # kept in the file's bytes, not in the line
            out.append(Record(parts[0][3:][:max_line], origin, 0, truncated=len(parts[0]) - 3 > max_line))
            overlong += len(parts[0]) - 3 > max_line
            pos, room, parts = len(parts[0]) + 1, room - 1, parts[1:]
        pos, parts, full = self._split_fast(parts, out, room, pos)
        if full:
            return overlong
        for taken, line in enumerate(parts):
            if taken == room:  # batch full: give the rest back, to be read again next poll
                self.read_offset = pos
                self.partial = b""
                self.emitted = pos
                return overlong
            if len(line) > max_line:
                out.append(Record(line[:max_line], origin, pos, truncated=True))
                overlong += 1
            else:
                out.append(Record(line, origin, pos))
            pos += len(line) + 1
        self.emitted = pos
        self._keep_partial(partial, pos)
        return overlong

    def _split_fast(self, parts: list[bytes], out: Lines, room: int, pos: int) -> tuple[int, list[bytes], bool]:
        """The common case at C speed: no overlong line among those that fit in the batch.
        Returns (the offset after the lines taken, the lines left to the general loop, batch full)."""
        take = parts if room < 0 or len(parts) <= room else parts[:room]
        if not take or max(map(len, take)) > self.max_line_bytes:
            return pos, parts, False
        out.extend(records_of(take, self.origin, pos))
        taken = sum(map(len, take)) + len(take)
        self.line_bytes = taken // len(take)
        pos += taken
        if len(take) < len(parts):  # batch full: give the rest back, to be read again next poll
            self.read_offset = pos
            self.partial = b""
            self.emitted = pos
            return pos, [], True
        return pos, [], False

    def _split_entries(self, data: bytes, out: Lines, room: int) -> int:
        """Cut ``data`` into container runtime entries and let the joiner unwrap them. ``emitted`` stays
        at the first entry of a join still open, so a saved position never falls inside one."""
        joiner = self.joiner
        assert joiner is not None
        skipped = len(out)
        start = self._lines_from(data, out)  # an entry longer than any runtime writes is skipped
        if start is None:
            return 0
        data, base = start
        room -= len(out) - skipped
        parts = data.split(b"\n")
        partial = parts.pop()
        origin = self.origin
        pos = base
        joined: list[Record] = []
        for line in parts:
            if len(joined) >= room:  # batch full: give the rest back, to be read again next poll
                partial = b""
                self.read_offset = pos
                break
            joiner.feed(line, pos, origin, joined)
            pos += len(line) + 1
        if self.grouper is not None:
            self.grouper.feed(joined, out)  # type: ignore[arg-type] # appends Records
        else:
            out.extend(joined)
        grouped = self.grouper.pending_start() if self.grouper is not None else None
        open_at = [at for at in (joiner.pending_start(), grouped) if at is not None]
        self.emitted = min([pos, *open_at])
        if len(partial) > self.max_line_bytes * 2:  # an entry that never ends: keep its start, flagged
            self.skipping = Record(partial[: self.max_line_bytes], origin, pos, truncated=True)
            partial = b""
        self.partial = partial
        return sum(1 for rec in joined if rec.truncated)

    def _split_grouped(self, data: bytes, out: Lines, room: int) -> int:
        """``_split`` with multiline records: the lines of a record still open (at least the last
        line read, which the next line may continue) stay in ``partial``, so ``emitted`` stays at
        its first line and a saved position never falls inside it; they are read again with the
        next bytes. A read of JSON lines only (``Rules.plain_block``) is still one Block."""
        grouper = self.grouper
        assert grouper is not None
        before = len(out)
        start = self._lines_from(data, out)
        if start is None:
            return 0  # still inside the overlong line; its bytes are skipped
        joined, base = start
        overlong = len(out) - before
        room -= overlong
        if self._block(joined, base, out, room, hold_last=True):
            return overlong
        end = joined.rfind(b"\n") + 1
        max_line = self.max_line_bytes
        parts = joined[:end].split(b"\n")
        parts.pop()
        tail, origin, pos = joined[end:], self.origin, base
        records: list[Record] = []
        for line in parts:
            if len(records) == room:  # batch full: give the rest back, to be read again next poll
                self.read_offset, tail = pos, b""
                break
            raw = line[3:] if pos == 0 and line.startswith(BOM) else line
            records.append(Record(raw[:max_line], origin, pos, truncated=len(raw) > max_line))
            pos += len(line) + 1
        overlong += sum(rec.truncated for rec in records)
        grouped: list[Record] = []
        grouper.feed(records, grouped)
        held = grouper.open.get(None)
        if held is not None and (held.first.truncated or len(tail) > max_line):
            grouper.close(None, grouped)  # cannot be held: an overlong line, or one after it
            held = None
        grouper.open.clear()  # the record still open is held in ``partial``, read again next time
        out.extend(grouped)
        hold = held.first.offset if held is not None else pos
        self.emitted = hold
        self.partial = joined[hold - base : pos - base] + tail if hold < pos else b""
        if held is None:
            self._keep_partial(tail, pos)
        return overlong

    def group_due(self) -> bool:
        """A multiline record is held, and its file has not grown for the rules' timeout, or a newer
        generation of its stream is to be read (the writer moved on: its lines must not come first)."""
        grouper = self.grouper
        if grouper is None or (not self.superseded and self.idle_for() < grouper.rules.timeout):
            return False
        return self.holding()

    def holding(self) -> bool:
        """A multiline record is held open (whole lines the next line may still continue)."""
        if self.grouper is None:
            return False
        return bool(self.grouper.open) if self.joiner is not None else b"\n" in self.partial

    def take_group(self) -> list[Record]:
        """The multiline records held open, as they stand: the next line did not come in time (or
        a bounded read ended). Their lines are whole: ``emitted`` moves past them."""
        grouper, records = self.grouper, list[Record]()
        if grouper is None:
            return records
        if self.joiner is not None:
            grouper.flush(records)
            self.emitted = self.line_start()
            return records
        end = self.partial.rfind(b"\n") + 1
        if end:
            base = self.read_offset - len(self.partial)
            lines = self.partial[:end].split(b"\n")
            lines.pop()
            bom = 3 if base == 0 and lines[0].startswith(BOM) else 0
            lines[0] = lines[0][bom:]
            taken = records_of(lines, self.origin, base + bom)
            taken[0].offset = base  # a byte order mark is kept in the file's bytes, not in the line
            grouper.feed(taken, records)
            grouper.flush(records)
            self.partial = self.partial[end:]
            self.emitted = self.read_offset - len(self.partial)
        return records

    def take_partial(self, advance: bool = True) -> list[Record]:
        """The lines that will never be completed (the writer moved on, or a bounded read ended):
        a trailing line without its newline, and container joins still open.

        ``advance=False`` (--once) leaves ``emitted`` before them, so a later run completes them."""
        records: list[Record] = []
        records += self.take_group()  # whole lines: ``emitted`` moves past them
        if self.joiner is not None:
            self.joiner.flush(self.origin, records)
        if self.skipping is not None:
            records.append(self.skipping)
            self.skipping = None
        elif self.partial:
            offset = self.read_offset - len(self.partial)
            line = self.partial[3:] if offset == 0 and self.partial.startswith(BOM) else self.partial
            records.append(Record(line, self.origin, offset))
        self.partial = b""
        if advance:
            self.emitted = self.read_offset
        return records


def _timed(line: bytes) -> bool:
    """Does the line carry a time of its own (``logfields.timestamp_ns``)?"""
    try:
        fields = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return type(fields) is dict and timestamp_ns(fields) is not None


def _lines_within(data: bytes, end: int, limit: int) -> bool:
    """No line in ``data[:end]`` is longer than ``limit`` bytes, checked with a few ``find`` s: a
    newline in every aligned window of ``limit // 2`` bytes, as a longer line would cover a whole
    window. False may also mean a line of between ``limit // 2`` and ``limit`` bytes; such reads
    are cut line by line, which tells."""
    window = limit // 2
    return all(data.find(b"\n", start, start + window) >= 0 for start in range(0, end - window + 1, window))
