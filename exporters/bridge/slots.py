"""Shared-memory slots: the bytes of a batch on its way to a worker, and of what the worker encoded
on its way back, without going through the pool's pipes.

Through a pipe a batch's bytes are copied six times (pickled, written, read, buffered, joined,
unpickled), and so are the payloads coming back: about 0.4 µs of CPU per 400-byte line each way,
as much as parsing it. Through a slot they are copied twice: the bridge writes the lines in, the
worker reads them out; the worker writes its payloads over them, the bridge copies them out when it
collects the result. Everything else (offsets, IDs, counters) still travels pickled.

A slot belongs to one batch from the moment it is handed out until its result is collected. After a
worker crash the slots of the batches handed out again are removed, not reused: a worker of the
broken pool may still be writing to one for a moment. What does not fit goes through the
pipe as before, and so does everything where ``/dev/shm`` does not exist.

The bridge creates the segments (``SharedMemory``, so multiprocessing's resource tracker unlinks
them even after a ``kill -9``) and unlinks them when the pool stops. Workers map them by path,
without registering them with the tracker, whose cleanup would otherwise unlink them when a
worker exits.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

SHM_DIR = Path("/dev/shm")
MIN_SHARED_BYTES = 16 * 1024  # a smaller payload costs less pickled than the detour


@dataclass(frozen=True, slots=True)
class Part:
    """Bytes ``[start, end)`` of the batch's slot, in place of a bytes object."""

    start: int
    end: int


class Slots:
    """The bridge's slots, ``size`` bytes each, made as batches need them and reused."""

    def __init__(self, size: int, enabled: bool | None = None) -> None:
        self.size = size
        self.enabled = SHM_DIR.is_dir() if enabled is None else enabled
        self.free: list[SharedMemory] = []
        self.made: list[SharedMemory] = []
        self.peak = 0  # slots made at most (at once): one per batch between read and collected

    def take(self) -> SharedMemory | None:
        """A free slot, or None when shared memory is not available here."""
        if self.free:
            return self.free.pop()
        if not self.enabled:
            return None
        try:
            slot = SharedMemory(f"obsbox-{os.getpid()}-{secrets.token_hex(4)}", create=True, size=self.size)
        except OSError:  # /dev/shm not writable: the pipes still work
            self.enabled = False
            return None
        try:
            _reserve(slot)
        except OSError:  # /dev/shm too small (a container's is 64 MiB by default): the pipes still work
            _remove(slot)
            self.enabled = False
            return None
        self.made.append(slot)
        self.peak = max(self.peak, len(self.made))
        return slot

    def give(self, slot: SharedMemory) -> None:
        self.free.append(slot)

    def discard(self, slot: SharedMemory) -> None:
        """Remove a slot for good: after a crash, a worker of the broken pool may still be writing to
        it for a moment, so neither the batch handed out again nor any later one may use it."""
        self.made.remove(slot)
        _remove(slot)

    def report(self) -> str:
        return f"shared-memory slots: {self.peak} of {self.size / 2**20:g} MiB" if self.peak else "no shared memory"

    def close(self) -> None:
        for slot in self.made:
            _remove(slot)
        self.made, self.free = [], []


def _remove(slot: SharedMemory) -> None:
    with contextlib.suppress(OSError, BufferError):
        slot.close()
    with contextlib.suppress(OSError):
        slot.unlink()


def _reserve(slot: SharedMemory) -> None:
    """Allocate the slot's pages now: a write to a mapped page that ``/dev/shm`` has no room for
    would kill the process with SIGBUS, where this fails with ENOSPC."""
    fd = os.open(SHM_DIR / slot.name, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, slot.size)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- the bridge side


def _buffer(slot: SharedMemory) -> memoryview:
    buf = slot.buf
    if buf is None:  # closed: only once the pool has stopped
        raise ValueError(f"shared-memory slot {slot.name} is closed")
    return buf


def lines_into(packed: Any, slot: SharedMemory) -> Any | None:
    """``packed`` (a ``workers.Packed``) with its runs' lines written to ``slot`` and replaced by
    :class:`Part` s; None when they do not fit."""
    if sum(len(joined) for _, joined, _, _ in packed.runs) > slot.size:
        return None
    buf, cursor, runs = _buffer(slot), 0, []
    for origin, joined, lengths, offsets in packed.runs:
        end = cursor + len(joined)
        buf[cursor:end] = joined
        runs.append((origin, Part(cursor, end), lengths, offsets))
        cursor = end
    return replace(packed, runs=runs, slot=slot.name)


def _each(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` (payloads: lists and tuples of bytes and other things) with ``leaf`` applied to
    everything that is not a list or tuple."""
    kind = type(value)
    if kind is list or kind is tuple:
        return kind(_each(item, leaf) for item in value)
    return leaf(value)


def taken(value: Any, slot: SharedMemory) -> Any:
    """A worker's ``value`` with every :class:`Part` copied out of ``slot`` as bytes."""
    buf = _buffer(slot)
    return _each(value, lambda item: bytes(buf[item.start : item.end]) if type(item) is Part else item)


# ---------------------------------------------------------------- the worker side

_mapped: dict[str, mmap.mmap] = {}  # in a worker: slot name → its mapping


def _mapping(name: str) -> mmap.mmap:
    mapping = _mapped.get(name)
    if mapping is None:
        fd = os.open(SHM_DIR / name, os.O_RDWR)
        try:
            mapping = _mapped[name] = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
    return mapping


def lines_from(packed: Any) -> Any:
    """In a worker: ``packed`` with its runs' lines read out of its slot, if it has one."""
    if packed.slot is None:
        return packed
    mapping = _mapping(packed.slot)
    runs = [
        (origin, mapping[part.start : part.end], lengths, offsets) for origin, part, lengths, offsets in packed.runs
    ]
    return replace(packed, runs=runs)


def put(value: Any, name: str | None) -> Any:
    """In a worker: ``value`` (payloads) with its large bytes objects written over the slot's lines
    (read out already) and replaced by :class:`Part` s, as far as they fit."""
    if name is None:
        return value
    mapping, cursor = _mapping(name), 0

    def place(item: Any) -> Any:
        nonlocal cursor
        if type(item) is bytes and len(item) >= MIN_SHARED_BYTES and cursor + len(item) <= len(mapping):
            start, cursor = cursor, cursor + len(item)
            mapping[start:cursor] = item
            return Part(start, cursor)
        return item

    return _each(value, place)
