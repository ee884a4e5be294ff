"""Shared-memory slots: the bytes of a batch on its way to a worker, and of what the worker encoded
on its way back, without going through the pool's pipes.

Through a pipe a batch's bytes are copied six times (pickled, written, read, buffered, joined,
unpickled), and so are the payloads coming back: about 0.4 µs of CPU per 400-byte line each way,
as much as parsing it. Through a slot they are copied twice: the bridge writes the lines in, the
worker reads them out; the worker writes its payloads over them, the bridge reads them out when it
collects the result. Everything else (offsets, IDs, counters) still travels pickled.

A slot is a file in ``/dev/shm`` read and written with ``pread``/``pwrite``, never mapped: a mapped
page counts in the RSS of every process that touched it (the bridge's and each worker's, the same
page three times), and a write to a mapped page that ``/dev/shm`` has no room for kills the process
with SIGBUS, where ``pwrite`` fails with ENOSPC and the batch takes the pipe. Its pages are those
written so far: a slot holds at most one batch's lines or payloads, whichever is larger.

A slot belongs to one batch from the moment it is handed out until its result is collected. After a
worker crash the slots of the batches handed out again are removed, not reused: a worker of the
broken pool may still be writing to one for a moment. What does not fit goes through the
pipe as before, and so does everything where ``/dev/shm`` does not exist.

The bridge creates the segments (``SharedMemory``, so multiprocessing's resource tracker unlinks
them even after a ``kill -9``) and unlinks them when the pool stops. Workers open them by path,
without registering them with the tracker, whose cleanup would otherwise unlink them when a
worker exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
SHM_DIR = Path("/dev/shm")
MIN_SHARED_BYTES = 16 * 1024  # a smaller payload costs less pickled than the detour
IOV_MAX = 1024  # buffers per pwritev (Linux's UIO_MAXIOV)


@dataclass(frozen=True, slots=True)
class Part:
    """Bytes ``[start, end)`` of the batch's slot, in place of a bytes object."""

    start: int
    end: int


class Slot:
    """One segment: its name (what a worker opens), its size (what fits), and the bridge's descriptor."""

    def __init__(self, segment: SharedMemory) -> None:
        self.segment = segment
        self.name = segment.name
        self.size = segment.size
        self.fd = os.open(SHM_DIR / segment.name, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        segment.close()  # its mapping: never touched (see above); ``unlink`` still works after it
        self.used = 0  # the most bytes written to it at once: its pages in /dev/shm

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        _remove(self.segment)


class Slots:
    """The bridge's slots, ``size`` bytes each at most, made as batches need them and reused."""

    def __init__(self, size: int, enabled: bool | None = None) -> None:
        self.size = size
        self.enabled = SHM_DIR.is_dir() if enabled is None else enabled
        self.free: list[Slot] = []
        self.made: list[Slot] = []
        self.peak = 0  # slots made at most (at once): one per batch between read and collected
        self.held = 0  # bytes of /dev/shm they held when closed

    def take(self) -> Slot | None:
        """A free slot, or None when shared memory is not available here."""
        if self.free:
            return self.free.pop()
        if not self.enabled:
            return None
        try:
            slot = Slot(SharedMemory(f"obsbox-{os.getpid()}-{secrets.token_hex(4)}", create=True, size=self.size))
        except OSError:  # /dev/shm not writable: the pipes still work
            self.enabled = False
            return None
        self.made.append(slot)
        self.peak = max(self.peak, len(self.made))
        return slot

    def give(self, slot: Slot) -> None:
        self.free.append(slot)

    def discard(self, slot: Slot) -> None:
        """Remove a slot for good: after a crash, a worker of the broken pool may still be writing to
        it for a moment, so neither the batch handed out again nor any later one may use it."""
        self.made.remove(slot)
        slot.close()

    def used(self) -> int:
        """Bytes of ``/dev/shm`` the slots hold now (each the most written to it at once)."""
        return sum(slot.used for slot in self.made)

    def report(self) -> str:
        if not self.peak:
            return "no shared memory"
        held = max(self.held, self.used())
        return f"shared-memory slots: {self.peak} of {self.size / 2**20:g} MiB at most, {held / 2**20:.1f} MiB written"

    def close(self) -> None:
        self.held = max(self.held, self.used())
        for slot in self.made:
            slot.close()
        self.made, self.free = [], []


def _remove(segment: SharedMemory) -> None:
    with contextlib.suppress(OSError, BufferError):
        segment.close()
    with contextlib.suppress(OSError):
        segment.unlink()


_full_said: set[str] = set()  # reasons a write to a slot failed, logged once per process


def _failed(exc: OSError) -> None:
    """A slot could not be written (ENOSPC: /dev/shm is full; a container's is 64 MiB by default)."""
    reason = exc.strerror or str(exc)
    if reason not in _full_said:
        _full_said.add(reason)
        log.warning("shared memory (%s): %s; batches that do not fit there go through the pipes", SHM_DIR, reason)


# ---------------------------------------------------------------- the bridge side


def lines_into(packed: Any, slot: Slot) -> Any | None:
    """``packed`` (a ``workers.Packed``) with its runs' lines written to ``slot`` and replaced by
    :class:`Part` s; None when they do not fit, or cannot be written."""
    joined = [data for _, data, _, _ in packed.runs]
    total = sum(map(len, joined))
    if total > slot.size:
        return None
    try:
        for start in range(0, len(joined), IOV_MAX):
            offset = sum(map(len, joined[:start]))
            wanted = sum(map(len, joined[start : start + IOV_MAX]))
            if os.pwritev(slot.fd, joined[start : start + IOV_MAX], offset) != wanted:
                raise OSError(28, os.strerror(28))  # a short write: only when out of room
    except OSError as exc:
        _failed(exc)
        return None
    slot.used = max(slot.used, total)
    runs, cursor = [], 0
    for (origin, _data, lengths, offsets), size in zip(packed.runs, map(len, joined), strict=True):
        runs.append((origin, Part(cursor, cursor + size), lengths, offsets))
        cursor += size
    return replace(packed, runs=runs, slot=slot.name)


def _each(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` (payloads: lists and tuples of bytes and other things) with ``leaf`` applied to
    everything that is not a list or tuple."""
    kind = type(value)
    if kind is list or kind is tuple:
        return kind(_each(item, leaf) for item in value)
    return leaf(value)


def taken(value: Any, slot: Slot) -> Any:
    """A worker's ``value`` with every :class:`Part` read out of ``slot`` as bytes."""

    def read(item: Any) -> Any:
        if type(item) is not Part:
            return item
        slot.used = max(slot.used, item.end)
        return _read(slot.fd, item)

    return _each(value, read)


def _read(fd: int, part: Part) -> bytes:
    data = os.pread(fd, part.end - part.start, part.start)
    if len(data) != part.end - part.start:  # only if the segment was cut short under us
        raise OSError(f"shared-memory slot: {len(data)} bytes where {part.end - part.start} were written")
    return data


# ---------------------------------------------------------------- the worker side

_opened: dict[str, int] = {}  # in a worker: slot name → its descriptor


def _descriptor(name: str) -> int:
    fd = _opened.get(name)
    if fd is None:
        fd = _opened[name] = os.open(SHM_DIR / name, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    return fd


def lines_from(packed: Any) -> Any:
    """In a worker: ``packed`` with its runs' lines read out of its slot, if it has one."""
    if packed.slot is None:
        return packed
    fd = _descriptor(packed.slot)
    runs = [(origin, _read(fd, part), lengths, offsets) for origin, part, lengths, offsets in packed.runs]
    return replace(packed, runs=runs)


def put(value: Any, name: str | None) -> Any:
    """In a worker: ``value`` (payloads) with its large bytes objects written over the slot's lines
    (read out already) and replaced by :class:`Part` s, as far as they fit in the segment; what
    cannot be written stays bytes, for the pipe."""
    if name is None:
        return value
    fd, cursor = _descriptor(name), 0
    room = os.fstat(fd).st_size

    def place(item: Any) -> Any:
        nonlocal cursor
        if type(item) is bytes and len(item) >= MIN_SHARED_BYTES and cursor + len(item) <= room:
            try:
                written = os.pwrite(fd, item, cursor)
            except OSError as exc:
                _failed(exc)
                return item
            if written != len(item):
                return item
            start, cursor = cursor, cursor + len(item)
            return Part(start, cursor)
        return item

    return _each(value, place)
