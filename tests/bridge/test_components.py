"""The bridge's framework pieces on their own: the file reader, the tracker's states, the retry
policy, component telemetry, the pipeline's handling of a failing sink, and ``--to`` for any sink."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import orjson
import pytest

from obsbox.config import build
from obsbox.exporters.bridge import registry
from obsbox.exporters.bridge.cli import sink_from_url
from obsbox.exporters.bridge.component import ExportResult, Sink
from obsbox.exporters.bridge.config import from_data
from obsbox.exporters.bridge.record import Lines
from obsbox.exporters.bridge.retry import Attempt, RetryPolicy
from obsbox.exporters.bridge.runner import Bridge
from obsbox.exporters.bridge.sources.reader import FileReader
from obsbox.exporters.bridge.sources.tail import TailConfig, TailSource
from obsbox.exporters.bridge.sources.tracker import FileState
from obsbox.exporters.bridge.telemetry import Telemetry
from tests.bridge.harness import context

OPTIONS = {"max_line_bytes": 64, "read_chunk_bytes": 1 << 20, "fingerprint_bytes": 1024}


def reader_for(path) -> FileReader:
    fd = os.open(path, os.O_RDONLY)
    st = os.fstat(fd)
    reader = FileReader(str(path), fd, st.st_dev, st.st_ino, **OPTIONS)
    assert reader.identify()
    reader.start_at(0)
    return reader


def test_the_reader_returns_what_it_saw(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b'{"a": 1}\n' + b"x" * 100 + b"\npartial")
    reader = reader_for(log)
    out = Lines()
    seen = reader.read(out, 100, 1 << 20, verify_head=True)
    assert seen.grew and seen.truncated is None and seen.bytes_read == log.stat().st_size
    records = out.records()
    assert [r.raw for r in records] == [b'{"a": 1}', b"x" * 64] and seen.overlong == 1 and records[1].truncated
    assert reader.partial == b"partial" and reader.emitted == log.stat().st_size - len(b"partial")
    again = reader.read(out, 100, 1 << 20, verify_head=True)
    assert not again.grew and again.bytes_read == 0, "nothing new: nothing read"
    os.truncate(log, 3)
    cut = reader.read(out, 100, 1 << 20, verify_head=True)
    assert cut.truncated and "below offset" in cut.truncated and len(out) == 2, "a truncation is reported, not acted on"
    (last,) = reader.take_partial()
    assert last.raw == b"partial"
    reader.close()


def test_the_reader_sees_a_new_first_line_as_a_truncation(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b'{"gen": 1}\n')
    reader = reader_for(log)
    reader.read(Lines(), 100, 1 << 20, verify_head=True)
    log.write_bytes(b'{"gen": 2}\n{"gen": 2, "more": true}\n')  # rewritten in place, longer than before
    seen = reader.read(Lines(), 100, 1 << 20, verify_head=True)
    assert seen.truncated == "its first line changed"
    reader.close()


def test_the_tracker_moves_a_file_through_its_states(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b'{"first": "line, not complete yet"')
    config = build(TailConfig, {"include": [str(tmp_path / "app.log*")], "positions": str(tmp_path / "p.json")})
    source = TailSource(config, context(state_dir=tmp_path))
    try:
        source.scan()
        (tracked,) = source.files.values()
        assert tracked.state is FileState.PENDING
        with open(log, "ab") as fh:
            fh.write(b"}\n")
        source.scan()
        assert tracked.state is FileState.ACTIVE
        (tmp_path / "app.log.1").write_bytes(log.read_bytes())  # a copy, as copytruncate makes first
        source.scan()
        copy = next(f for f in source.files.values() if f.path.endswith(".1"))
        assert copy.state is FileState.PARKED and copy.parked_on is tracked
    finally:
        source.shutdown()


def test_retry_policy_backs_off_gives_up_after_max_elapsed_time_and_honours_abort():
    calls: list[float] = []
    policy = RetryPolicy(initial_interval=0.01, max_interval=0.02, max_elapsed_time=0.2)

    def failing() -> Attempt:
        calls.append(time.monotonic())
        return Attempt("retry", "down")

    retried: list[Attempt] = []
    outcome = policy.run(failing, threading.Event(), retried.append)
    assert outcome is not None and outcome.kind == "retry" and outcome.reason == "down"
    assert len(calls) >= 3 and len(retried) == len(calls) - 1 and calls[-1] - calls[0] <= 0.25
    aborted = threading.Event()
    aborted.set()
    assert RetryPolicy(max_elapsed_time=0).run(failing, aborted, retried.append) is None
    assert RetryPolicy().run(lambda: Attempt("reject", "400"), aborted, retried.append).kind == "reject"
    with pytest.raises(ValueError):
        RetryPolicy(randomization_factor=2)


def test_telemetry_shares_an_instrument_and_refuses_a_conflicting_one():
    telemetry = Telemetry()
    first = telemetry.counter("obsbox_test_events_total", "Events.", ["kind"])
    assert telemetry.counter("obsbox_test_events_total", "Events.", ["kind"]) is first
    with pytest.raises(ValueError, match="already a counter with labels"):
        telemetry.gauge("obsbox_test_events", "Events.", ["kind"])
    first.labels("a").inc(2)
    assert telemetry.registry.get_sample_value("obsbox_test_events_total", {"kind": "a"}) == 2


@dataclass
class FlakyConfig:
    name: str = "flaky"


class FlakySink(Sink):
    """Raises twice, then accepts: the pipeline must retry it under the policy, not skip it."""

    type = "flaky_test"
    url_option = "name"

    Config = FlakyConfig

    def __init__(self, config, context) -> None:
        super().__init__(config, context)
        self.calls = 0
        self.delivered: list = []

    def export(self, records):
        self.calls += 1
        if self.calls <= 2:
            raise RuntimeError("broken on purpose")
        self.delivered.extend(records)
        return ExportResult.SUCCESS


class DeadSink(Sink):
    type = "dead_test"

    def export(self, records):
        return ExportResult.FAILURE


def run_once(tmp_path, sink: str, retry: dict) -> Bridge:
    tmp_path.mkdir()
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(3)))
    data = {
        "sources": {"tail": {"include": [str(log)], "positions": str(tmp_path / "p.json")}},
        "sinks": {sink: {}},
        "pipelines": {"logs": {"sources": ["tail"], "processors": [], "sinks": [sink]}},
        "settings": {"state_dir": str(tmp_path), "once": True, "progress": False, "retry": retry},
    }
    bridge = Bridge(from_data(data))
    thread = threading.Thread(target=bridge.run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    return bridge


def test_a_sink_that_raises_is_retried_and_a_sink_that_keeps_failing_is_dead_lettered(tmp_path):
    registry.register("sinks", FlakySink)
    registry.register("sinks", DeadSink)
    bridge = run_once(tmp_path / "flaky", "flaky_test", {"initial_interval": 0.01, "max_interval": 0.02})
    (flaky,) = bridge.pipelines[0].sinks
    assert flaky.calls == 3 and len(flaky.delivered) == 3
    shipped = {"sink": "flaky_test", "outcome": "delivered"}
    assert bridge.metrics.registry.get_sample_value("obsbox_bridge_lines_shipped_total", shipped) == 3
    assert (
        bridge.metrics.registry.get_sample_value(
            "obsbox_bridge_retries_total", {"sink": "flaky_test", "reason": "export_failed"}
        )
        == 2
    )
    bridge = run_once(tmp_path / "dead", "dead_test", {"initial_interval": 0.01, "max_elapsed_time": 0.1})
    dead = [
        orjson.loads(line) for line in (tmp_path / "dead" / "dead-letter-dead_test.jsonl").read_bytes().splitlines()
    ]
    assert [orjson.loads(d["line"])["seq"] for d in dead] == [0, 1, 2]
    assert dead[0]["reason"].startswith("gave up retrying: the sink returned FAILURE")
    sample = bridge.metrics.registry.get_sample_value
    assert sample("obsbox_bridge_dead_letter_records_total", {"sink": "dead_test"}) == 3
    assert sample("obsbox_bridge_lines_shipped_total", {"sink": "dead_test", "outcome": "dead_lettered"}) == 3
    assert sample("obsbox_bridge_lines_shipped_total", {"sink": "dead_test", "outcome": "delivered"}) is None, (
        "a dead-lettered line is not delivered"
    )


def test_to_works_for_any_sink_that_declares_its_url_option():
    registry.register("sinks", FlakySink)
    registry.register("sinks", DeadSink)
    assert sink_from_url("flaky_test:primary") == ("flaky_test", {"name": "primary"})
    assert sink_from_url("dead_test") == ("dead_test", {})
    assert sink_from_url("otlp:http://h:4318?compression=gzip") == (
        "otlp",
        {"endpoint": "http://h:4318", "compression": "gzip"},
    )
    assert sink_from_url("file:/tmp/out?.jsonl") == ("file", {"path": "/tmp/out?.jsonl"}), "a path keeps its '?'"
