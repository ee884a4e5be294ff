"""Shared-memory slots between the bridge and its workers: what goes in comes out, what does not fit
takes the pipe, and the segments go away with the pool (also after a ``kill -9``, see test_workers)."""

from __future__ import annotations

import os
from pathlib import Path

from obsbox.exporters.bridge import slots
from obsbox.exporters.bridge.record import Block, Lines, Origin, Record
from obsbox.exporters.bridge.workers import pack, unpack


def records(count: int, size: int) -> Lines:
    one, two = Origin("/var/log/a.log", b"a" * 16), Origin("/var/log/b.log", b"b" * 16)
    return Lines([Record(b"%06d" % i + b"x" * (size - 6), one if i % 3 else two, i * (size + 1)) for i in range(count)])


def mixed() -> Lines:
    """Blocks (whole lines as read) around Records of another file, one of them truncated and with
    attributes: what a batch read from a JSON file and a container log holds."""
    one, two = Origin("/var/log/a.log", b"a" * 16), Origin("/var/log/b.log", b"b" * 16)
    lines = Lines()
    lines.append(Block(one, b"".join(b'{"n":%d}\n' % i for i in range(50)), 1000, 50))
    cut = Record(b"y" * 64, two, 0, truncated=True)
    cut.attributes = {"stream": "stderr"}
    lines.extend([Record(b"first", two, 100), cut, Record(b"last", two, 300)])
    lines.append(Block(one, b'{"n":50}\n{"n":51}\n', 2000, 2))
    return lines


def test_a_batch_written_to_a_slot_unpacks_in_the_worker_to_the_same_records():
    pool = slots.Slots(64 * 1024)
    try:
        slot = pool.take()
        assert slot is not None and (slots.SHM_DIR / slot.name).exists()
        for batch in (records(100, 300), mixed()):
            shipped = slots.lines_into(pack(batch), slot)
            assert shipped is not None and shipped.slot == slot.name
            assert all(type(run[1]) is slots.Part for run in shipped.runs)  # no line bytes left to pickle
            got = unpack(slots.lines_from(shipped))

            def state(recs: list[Record]) -> list[tuple]:
                return [(r.raw, r.origin, r.offset, r.truncated, r.attributes) for r in recs]

            assert state(got) == state(batch.records()) and len(got) == len(batch)
        assert [r.offset for r in mixed().records()[:3]] == [1000, 1008, 1016]  # each line after the one before
    finally:
        pool.close()


def test_lines_that_do_not_fit_take_the_pipe():
    pool = slots.Slots(16 * 1024)
    try:
        assert slots.lines_into(pack(records(100, 300)), pool.take()) is None  # 30 KB of lines
    finally:
        pool.close()


def test_payloads_written_over_the_lines_come_back_as_the_same_bytes_and_the_oversized_stay_bytes():
    pool = slots.Slots(64 * 1024)
    try:
        slot = pool.take()
        big, small, huge = os.urandom(40 * 1024), os.urandom(100), os.urandom(80 * 1024)
        payloads = [[(big, {"Content-Type": "x"}, 0, 7), (small, {}, 7, 9)], huge, None]
        placed = slots.put(payloads, slot.name)
        assert type(placed[0][0][0]) is slots.Part  # large enough to be worth it, and it fits
        assert placed[0][1][0] is small  # too small to be worth it
        assert placed[1] is huge  # does not fit in what is left
        assert slots.taken(placed, slot) == payloads
    finally:
        pool.close()


def test_slots_are_reused_and_removed_when_the_pool_closes():
    pool = slots.Slots(4096)
    first = pool.take()
    second = pool.take()
    pool.give(first)
    assert pool.take() is first
    names = [first.name, second.name]
    assert all(name.startswith(f"obsbox-{os.getpid()}-") for name in names)
    assert pool.report() == "shared-memory slots: 2 of 0.00390625 MiB at most, 0.0 MiB written"
    pool.close()
    assert not any((slots.SHM_DIR / name).exists() for name in names)


def test_without_shared_memory_there_are_no_slots():
    pool = slots.Slots(4096, enabled=False)
    assert pool.take() is None
    assert pool.report() == "no shared memory"


def test_a_slot_holds_only_the_pages_written_to_it():
    """Nothing is reserved up front: a slot sized for the largest batch costs /dev/shm only what the
    batches written to it took, and no process maps it (its pages would count in every RSS)."""
    pool = slots.Slots(1024 * 1024)
    try:
        slot = pool.take()
        assert slot is not None
        assert slots.lines_into(pack(records(100, 300)), slot) is not None  # 30 KB of lines
        held = os.stat(slots.SHM_DIR / slot.name).st_blocks * 512
        assert 30_000 <= held <= 64 * 1024, held
        assert slot.used == 30_000 and pool.used() == 30_000
        assert f"/dev/shm/{slot.name}" not in Path("/proc/self/maps").read_text()
    finally:
        pool.close()


def test_when_shared_memory_has_no_room_the_batch_and_its_payloads_take_the_pipe(monkeypatch, caplog):
    """A container's /dev/shm is 64 MiB by default. A write it has no room for fails (ENOSPC), never
    a SIGBUS as a write to a mapped page would be: the lines and the payloads go through the pipes,
    and the log says so once."""

    def full(*_args: object) -> int:
        raise OSError(28, "No space left on device")

    pool = slots.Slots(64 * 1024)
    try:
        slot = pool.take()
        assert slot is not None
        monkeypatch.setattr(slots.os, "pwritev", full)
        monkeypatch.setattr(slots.os, "pwrite", full)
        monkeypatch.setattr(slots, "_full_said", set())
        assert slots.lines_into(pack(records(10, 300)), slot) is None
        assert slots.lines_into(pack(records(10, 300)), slot) is None
        payload = os.urandom(20 * 1024)
        assert slots.put([payload], slot.name) == [payload]
        said = [r.getMessage() for r in caplog.records if "No space left on device" in r.getMessage()]
        assert len(said) == 1 and "go through the pipes" in said[0]
    finally:
        pool.close()


def test_a_discarded_slot_is_removed_and_never_handed_out_again():
    pool = slots.Slots(4096)
    try:
        kept, dropped = pool.take(), pool.take()
        pool.give(kept)
        pool.discard(dropped)
        assert not (slots.SHM_DIR / dropped.name).exists()
        assert pool.made == [kept]
        assert pool.take() is kept
        assert pool.take() not in (kept, dropped)
    finally:
        pool.close()
