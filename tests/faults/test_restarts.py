"""Restarts after a rotation the bridge had not read yet: what a saved position may claim.

A commit saves a position for every file, also for one whose batch it did not carry. When such a
file was truncated and rewritten since it was last read (copytruncate while a sink held the
pipeline, or simply before its turn came), the position keeps the old content's offset: its print
must stay the old content's too, or the next start resumes the new content at an offset that
belongs to the old one, and skips its first lines.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from obsbox.config import build
from obsbox.exporters.bridge.sources.finder import find_files, find_rotated
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


def append_timed(ledger: Ledger, path: Path, count: int) -> None:
    """``count`` known lines that carry their own time, as the soak's do: reading them saves no clock
    anchor, so while a sink refuses nothing saves a position."""
    lines = (orjson.dumps({"Timestamp": "2026-11-30T12:00:00Z", **orjson.loads(line)}) for line in ledger.lines(count))
    with open(path, "ab") as handle:
        handle.write(b"".join(line + b"\n" for line in lines))


def copytruncate(log: Path) -> None:
    """The soak's copytruncate: the copy appears whole under the rotated name, then the truncation."""
    tmp = log.with_name(f".{log.name}.copy")
    shutil.copyfile(log, tmp)
    tmp.rename(log.with_name(log.name + ".1"))
    os.truncate(log, 0)


@pytest.mark.parametrize("pattern", ["app.log*", "app.log"], ids=["glob-matches-copy", "rotated-name-only"])
def test_a_copytruncate_generation_never_acknowledged_survives_a_kill_and_a_rotation_while_stopped(tmp_path, pattern):
    """A generation written and read while the sink refused (nothing acknowledged, so no position
    names it), the bridge killed, and the file rotated again before the restart's first scan: the
    copy holding that generation is claimed by no saved position. It was never acknowledged, so it
    is read whole; found under its rotated name only, it used to be taken for a generation an
    earlier run had drained, and skipped."""
    ledger = Ledger("ct")
    log = tmp_path / "app.log"
    include = [str(tmp_path / pattern)]
    append_timed(ledger, log, 3)  # generation 1, acknowledged
    source = tail(tmp_path, include)
    received = drain(source)
    copytruncate(log)  # the sink refuses from here: generation 2 is read, never acknowledged
    append_timed(ledger, log, 4)
    source.scan()
    refused = 0
    for _ in range(5):
        if (batch := source.poll(100, 1 << 20)) is not None:
            refused += len(batch.lines.records())  # sent, refused: never committed
    assert refused == 4, "generation 2 was read during the outage"
    source.shutdown()  # kill -9: the positions stay as the last commit saved them
    copytruncate(log)  # while stopped: generation 2's copy replaces generation 1's
    append_timed(ledger, log, 2)  # generation 3

    restarted = tail(tmp_path, include)
    received.extend(drain(restarted))
    restarted.shutdown()
    report = ledger.check(received)
    assert report.lost == [], f"{report} (generation 2 is seq 3-6)"
    assert report.duplicates == 0, report


def test_a_copy_renamed_onto_a_name_between_a_scans_glob_and_its_open_is_opened_by_that_scan(tmp_path):
    """A scan matches the globs, then opens what they named. A copytruncate in between renames a new
    copy onto ``app.log.1``: the path names another file than the glob saw. That copy is opened by
    the same scan, not left to the next one, which may come after the next rotation replaced it and
    its generation's unacknowledged lines with it (a first scan after a restart is slow on a busy
    machine, and copies made meanwhile were lost)."""
    ledger = Ledger("ct")
    log = tmp_path / "app.log"
    include = [str(tmp_path / "app.log*")]
    append_timed(ledger, log, 3)
    copytruncate(log)
    append_timed(ledger, log, 3)
    first = tail(tmp_path, include)
    received = drain(first)  # both generations so far, acknowledged
    first.shutdown()
    append_timed(ledger, log, 2)  # while stopped: never acknowledged
    restarted = tail(tmp_path, include)
    found = find_files(include, [])  # the restart's first scan matches the globs ...
    rotated = find_rotated(include, [], found)
    copytruncate(log)  # ... a rotation renames a new copy onto app.log.1 ...
    append_timed(ledger, log, 2)
    restarted.tracker.update(found, rotated)  # ... and the scan opens what the globs named
    copytruncate(log)  # the next rotation, before any other scan
    append_timed(ledger, log, 1)
    received.extend(drain(restarted))
    restarted.scan()  # the truncation found by a read; the copy that takes over is read after a scan
    received.extend(drain(restarted))
    restarted.shutdown()
    report = ledger.check(received)
    assert report.lost == [], f"{report} (the lines written while stopped are seq 6-7)"
    assert report.duplicates == 0, report
