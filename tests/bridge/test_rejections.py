"""Partial rejections: a receiver that keeps part of a request and refuses the rest must never make
the bridge count the refused lines as delivered. The refused lines go to the dead-letter file with
the receiver's reason, and are counted.

The double below follows Loki 3.7's distributor as its source defines it
(``pkg/distributor/validator.go`` ``ValidateEntry``; ``pkg/validation`` ``GreaterThanMaxSampleAgeErrorMsg``):
entries older than ``now - reject_old_samples_max_age`` are dropped, the others are stored, and the
answer is ``400`` with one message per refused entry, its time and the cut-off in RFC 3339. A real
Loki does not run here (no Docker engine): the double is what is checked against.
"""

from __future__ import annotations

import gzip
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import accumulate

import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)

from obsbox.exporters.bridge.processors.parse import ParseProcessor
from obsbox.exporters.bridge.sinks.rejections import refused
from tests.bridge.harness import Running, context, records

MAX_AGE_NS = 7 * 24 * 3600 * 1_000_000_000  # Loki's default reject_old_samples_max_age: 168h


def rfc3339(ns: int) -> str:
    return datetime.fromtimestamp(ns // 1_000_000_000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class LokiDistributor:
    """Loki's push endpoint, as far as sample-age validation goes."""

    def __init__(self) -> None:
        self.stored: list[tuple[dict, str, str]] = []  # (labels, line, timestamp)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                errors = outer.push(orjson.loads(body))
                self.send_response(400 if errors else 204)
                reply = "\n".join(errors).encode()
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def push(self, payload: dict) -> list[str]:
        reject_before = time.time_ns() - MAX_AGE_NS
        errors = []
        for stream in payload["streams"]:
            labels = stream["stream"]
            label_text = "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
            for ts, line, *_ in stream["values"]:
                if int(ts) < reject_before:
                    errors.append(
                        f"entry for stream '{label_text}' has timestamp too old: {rfc3339(int(ts))}, "
                        f"oldest acceptable timestamp is: {rfc3339(reject_before)}"
                    )
                else:
                    self.stored.append((labels, line, ts))
        return errors

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture
def loki():
    double = LokiDistributor()
    yield double
    double.stop()


def iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def test_a_backfill_of_30_day_old_lines_is_dead_lettered_with_loki_s_reason_never_counted_as_delivered(tmp_path, loki):
    now = time.time_ns()
    old = [orjson.dumps({"time": iso(now - (30 * 86400 - i) * 10**9), "msg": f"old {i}"}) for i in range(5)]
    new = [orjson.dumps({"time": iso(now - i * 10**9), "msg": f"new {i}"}) for i in range(3)]
    log = tmp_path / "backfill.json"
    log.write_bytes(b"\n".join(old[:3] + new[:2] + old[3:] + new[2:]) + b"\n")
    running = Running([str(log)], tmp_path / "state", once=True, sinks={"loki": {"url": loki.url}})
    running.thread.join(30)
    assert not running.thread.is_alive()
    assert sorted(line for _, line, _ in loki.stored) == sorted(line.decode() for line in new)
    dead = [orjson.loads(x) for x in (tmp_path / "state" / "dead-letter-loki.jsonl").read_bytes().splitlines()]
    assert sorted(d["line"] for d in dead) == sorted(line.decode() for line in old), "exactly the refused lines"
    assert all(
        d["status"] == 400 and "timestamp too old" in d["reason"] and "5 of 8 refused" in d["reason"] for d in dead
    )
    registry = running.bridge.metrics.registry
    assert registry.get_sample_value("obsbox_bridge_dead_letter_records_total", {"sink": "loki"}) == 5


def test_a_refusal_that_names_no_known_rule_dead_letters_the_whole_request():
    batch = ParseProcessor(None, context()).process(records(b'{"time": "2020-01-01T00:00:00Z"}', b"plain"))
    assert refused("stream limit exceeded", batch) is None, "unknown wording: the caller keeps every record"
    cutoff = (
        "entry for stream '{a=\"b\"}' has timestamp too old: 2020-01-01T00:00:00Z, "
        "oldest acceptable timestamp is: 2021-01-01T00:00:00Z"
    )
    assert refused(cutoff, batch) == [batch[0]], "a line without a time is never judged too old"
    too_long = "Max entry size '10' bytes exceeded for stream '{a=\"b\"}' while adding an entry with length '5' bytes"
    assert refused(too_long, batch) == [batch[1]]


class PartialOtlp:
    """An OTLP/HTTP logs endpoint that keeps every request but answers with a partial success."""

    def __init__(self, rejected: int, message: str) -> None:
        reply = ExportLogsServiceResponse(
            partial_success=ExportLogsPartialSuccess(rejected_log_records=rejected, error_message=message)
        ).SerializeToString()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


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
