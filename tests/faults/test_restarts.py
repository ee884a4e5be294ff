"""Restarts after a rotation the bridge had not read yet: what a saved position may claim.

A commit saves a position for every file, also for one whose batch it did not carry. When such a
file was truncated and rewritten since it was last read (copytruncate while a sink held the
pipeline, or simply before its turn came), the position keeps the old content's offset: its print
must stay the old content's too, or the next start resumes the new content at an offset that
belongs to the old one, and skips its first lines.
"""

from __future__ import annotations

import os
from pathlib import Path

from obsbox.config import build
from obsbox.exporters.bridge.sources.tail import TailConfig, TailSource
from tests.bridge.harness import context
from tests.faults.ledger import Ledger


def tail(tmp_path: Path, include: list[str]) -> TailSource:
    """A tail source that hands out every whole line at once (``multiline: none``): these tests drive
    exact poll sequences, which a last line held for a stack trace would shift."""
    options = {"include": include, "positions": str(tmp_path / "positions.json"), "hold_files": False}
    config = build(TailConfig, {**options, "multiline": "none"})
    return TailSource(config, context(state_dir=tmp_path))


def drain(source: TailSource, room: int = 10_000) -> list[bytes]:
    """Poll and acknowledge until nothing is left; the lines read."""
    got: list[bytes] = []
    while (batch := source.poll(room, 1 << 20)) is not None:
        got.extend(rec.raw for rec in batch.lines.records())
        source.commit(batch.checkpoint)
    return got


def test_a_file_rewritten_before_its_turn_is_read_from_its_start_after_a_restart(tmp_path):
    busy, quiet = Ledger("busy"), Ledger("quiet")
    busy_log, quiet_log = tmp_path / "busy.json", tmp_path / "quiet.json"
    busy.append(busy_log, 3)
    quiet.append(quiet_log, 3)  # about 200 bytes: its print covers them all
    source = tail(tmp_path, [str(busy_log), str(quiet_log)])
    received = drain(source)
    os.truncate(quiet_log, 0)  # copytruncate: the copy is elsewhere, the new content longer
    quiet.append(quiet_log, 20)
    busy.append(busy_log, 1)
    source.tracker.measure()  # a scan saw the new size (as the watcher does while a sink is down)
    order = [t.path for t in source.tracker.readable()]
    source.rr = (order.index(str(busy_log)) - 1) % len(order)  # the busy file's turn comes first
    batch = source.poll(1, 1 << 20)  # room for one line: the quiet file is not looked at
    assert batch is not None
    assert [fid for fid, _ in batch.checkpoint] == [
        next(t.id for t in source.files.values() if t.path == str(busy_log))
    ]
    received.extend(rec.raw for rec in batch.lines.records())
    source.commit(batch.checkpoint)  # saves a position for the quiet file too, at its old offset
    source.shutdown()  # as a kill -9 would leave it: the quiet file's new lines never read

    restarted = tail(tmp_path, [str(busy_log), str(quiet_log)])
    received.extend(drain(restarted))
    restarted.shutdown()
    busy.check(received).assert_delivered()
    quiet.check(received).assert_delivered()  # the new content from its first line


def test_a_batch_that_read_a_file_before_and_after_its_copytruncate_acknowledges_both(tmp_path):
    """The pipeline merges the checkpoints of the polls that make one batch. One poll read the
    original up to the truncation, a later one its new generation: acknowledging that batch must
    also acknowledge the copy that took over the old generation's lines, or the copy is never
    drained (its descriptor and hold link stay, and a restart reads it again)."""
    ledger = Ledger("ct")
    log = tmp_path / "app.json"
    ledger.append(log, 5)
    source = tail(tmp_path, [str(tmp_path / "app.json*")])
    source.cfg.rotate_wait = 0.0
    merged: dict = {}
    first = source.poll(100, 1 << 20)
    assert first is not None
    merged.update(first.checkpoint)
    copy = tmp_path / "app.json.1"
    copy.write_bytes(log.read_bytes())  # copytruncate: the copy, then the truncation
    source.scan()  # the copy is seen, parked on its original
    os.truncate(log, 0)
    ledger.append(log, 3)
    new_lines = 0
    for _ in range(20):  # the truncation is found, then the new generation read (after a scan or two)
        batch = source.poll(100, 1 << 20)
        if batch is None:
            source.scan()
            continue
        merged.update(batch.checkpoint)
        new_lines += len(batch.lines.records())
    assert new_lines == 3, "the new generation was read into the same batch"
    source.commit(merged)  # the batch that carried all of it is acknowledged
    (taken_over,) = [t for t in source.files.values() if t.path == str(copy)]
    assert taken_over.reader.acked == copy.stat().st_size, "the copy's lines were acknowledged"
    source.shutdown()
