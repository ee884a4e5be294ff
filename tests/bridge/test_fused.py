"""The worker's fused path gives what the processors and encoders give one after the other: the
same OTLP bytes (each request decoded with opentelemetry-proto as well), the same file bytes, the
same changes sent back to the bridge and the same counters, over the corpus of real producers'
lines and random lines built to hit every branch (IDs valid and not, times, levels, services,
secrets, text, broken UTF-8, truncated lines, attributes, multiline records, several files)."""

from __future__ import annotations

import random
import string
import time
from pathlib import Path

import orjson
import pytest
import yaml
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from obsbox.exporters.bridge import config as bridge_config
from obsbox.exporters.bridge import workers
from obsbox.exporters.bridge.component import Context
from obsbox.exporters.bridge.fused import FusedPath
from obsbox.exporters.bridge.record import Block, Lines, Origin, Record
from obsbox.exporters.bridge.tally import Tally

CORPUS = Path(__file__).parent / "corpus"
EXPANDING = {"resourceLogs", "logEvents"}  # lines that become several records: the other test
FILES = (
    Origin("/var/log/app.json", b"\x01" * 16, clock=((0, 1_764_500_000_000_000_000),)),
    Origin("/var/log/pods/ns_web_1/web/0.log", b"\x02" * 16, resource=(("service.name", "web"),)),
    Origin("/var/log/other.json", b"\x03" * 16),
)
PIPELINES = {
    "standard": (["parse", "trace", "redact"], {}),
    "redact first, no injection, correlation": (
        ["parse", "redact", "trace"],
        {"trace": {"inject": False, "correlation_keys": ["request_id", "ctx.session"]}},
    ),
    "no redaction, a configured service": (["parse", "trace"], {"otlp": {"service_name": "configured"}}),
}


def corpus_lines() -> list[bytes]:
    entries = yaml.safe_load((CORPUS / "lines.yaml").read_text(encoding="utf-8"))["entries"]
    secrets = yaml.safe_load((CORPUS / "secrets.yaml").read_text(encoding="utf-8"))
    out = [entry["line"].encode() for entry in entries if not EXPANDING.intersection(entry["line"].split('"'))]
    out += [entry["line"].encode() for entry in secrets["lines"]]
    out += [line.encode() for line in secrets.get("clean", []) if isinstance(line, str)]
    return [line.replace(b"\n", b" ") for line in out]


def random_line(rng: random.Random) -> bytes:
    kind = rng.randrange(20)
    if kind == 0:
        return rng.choice([b"plain text", b"", b"  ", b"[1, 2]", b'{"msg": "caf\xc3', b"level=info msg=hi"])
    if kind == 1:
        return b'{"v": NaN, "Timestamp": "2026-11-30T12:00:00Z"}'
    hexes = "0123456789abcdef"
    guid = "-".join("".join(rng.choice(hexes) for _ in range(n)) for n in (8, 4, 4, 4, 12))
    obj: dict = {}
    if rng.random() < 0.8:
        obj["Timestamp"] = rng.choice(
            [
                f"2026-11-30T12:00:{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z",
                "2026-11-30T12:00:00Z",
                "1970-01-01T00:00:00Z",
                "2026-11-30 12:00:00+02:00",
                "not a time",
                1764500000123,
                None,
            ]
        )
    obj["Level"] = rng.choice(["Information", "Error", "warn", "", None, 30, "Weird"])
    ids = rng.randrange(8)
    if ids == 0:
        obj["ActivityId"] = guid
        if rng.random() < 0.7:
            obj["ParentId"] = rng.choice(
                ["".join(rng.choice(hexes) for _ in range(16)), "0" * 16, "zz" * 8, "short", 7, guid]
            )
    elif ids == 1:
        obj["ActivityId"] = rng.choice([guid.upper(), "{" + guid + "}", "0" * 8 + "-0000-0000-0000-" + "0" * 12, 12])
    elif ids == 2:
        obj["traceparent"] = rng.choice([f"00-{'a' * 32}-{'b' * 16}-01", "00-bad", f"00-{'0' * 32}-{'b' * 16}-01"])
    elif ids == 3:
        obj["trace_id"], obj["span_id"] = rng.choice([("ab" * 16, "cd" * 8), ("xyz", "cd" * 8), ("ab" * 8, None)])
    elif ids == 4:
        obj["message"] = orjson.dumps({"traceId": "ef" * 16, "spanId": "12" * 8}).decode()
    elif ids == 5:
        obj["ctx"] = {"session": rng.choice(["s1", "s2"]), "trace": {"id": "cd" * 16}}
        obj["request_id"] = rng.choice(["r1", "", None])
    elif ids == 6:
        obj["x-request-id"] = "req-" + str(rng.randrange(5))
    for _ in range(rng.randrange(4)):
        obj["".join(rng.choice(string.ascii_letters) for _ in range(rng.randrange(1, 8)))] = rng.choice(
            [1, 2.5, "text", {"nested": [1, {"a": 1}]}, [1, 2], True]
        )
    if rng.random() < 0.3:
        obj[rng.choice(["service", "service.name", "app"])] = rng.choice(["svc", "", 5])
    if rng.random() < 0.1:
        obj["password"] = "hunter2"
    if rng.random() < 0.05:
        obj["note"] = "tokens: 10, key rotation"  # keywords with nothing to redact
    if rng.random() < 0.05:
        obj["trace_id"] = "other"  # the line's own field of the configured name
    return orjson.dumps(obj)


def batch(lines: list[bytes], rng: random.Random) -> workers.Packed:
    """``lines`` spread over the files, as Blocks and as Records (some truncated, with attributes,
    or with the rest of a multiline record)."""
    out, offsets = Lines(), dict.fromkeys(FILES, 0)
    for start in range(0, len(lines), 40):
        origin, part = rng.choice(FILES), lines[start : start + 40]
        if rng.random() < 0.5:
            data = b"".join(line + b"\n" for line in part)
            out.append(Block(origin, data, offsets[origin], len(part)))
            offsets[origin] += len(data)
            continue
        for line in part:
            rec = Record(line, origin, offsets[origin])
            offsets[origin] += len(line) + 1
            extra = rng.randrange(12)
            if extra == 0:
                rec.truncated = True
            elif extra == 1:
                rec.attributes = {"obsbox.runtime_time": "2026-11-30T12:00:00Z", "stream": "stdout"}
            elif extra == 2:
                rec.rest = b"\n  at Main() password=hunter2"
            out.append(rec)
    return workers.pack(out)


def worker_of(tmp_path: Path, pipeline: str, fused: bool) -> workers.Worker:
    """A worker's processors and encoders for the pipeline, with counts of its own."""
    processors, options = PIPELINES[pipeline]
    sinks = {
        "otlp": {"endpoint": "http://127.0.0.1:4318", "max_request_bytes": 20_000, **options.get("otlp", {})},
        "file": {"path": str(tmp_path / "out.jsonl")},
    }
    data = {
        "sources": {"tail": {"include": [str(tmp_path / "none.log")]}},
        "processors": {name: options.get(name, {}) for name in processors},
        "sinks": sinks,
        "pipelines": {"logs": {"sources": ["tail"], "processors": processors, "sinks": list(sinks)}},
    }
    config = bridge_config.from_data(data)
    metrics = Tally()  # as in a worker process

    def context(spec):
        return Context(name=spec.key, metrics=metrics, state_dir=tmp_path)

    made = [config.components["processors"][name] for name in processors]
    procs = [spec.cls(spec.config, context(spec)) for spec in made]
    encoders = [
        workers.encoder_of(spec.cls, spec.config, context(spec))
        for spec in (config.components["sinks"][key] for key in sinks)
    ]
    path = FusedPath.of(procs, encoders) if fused else None
    assert fused == (path is not None)
    return workers.Worker(procs, encoders, metrics, whole=False, fused=path)


def outcome(worker: workers.Worker, packed: workers.Packed) -> tuple:
    result = workers.run(worker, packed)
    otlp, lines = result.payloads
    return result.changes, result.records, otlp, lines, sorted(map(repr, result.counters))


@pytest.fixture(autouse=True)
def _one_clock(monkeypatch):
    """Both paths stamp the same observed time."""
    monkeypatch.setattr(time, "time_ns", lambda: 1_764_600_000_000_000_000)


@pytest.mark.parametrize("pipeline", list(PIPELINES))
def test_fused_path_gives_the_stage_paths_bytes_changes_and_counters(tmp_path, pipeline):
    rng = random.Random(pipeline)
    lines = corpus_lines() + [random_line(rng) for _ in range(400)]
    rng.shuffle(lines)
    stage, fused = worker_of(tmp_path, pipeline, False), worker_of(tmp_path, pipeline, True)
    for _ in range(2 if pipeline == "standard" else 1):  # the second time, every key shape is planned
        packed = batch(lines, rng)
        want, got = outcome(stage, packed), outcome(fused, packed)
        assert got[1] is None and want[1] is None  # no line expanded: changes, not whole records
        assert got[0] == want[0]
        assert got[2] == want[2]
        assert got[3] == want[3]
        assert got[4] == want[4]
    requests = [ExportLogsServiceRequest.FromString(body) for body, *_ in got[2]]
    records = [
        rec for request in requests for rl in request.resource_logs for sl in rl.scope_logs for rec in sl.log_records
    ]
    assert len(got[2]) > 3 and len(records) == len(lines)
    assert {rec.trace_id for rec in records} >= {bytes.fromhex("ab" * 16), bytes.fromhex("ef" * 16)}
    assert got[3].count(b"\n") == len(lines) + got[3].count(b"\n  at Main()")  # a multiline record's rest
    if "redact" in PIPELINES[pipeline][0]:
        assert b"hunter2" not in got[3] + b"".join(body for body, *_ in got[2])


def test_a_batch_with_a_line_to_expand_takes_the_stage_path_and_counts_once(tmp_path):
    rng = random.Random(7)
    otlp_json = orjson.dumps(
        {
            "resourceLogs": [
                {"scopeLogs": [{"logRecords": [{"body": {"stringValue": "a"}}, {"body": {"stringValue": "b"}}]}]}
            ]
        }
    )
    lines = [random_line(rng) for _ in range(300)] + [otlp_json] + [random_line(rng) for _ in range(300)]
    stage, fused = worker_of(tmp_path, "standard", False), worker_of(tmp_path, "standard", True)
    packed = batch(lines, rng)
    want, got = outcome(stage, packed), outcome(fused, packed)
    assert got[0] is None and got[1] == want[1] and len(got[1]) == len(lines) + 1
    assert got[2:] == want[2:]
