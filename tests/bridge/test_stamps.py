"""Read times of lines without a time of their own: the clock anchors kept with a file's position.

A line at byte X reads ``T + (X - A)`` ns from the newest anchor (A, T) with A <= X. Anchors are
saved before a line is stamped with them, so a source started again from the saved positions (as
after ``kill -9``) gives every line it reads again the time it had the first time.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from obsbox.config import build
from obsbox.exporters.bridge.record import Origin, Record
from obsbox.exporters.bridge.sources import reader
from obsbox.exporters.bridge.sources.positions import PositionsError, PositionsFile
from obsbox.exporters.bridge.sources.tail import TailConfig, TailSource
from tests.bridge.harness import Running, context
from tests.faults.ledger import Ledger
from tests.stack.loki_double import LokiServer

SECOND = 10**9


def tail(tmp_path: Path, log: Path) -> TailSource:
    """A tail source that hands out every whole line at once: these tests are about read times, not about
    holding the last line for a stack trace that may follow it."""
    config = build(
        TailConfig,
        {"include": [str(log)], "positions": str(tmp_path / "pos.json"), "hold_files": False, "multiline": "none"},
    )
    return TailSource(config, context(state_dir=tmp_path))


def crash(source: TailSource) -> None:
    """What ``kill -9`` leaves: the positions last saved, nothing said at shutdown."""
    source.closing.set()
    source.tracker.close_all()


def stamps(batch) -> dict[int, int]:
    return {rec.offset: rec.read_ns() for rec in batch.lines.records()}


def saved_clock(tmp_path: Path) -> list[list[int]]:
    (entry,) = orjson.loads((tmp_path / "pos.json").read_bytes())["files"]
    return entry["clock"]


def test_the_newest_anchor_at_or_before_a_line_gives_its_time_one_nanosecond_a_byte():
    origin = Origin("app.log", b"k", clock=((0, 1_000), (500, 9_000)))
    assert [origin.read_ns(x) for x in (0, 120, 499, 500, 730)] == [1_000, 1_120, 1_499, 9_000, 9_230]
    assert Origin("app.log", b"k", clock=((200, 5_000),)).read_ns(150) == 4_950, "before the oldest: from it"
    assert Record(b"x", Origin("app.log", b"k"), 10).read_ns() is None, "no clock: the sinks use the send time"


def test_lines_in_flight_and_lines_read_after_a_save_get_the_same_times_after_a_crash(tmp_path):
    ledger, log = Ledger("stamps"), tmp_path / "app.json"  # the ledger's lines carry no time
    ledger.append(log, 10)
    source = tail(tmp_path, log)
    first = source.poll(1000, 1 << 20)
    assert saved_clock(tmp_path) == [[0, first.lines.records()[0].read_ns()]], "saved before it was handed out"
    ledger.append(log, 10)
    second = source.poll(1000, 1 << 20)  # in flight across the next save
    source.commit(first.checkpoint)  # saves: the second batch's anchor, and one where reading goes on
    ledger.append(log, 10)
    third = source.poll(1000, 1 << 20)
    shipped = stamps(second) | stamps(third)
    assert len(saved_clock(tmp_path)) == 2
    crash(source)

    again = tail(tmp_path, log)
    replayed = again.poll(1000, 1 << 20)
    assert stamps(replayed) == shipped
    times = [shipped[x] for x in sorted(shipped)]
    assert times == sorted(set(times)), "in order, each line a time of its own"
    again.shutdown()


def test_an_idle_file_that_grows_gets_a_fresh_anchor_saved_before_its_lines_go_out(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "CLOCK_STALE", 0.2)
    ledger, log = Ledger("idle"), tmp_path / "app.json"
    ledger.append(log, 3)
    source = tail(tmp_path, log)
    batch = source.poll(1000, 1 << 20)
    source.commit(batch.checkpoint)  # everything acknowledged: idle
    time.sleep(0.5)
    ledger.append(log, 1)
    written = time.time_ns()
    late = source.poll(1000, 1 << 20)
    (rec,) = late.lines.records()
    assert written <= rec.read_ns() < written + SECOND // 2, "the time it was read, not that of the last save"
    assert saved_clock(tmp_path) == [[rec.offset, rec.read_ns()]], "saved before the line was handed out"
    crash(source)
    again = tail(tmp_path, log)
    assert stamps(again.poll(1000, 1 << 20)) == stamps(late)
    again.shutdown()


def test_lines_of_a_new_file_shipped_and_never_acknowledged_keep_their_times_long_after(tmp_path, monkeypatch):
    """The anchor saved ahead of a new file's first lines sits at the saved position, as a quiet
    file's does; a restart long after must still read it as the time those lines were shipped with
    (a real Loki 3.7.6 kept both copies of every line when a restart took a fresh anchor here)."""
    monkeypatch.setattr(reader, "CLOCK_STALE", 0.2)
    ledger, log = Ledger("new"), tmp_path / "app.json"
    ledger.append(log, 5)
    source = tail(tmp_path, log)
    shipped = stamps(source.poll(1000, 1 << 20))  # handed out, never acknowledged
    crash(source)
    time.sleep(0.5)
    again = tail(tmp_path, log)
    assert stamps(again.poll(1000, 1 << 20)) == shipped
    again.shutdown()


def test_lines_with_their_own_time_cost_no_save_ahead(tmp_path):
    log = tmp_path / "app.json"
    log.write_bytes(b'{"time": "2026-11-30T12:00:00Z", "msg": "a"}\n')
    source = tail(tmp_path, log)
    assert source.poll(1000, 1 << 20) is not None
    assert not (tmp_path / "pos.json").exists()
    source.shutdown()


def test_positions_of_the_format_before_clocks_load_and_start_a_clock(tmp_path):
    ledger, log = Ledger("old"), tmp_path / "app.json"
    ledger.append(log, 4)
    source = tail(tmp_path, log)
    source.commit(source.poll(2, 1 << 20).checkpoint)
    crash(source)
    entry = orjson.loads((tmp_path / "pos.json").read_bytes())["files"][0]
    del entry["clock"]
    (tmp_path / "pos.json").write_bytes(orjson.dumps({"version": 1, "files": [entry]}))
    (position,) = PositionsFile(tmp_path / "pos.json").load()
    assert position.clock == ()

    before = time.time_ns()
    again = tail(tmp_path, log)
    batch = again.poll(1000, 1 << 20)
    assert [orjson.loads(r.raw)["seq"] for r in batch.lines.records()] == [2, 3], "resumed where it was"
    assert all(before <= t < before + SECOND for t in stamps(batch).values())
    assert saved_clock(tmp_path) == [[entry["offset"], batch.lines.records()[0].read_ns()]]
    again.shutdown()


@pytest.mark.parametrize("clock", [[[1, 2, 3]], [[-1, 5]], [["0", 5]], "0:5", [[0, True]]])
def test_a_clock_edited_into_another_shape_is_one_line_naming_the_entry(tmp_path, clock):
    path = tmp_path / "pos.json"
    entry = {"path": "/x.log", "dev": 1, "ino": 2, "fingerprint": "ab", "offset": 3, "clock": clock}
    path.write_bytes(orjson.dumps({"version": 1, "files": [entry]}))
    with pytest.raises(PositionsError, match=r"files\[0\] \(/x.log\).*clock"):
        PositionsFile(path).load()


def test_a_clean_stop_keeps_the_anchors_of_lines_still_in_flight(tmp_path):
    ledger, log = Ledger("flight"), tmp_path / "app.json"
    ledger.append(log, 3)
    source = tail(tmp_path, log)
    shipped = stamps(source.poll(1000, 1 << 20))  # never acknowledged
    source.shutdown()
    again = tail(tmp_path, log)
    assert stamps(again.poll(1000, 1 << 20)) == shipped
    again.shutdown()


def test_both_ways_into_loki_give_a_line_the_same_timestamp_whichever_worker_encoded_it(tmp_path):
    """The Loki push API gets the read time as the entry's timestamp; OTLP gets it as the observed
    time with time_unix_nano 0, which Loki's OTLP ingestion takes instead (pkg/loghttp/push/otlp.go)."""
    ledger, log = Ledger("paths"), tmp_path / "app.json"
    ledger.append(log, 3000)
    pushed, otlp = LokiServer(), LokiServer()
    sinks = {"loki": {"url": pushed.url}, "otlp": {"endpoint": otlp.url + "/otlp"}}
    try:
        running = Running([str(log)], tmp_path / "state", once=True, sinks=sinks, workers=2)
        running.thread.join(60)
        assert not running.thread.is_alive()
        by_push = {e.line: e.timestamp_ns for _, e in pushed.stored}
        by_otlp = {e.line: e.timestamp_ns for _, e in otlp.stored}
    finally:
        pushed.stop()
        otlp.stop()
    assert len(by_push) == 3000 and by_push == by_otlp
    assert not any("observed_timestamp" in e.structured_metadata for _, e in otlp.stored)
