"""Partial rejections: a receiver that keeps part of a request and refuses the rest must never make
the bridge count the refused lines as delivered. The refused lines go to the dead-letter file with
the receiver's reason, and are counted; when the answer does not say exactly which lines it refused,
the whole request goes there, marked: a possible duplicate, never a loss.

Loki is the double of ``tests/stack/loki_double.py``: it stores, refuses and answers in the words
of Loki 3.7.6's source, which a real Loki 3.7.6 was seen to use (the texts quoted below are its).
"""

from __future__ import annotations

import random
import re
import time
from datetime import datetime, timedelta, timezone
from itertools import accumulate, permutations
from pathlib import Path

import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)

from obsbox.exporters.bridge.processors.parse import ParseProcessor
from obsbox.exporters.bridge.sinks.rejections import refused
from tests.bridge.harness import Running, context, records
from tests.stack.loki_double import Entry, Limits, LokiServer, grouped, ingester_error, serve, too_far_behind

DAY = 86400 * 10**9
LIMITS = Limits(reject_old_samples_max_age=timedelta(hours=744))  # compose/loki/loki.yaml's window


def iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def line(ns: int, msg: str, pad: int = 0) -> bytes:
    return orjson.dumps({"time": iso(ns), "msg": msg, **({"pad": "x" * pad} if pad else {})})


def dead_letters(state: Path, sink: str = "loki") -> list[dict]:
    path = state / f"dead-letter-{sink}.jsonl"
    return [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []


@pytest.fixture
def loki(request):
    double = LokiServer(LIMITS, seed=getattr(request, "param", 0))
    yield double
    double.stop()


def run_once(tmp_path: Path, lines: list[bytes], sinks: dict) -> Running:
    log = tmp_path / "app.json"
    log.write_bytes(b"".join(x + b"\n" for x in lines))
    running = Running([str(log)], tmp_path / "state", once=True, sinks=sinks)
    running.thread.join(30)
    assert not running.thread.is_alive()
    return running


def mixed(now: int) -> tuple[list[bytes], list[bytes]]:
    """(lines Loki keeps, lines it refuses): forty days old (two in one second), two hours ahead,
    over max_line_size, and on time."""
    old = [line(now - 40 * DAY + i * 10**9, f"old {i}") for i in range(3)]
    old.append(line(now - 40 * DAY + 2 * 10**9 + 5000, "old 3, the second of old 2"))
    future = [line(now + 2 * 3600 * 10**9, "two hours ahead")]
    too_long = [line(now - 10**9, "too long", pad=300 * 1024)]
    fine = [line(now - i * 10**9, f"fine {i}") for i in range(3)]
    return fine, old + future + too_long


@pytest.mark.parametrize("loki", range(6), indirect=True)  # six orders of Loki's groups
def test_a_refusal_of_several_groups_in_any_order_dead_letters_exactly_the_refused_lines(tmp_path, loki):
    """Loki 3.7.6 answered: "1 errors like: entry for stream '{service_name=\"x\"}' has timestamp
    too old: ...; 1 errors like: ... too new: ...": each group's time ended in ";" and was lost."""
    fine, bad = mixed(time.time_ns())
    running = run_once(
        tmp_path,
        [bad[0], fine[0], bad[1], bad[4], fine[1], bad[2], bad[5], bad[3], fine[2]],
        {"loki": {"url": loki.url}},
    )
    ((status, answer),) = loki.answers
    assert status == 400 and answer.count("errors like: ") == 5, answer  # old 2 and old 3: "2 errors like"
    assert sorted(loki.lines()) == sorted(x.decode() for x in fine)
    dead = dead_letters(tmp_path / "state")
    assert sorted(d["line"] for d in dead) == sorted(x.decode() for x in bad), "exactly the refused lines"
    assert all(d["status"] == 400 and "6 of 9 refused" in d["reason"] for d in dead)
    registry = running.bridge.metrics.registry
    assert registry.get_sample_value("obsbox_bridge_dead_letter_records_total", {"sink": "loki"}) == 6


def test_an_answer_with_a_group_it_does_not_know_dead_letters_the_whole_request_marked(tmp_path):
    """Structured metadata refused (a Loki with allow_structured_metadata off) beside known groups."""
    loki = LokiServer(Limits(reject_old_samples_max_age=timedelta(hours=744), allow_structured_metadata=False))
    try:
        now = time.time_ns()
        lines = [line(now - 40 * DAY, "old"), line(now, "new")]
        running = run_once(tmp_path, lines, {"loki": {"url": loki.url}})
        assert "includes structured metadata" in loki.answers[0][1] and not loki.stored
        dead = dead_letters(tmp_path / "state")
        assert [d["line"] for d in dead] == [x.decode() for x in lines]
        assert all("which of the 2 records were refused was not fully said" in d["reason"] for d in dead)
        registry = running.bridge.metrics.registry
        assert registry.get_sample_value("obsbox_bridge_errors_total", {"kind": "refusal_unattributed"}) == 1
    finally:
        loki.stop()


def test_an_ingester_list_cut_at_max_returned_stream_errors_dead_letters_the_whole_request(tmp_path):
    """More entries too far behind than Loki lists (10): which ones is not known, so all are kept."""
    loki = LokiServer(Limits(max_chunk_age=timedelta(hours=2)))
    try:
        now = time.time_ns()
        lines = [line(now, "newest")] + [line(now - 2 * 3600 * 10**9 - i * 10**9, f"behind {i}") for i in range(12)]
        run_once(tmp_path, lines, {"loki": {"url": loki.url}})
        assert "total ignored: 12 out of 13" in loki.answers[0][1]
        dead = dead_letters(tmp_path / "state")
        assert sorted(d["line"] for d in dead) == sorted(x.decode() for x in lines), "newest too: a duplicate"
    finally:
        loki.stop()


def parsed(*lines: bytes) -> list:
    return ParseProcessor(None, context()).process(records(*lines))


def test_every_subset_and_order_of_groups_names_its_records_and_nothing_else():
    now = time.time_ns() // 10**9 * 10**9
    stream = "entry for stream '{service_name=\"x\"}'"
    groups = {
        "old": f"{stream} has timestamp too old: {iso(now - 40 * DAY)[:19]}Z, oldest acceptable timestamp is: "
        f"{iso(now - 31 * DAY)[:19]}Z",
        "new": f"{stream} has timestamp too new: {iso(now + 7200 * 10**9)[:19]}Z",
        "long": f"max entry size '262144' bytes exceeded {stream[6:]} while adding an entry with length '300000' bytes",
    }
    batch = parsed(line(now - 40 * DAY + 500, "old"), line(now + 7200 * 10**9, "new"), b"x" * 300000, line(now, "fine"))
    for size in (1, 2, 3):
        for chosen in permutations(groups, size):
            message = "; ".join(f"1 errors like: {groups[g]}" for g in chosen) if size > 1 else groups[chosen[0]]
            expected = {"old": batch[0], "new": batch[1], "long": batch[2]}
            assert refused(message + "\n", batch) == [rec for rec in batch if rec in [expected[g] for g in chosen]]


def test_an_answer_that_does_not_add_up_names_nothing():
    now = time.time_ns() // 10**9 * 10**9
    batch = parsed(line(now - 40 * DAY, "old"), line(now, "fine"))
    old = f"entry for stream '{{a=\"b\"}}' has timestamp too old: {iso(now - 40 * DAY)[:19]}Z"
    assert refused(old, batch) == [batch[0]]
    assert refused(f"2 errors like: {old}", batch) is None, "two refused in that second, one sent"
    assert refused(f"1 errors like: {old}; 1 errors like: stream limit exceeded", batch) is None
    assert refused("stream limit exceeded", batch) is None
    assert refused(old, batch, expected=2) is None, "a partial success counting two"


def test_an_ingester_answer_names_its_records_only_when_it_lists_them_all_and_they_were_the_whole_request():
    now = time.time_ns()
    batch = parsed(line(now, "newest"), line(now - 3 * 3600 * 10**9, "behind"))
    rec = batch[1]
    failed = [(Entry(rec.time_ns(), "", {}), too_far_behind(rec.time_ns(), now - 3600 * 10**9))]
    stream = (("service_name", "x"),)
    assert refused(ingester_error(stream, 2, failed, 10), batch) == [rec]
    assert refused(ingester_error(stream, 2, failed, 0), batch) == [rec], "0: no limit"
    assert refused(ingester_error(stream, 2, failed * 2, 1), batch) is None, "cut at max_returned_stream_errors"
    assert refused(ingester_error(stream, 3, failed, 10), batch) is None, "the request held other entries"


def test_grouped_is_loki_s_grouping():
    """util.GroupedErrors: no prefix for one error seen once; "N errors like" otherwise."""
    assert grouped(["a"], random.Random(0)) == "a"
    assert grouped(["a", "a"], random.Random(0)) == "2 errors like: a"
    assert sorted(grouped(["a", "b", "a"], random.Random(1)).split("; ")) == ["1 errors like: b", "2 errors like: a"]


class PartialOtlp:
    """An OTLP/HTTP logs endpoint that keeps every request but answers with a partial success."""

    def __init__(self, rejected: int, message: str) -> None:
        reply = ExportLogsServiceResponse(
            partial_success=ExportLogsPartialSuccess(rejected_log_records=rejected, error_message=message)
        ).SerializeToString()

        self.server, self.url = serve(lambda _path, _body: (200, "application/x-protobuf", reply))


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("rejected by the exporter's own limits", ["a", "b"]),  # which ones is not said: both kept
        (
            "entry for stream '{service_name=\"x\"}' has timestamp too old: 2020-01-01T00:00:00Z, "
            "oldest acceptable timestamp is: 2021-01-01T00:00:00Z",
            ["a"],
        ),
    ],
)
def test_an_otlp_partial_success_puts_the_refused_lines_in_the_dead_letter_file(tmp_path, message, expected):
    rx = PartialOtlp(1, message)
    try:
        log = tmp_path / "app.json"
        log.write_bytes(b'{"time": "2020-01-01T00:00:00Z", "msg": "a"}\n{"msg": "b"}\n')
        running = Running([str(log)], tmp_path / "state", once=True, sinks={"otlp": {"endpoint": rx.url}})
        running.thread.join(30)
        dead = [orjson.loads(x) for x in (tmp_path / "state" / "dead-letter-otlp.jsonl").read_bytes().splitlines()]
        assert [orjson.loads(d["line"])["msg"] for d in dead] == expected
        assert all("partial success: 1 of 2 rejected" in d["reason"] for d in dead)
    finally:
        rx.server.shutdown()


def test_lines_read_whole_and_processed_in_workers_reach_the_dead_letter_file_as_they_were(tmp_path):
    """After a file's first read its lines travel uncut (Blocks), and come back from the workers as
    what changed, made into records only on a failure path: every refused line is there, with its
    own offset and the IDs the workers found in it."""
    rx = PartialOtlp(1, "rejected by the exporter's own limits")
    try:
        log = tmp_path / "app.json"
        lines = [orjson.dumps({"n": n, "traceparent": f"00-{n + 1:032x}-{n + 1:016x}-01"}) for n in range(300)]
        log.write_bytes(b"\n".join(lines) + b"\n")
        sinks = {"otlp": {"endpoint": rx.url}}
        running = Running([str(log)], tmp_path / "state", once=True, sinks=sinks, workers=2, read_chunk_bytes=4096)
        running.thread.join(30)
        assert running.bridge.pipelines[0].pool is not None, "processed in worker processes"
        dead = [orjson.loads(x) for x in (tmp_path / "state" / "dead-letter-otlp.jsonl").read_bytes().splitlines()]
        assert [d["line"].encode() for d in dead] == lines
        assert [d["offset"] for d in dead] == list(accumulate((len(x) + 1 for x in lines[:-1]), initial=0))
        assert [(d["trace_id"], d["span_id"]) for d in dead] == [(f"{n + 1:032x}", f"{n + 1:016x}") for n in range(300)]
    finally:
        rx.server.shutdown()


def test_a_refusal_from_otlp_is_read_from_its_status_for_the_reason_and_the_lines(tmp_path, loki):
    """Loki's /otlp answers a google.rpc.Status; its bytes once reached the dead-letter file as the
    reason ('HTTP 400: \\x12\\ufffd\\x021 errors like: ...')."""
    fine, bad = mixed(time.time_ns())
    run_once(tmp_path, fine + bad, {"otlp": {"endpoint": loki.url + "/otlp"}})
    assert sorted(loki.lines()) == sorted(x.decode() for x in fine)
    dead = dead_letters(tmp_path / "state", "otlp")
    assert sorted(d["line"] for d in dead) == sorted(x.decode() for x in bad)
    for d in dead:
        assert re.match(r"HTTP 400: \d errors like: entry for stream '\{service_name=", d["reason"]), d["reason"]
        assert d["reason"].isprintable() and "6 of 9 refused" in d["reason"]


# Loki 3.7.6's answers, verbatim, to pushes whose entries were at these times (see each test).
SEEN_GROUPED = (
    "1 errors like: entry for stream '{service_name=\"rawcheck\"}' has timestamp too old: 2026-10-22T20:41:45Z, "
    "oldest acceptable timestamp is: 2026-10-31T20:41:45Z; 1 errors like: entry for stream "
    "'{service_name=\"rawcheck\"}' has timestamp too old: 2026-10-22T20:41:46Z, oldest acceptable timestamp is: "
    "2026-10-31T20:41:45Z; 1 errors like: entry for stream '{service_name=\"rawcheck\"}' has timestamp too new: "
    "2026-12-01T22:41:45Z; 1 errors like: max entry size '262144' bytes exceeded for stream "
    "'{service_name=\"rawcheck\"}' while adding an entry with length '307205' bytes\n"
)
SEEN_SAME_SECOND = (
    "2 errors like: entry for stream '{service_name=\"rawsame\"}' has timestamp too old: 2026-10-22T20:43:06Z, "
    "oldest acceptable timestamp is: 2026-10-31T20:43:06Z; 1 errors like: entry for stream "
    "'{service_name=\"rawsame\"}' has timestamp too new: 2026-12-01T22:43:06Z; 1 errors like: entry for stream "
    "'{service_name=\"rawsame2\"}' has timestamp too old: 2026-10-22T20:43:06Z, oldest acceptable timestamp is: "
    "2026-10-31T20:43:06Z\n"
)
SEEN_BEHIND = (
    "".join(
        f"entry with timestamp 2026-12-01 18:46:{s}.648679165 +0000 UTC ignored, reason: 'entry too far behind, entry "
        f"timestamp is: 2026-12-01T18:46:{s}Z, oldest acceptable timestamp is: 2026-12-01T19:46:15Z',\n"
        for s in (15, 14, 13)
    )
    + "user 'fake', total ignored: 3 out of 4 for stream: {service_name=\"rawbehind2\"}\n"
)


def at(stamp: str, msg: str = "m") -> bytes:
    return orjson.dumps({"time": stamp, "msg": msg})


def test_loki_s_own_answers_name_exactly_the_entries_it_refused():
    batch = parsed(
        at("2026-10-22T20:41:45.1Z"),
        at("2026-12-01T20:41:45Z"),
        at("2026-10-22T20:41:46.9Z"),
        b"long " + b"x" * 307200,
        at("2026-12-01T22:41:45.5Z"),
    )
    assert refused(SEEN_GROUPED, batch) == [batch[0], batch[2], batch[3], batch[4]]
    same = parsed(*(at(f"2026-10-22T20:43:06.00000{i}Z") for i in (1, 2, 3)), at("2026-12-01T22:43:06Z"), at("now"))
    assert refused(SEEN_SAME_SECOND, same) == same[:4]


def test_loki_s_ingester_answer_names_its_entries_only_when_nothing_else_was_sent():
    newest = at("2026-12-01T20:46:15.648679165Z")
    behind = [at(f"2026-12-01T18:46:{s}.648679165Z") for s in (15, 14, 13)]
    batch = parsed(newest, *behind)
    assert refused(SEEN_BEHIND, batch) == batch[1:]
    with_old = parsed(newest, *behind, at("2026-10-22T20:46:15Z"))  # the distributor's refusal, left unsaid
    assert refused(SEEN_BEHIND, with_old) is None


def test_the_double_like_loki_answers_only_for_the_last_stream_an_ingester_took():
    """ingester/instance.go Push keeps the last stream's error: Loki 3.7.6 answered 204 to
    {A: newest, two hours behind}, {B: fine}, and kept only "A newest" and "B fine". No answer names
    that refusal, so no client can dead-letter it (a limit of Loki, not of the bridge)."""
    double = LokiServer(Limits(max_chunk_age=timedelta(hours=2)))
    try:
        now = time.time_ns()
        push = {
            "streams": [
                {
                    "stream": {"service_name": "A"},
                    "values": [[str(now), "A newest"], [str(now - 7200 * 10**9), "A behind"]],
                },
                {"stream": {"service_name": "B"}, "values": [[str(now), "B fine"]]},
            ]
        }
        assert double.push(orjson.dumps(push), otlp=False) == (204, "")
        assert double.lines() == ["A newest", "B fine"]
        push["streams"].reverse()
        status, text = double.push(orjson.dumps(push), otlp=False)
        assert status == 400 and text.endswith('total ignored: 1 out of 2 for stream: {service_name="A"}')
    finally:
        double.stop()
