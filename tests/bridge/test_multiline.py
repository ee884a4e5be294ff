"""Multiline records: a stack trace is one record with the line before it, in plain files and in
CRI / Docker entries, with the position rule, the timeout, and the per-file options."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
import yaml

from obsbox.config import ConfigError, build
from obsbox.exporters.bridge.processors.redact import RedactConfig, RedactProcessor
from obsbox.exporters.bridge.record import Lines, Record
from obsbox.exporters.bridge.sources import multiline
from obsbox.exporters.bridge.sources.reader import FileReader
from obsbox.exporters.bridge.sources.tail import TailConfig, TailSource
from tests.bridge.harness import Running, context, open_reader, traced

CORPUS = Path(__file__).parent / "corpus" / "multiline"


def reader_for(path: Path, option: object = "auto", fmt: str = "auto") -> FileReader:
    return open_reader(path, max_line_bytes=4096, format=fmt, multiline=multiline.parse(option))


def read_once(path: Path, option: object = "auto", fmt: str = "auto") -> tuple[list[Record], FileReader]:
    """Every record of the file, as a --once run ends: read, then what is held taken."""
    reader = reader_for(path, option, fmt)
    out = Lines()
    reader.read(out, 1000, 1 << 20, verify_head=False)
    records = out.records() + reader.take_partial(advance=False)
    return records, reader


def texts(records: list[Record]) -> list[str]:
    return [rec.text() for rec in records]


@pytest.mark.parametrize("name", ["python", "java", "dotnet", "go"])
def test_a_trace_is_one_record_with_the_line_before_it(tmp_path, name):
    content = (CORPUS / f"{name}.log").read_bytes()
    lines = content.decode().splitlines()
    records, reader = read_once(CORPUS / f"{name}.log")
    last = len(lines) - 1 if name != "python" else len(lines)  # python.log ends with its trace
    assert texts(records)[0] == "\n".join(lines[:last])
    assert records[0].offset == 0 and records[0].raw == lines[0].encode()  # processors see the first line
    assert len(records) == (1 if name == "python" else 2)
    assert reader.emitted == len(content)


def test_none_keeps_one_record_per_line():
    records, _ = read_once(CORPUS / "java.log", "none")
    assert len(records) == len((CORPUS / "java.log").read_bytes().splitlines())


def test_a_list_of_rules_groups_only_those():
    lines = (CORPUS / "go.log").read_bytes().count(b"\n")
    records, _ = read_once(CORPUS / "go.log", ["python"])
    assert len(records) == lines
    records, _ = read_once(CORPUS / "go.log", ["go"])
    assert len(records) == 2


def test_a_custom_rule_in_vectors_shape(tmp_path):
    """Vector's own test of ``halt_before`` (src/line_agg.rs, mode_halt_before_1)."""
    log = tmp_path / "app.log"
    log.write_bytes(b"INFO some usual line\nINFO first part\nsecond part\nlast part\nERROR another normal message\n")
    rule = {"start_pattern": "", "condition_pattern": "^(INFO|ERROR) ", "mode": "halt_before"}
    records, _ = read_once(log, rule)
    assert texts(records) == [
        "INFO some usual line",
        "INFO first part\nsecond part\nlast part",
        "ERROR another normal message",
    ]


def test_the_ids_of_a_json_line_do_not_change_when_a_trace_follows(tmp_path):
    """The record's identity is its first line's offset, and processors read its first line."""
    alone = tmp_path / "alone.log"
    alone.write_bytes(b'{"level":"error","msg":"request failed"}\n')
    records, _ = read_once(CORPUS / "python.log")
    single, _ = read_once(alone)
    assert records[0].offset == single[0].offset == 0
    assert records[0].raw.startswith(b"{") and records[0].rest.startswith(b"\nTraceback")
    assert traced(records[0].raw)[0].trace_id == traced(single[0].raw)[0].trace_id


def test_cri_frames_join_per_stream_and_stdout_never_mixes_in(tmp_path):
    stamp = "2026-12-01T09:00:00.123456789Z"
    lines = [
        f"{stamp} stderr F java.lang.IllegalStateException: boom",
        f'{stamp} stdout F {{"msg":"other"}}',
        f"{stamp} stderr F \tat com.example.App.main(App.java:10)",
        f"{stamp} stderr P \tat com.example.App.",
        f"{stamp} stderr F run(App.java:3)",
        f'{stamp} stdout F {{"msg":"last"}}',
    ]
    log = tmp_path / "0.log"
    log.write_bytes("\n".join(lines).encode() + b"\n")
    records, reader = read_once(log)
    assert [(rec.attributes or {}).get("log.iostream") for rec in records] == ["stderr", "stdout", "stdout"]
    assert texts(records)[0] == (
        "java.lang.IllegalStateException: boom\n"
        "\tat com.example.App.main(App.java:10)\n"
        "\tat com.example.App.run(App.java:3)"
    )
    assert reader.emitted == len(log.read_bytes())


def test_docker_entries_group_as_cri_ones(tmp_path):
    entries = [
        {"log": '{"msg":"failed"}\n', "stream": "stdout", "time": "2026-12-01T09:00:00Z"},
        {"log": "Traceback (most recent call last):\n", "stream": "stdout", "time": "2026-12-01T09:00:00Z"},
        {"log": '  File "app.py", line 1, in <module>\n', "stream": "stdout", "time": "2026-12-01T09:00:00Z"},
        {"log": "ZeroDivisionError: division by zero\n", "stream": "stdout", "time": "2026-12-01T09:00:00Z"},
    ]
    log = tmp_path / "c-json.log"
    log.write_bytes(b"".join(orjson.dumps(entry) + b"\n" for entry in entries))
    records, _ = read_once(log)
    assert len(records) == 1 and records[0].rest.endswith(b"ZeroDivisionError: division by zero")


def test_an_open_record_holds_the_position_at_its_first_line(tmp_path):
    """Read with the trace cut short: nothing of it goes out and ``emitted`` stays before it, so a
    restart (kill -9) reads it whole again; nothing lost, nothing doubled."""
    content = (CORPUS / "java.log").read_bytes()
    cut = content.index(b"Caused by")
    log = tmp_path / "app.log"
    log.write_bytes(content[:cut])
    reader = reader_for(log)
    out = Lines()
    reader.read(out, 1000, 1 << 20, verify_head=False)
    assert len(out) == 0 and reader.emitted == 0  # the record is open: its first line is the position
    with log.open("ab") as fh:
        fh.write(content[cut:])
    reader.read(out, 1000, 1 << 20, verify_head=False)
    first = out.records()
    assert len(first) == 1 and first[0].rest.endswith(b"... 1 more")
    restarted = reader_for(log)  # a new run from the saved position (emitted) reads the same records
    restarted.start_at(0)
    again = Lines()
    restarted.read(again, 1000, 1 << 20, verify_head=False)
    assert [(r.offset, r.raw, r.rest) for r in again.records()] == [(r.offset, r.raw, r.rest) for r in first]


def test_the_timeout_releases_the_last_record_and_metrics_count_grouped_lines(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes((CORPUS / "go.log").read_bytes())
    config = build(
        TailConfig, {"include": [str(log)], "positions": str(tmp_path / "pos.json"), "multiline": {"timeout": "50ms"}}
    )
    source = TailSource(config, context(state_dir=tmp_path))
    try:
        first = source.poll(100, 1 << 20)
        assert len(first.lines) == 1  # the JSON line and its panic; the last line is held
        time.sleep(0.1)
        second = source.poll(100, 1 << 20)
        last = (CORPUS / "go.log").read_bytes().splitlines()[-1]
        assert [rec.raw for rec in second.lines.records()] == [last]
        grouped = source.metrics.registry.get_sample_value("obsbox_bridge_multiline_lines_total")
        assert grouped == (CORPUS / "go.log").read_bytes().count(b"\n") - 2  # all but the two JSON lines
    finally:
        source.shutdown()


def test_once_ships_every_record_and_redacts_the_trace(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes((CORPUS / "python.log").read_bytes())
    out = tmp_path / "out.jsonl"
    running = Running(
        [str(log)],
        tmp_path / "state",
        once=True,
        processors=["parse", "trace", "redact"],
        sinks={"file": {"path": str(out)}},
    )
    running.thread.join(30)
    written = out.read_bytes()
    assert b"sk_live_51H8secretsecretsecret" not in written and b"[REDACTED]" in written
    first, *rest = written.decode().splitlines()
    assert orjson.loads(first)["msg"] == "request failed" and "trace_id" in orjson.loads(first)
    assert rest[0] == "Traceback (most recent call last):" and len(rest) == 9


def test_redaction_covers_the_continuation_lines():
    rec = Record(b'{"msg":"failed"}', read_once(CORPUS / "python.log")[0][0].origin, 0)
    rec.rest = b"\nValueError: password=hunter2hunter2"
    RedactProcessor(RedactConfig(), context()).process([rec])
    assert b"hunter2" not in rec.rest


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("sometimes", "multiline must be auto, none"),
        (["java", "cobol"], "unknown rules ['cobol']"),
        ({"start_pattern": "(", "condition_pattern": "x"}, "multiline.start_pattern is not a regular expression"),
        ({"start_pattern": "x", "condition_pattern": "y", "mode": "sideways"}, "multiline.mode must be one of"),
        ({"timeout": 0}, "multiline.timeout must be"),
        ({"colour": 1}, "unknown key 'colour'"),
    ],
)
def test_config_errors_name_the_key(tmp_path, option, message):
    with pytest.raises(ConfigError, match="multiline") as caught:
        build(TailConfig, {"include": [str(tmp_path / "*.log")], "multiline": option})
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1}\n{"b":2}\n',
        b'{"a":1}\n\tat x.y(Z.java:1)\n{"b":2}\n',
        b'{"a":1}\nTraceback (most recent call last):\n',
        b'{"a":1}\n\n{"b":2}\n',  # an empty line is not a JSON line either
        b'{"a":1}\n{"b":2}\nplain',  # the last line, without its newline, is not looked at
    ],
)
def test_the_scan_for_lines_that_are_not_json_agrees_with_and_without_hyperscan(monkeypatch, data):
    """A read of JSON lines is one Block only when no line of it could take part in a trace; the
    hyperscan scan (x86_64) and the ``re`` one elsewhere must give the same answer."""
    end = data.rfind(b"\n") + 1
    fast = multiline.CandidateScan()
    monkeypatch.setattr(multiline, "hyperscan", None)
    slow = multiline.CandidateScan()
    assert slow.scratch is None
    expected = any(not line.startswith(b"{") for line in data[:end].split(b"\n")[1:-1])
    assert fast.found(data, end - 1) is slow.found(data, end - 1) is expected


def test_a_files_first_read_of_json_lines_is_one_block(tmp_path):
    """Only a byte order mark makes the first read of a file go line by line (through the rules)."""
    log = tmp_path / "app.json"
    log.write_bytes(b'{"a":1}\n{"b":2}\n{"c":3}\n')
    reader = reader_for(log)
    out = Lines()
    reader.read(out, 100, 1 << 20, verify_head=False)
    reader.close()
    assert out.blocks == 1 and len(out.items) == 1, "cut line by line"
    assert [rec.raw for rec in out.records()] == [b'{"a":1}', b'{"b":2}']  # the last one is held


DETECT_EXCEPTIONS = yaml.safe_load((CORPUS / "detect_exceptions.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(DETECT_EXCEPTIONS))
def test_traces_of_many_runtimes_stay_whole(tmp_path, name):
    """Java, Node, browser JS, Python, PHP, Go, C# (Mono), Ruby (Rails) and Dart traces from another
    project's test suite: no line of a trace becomes a record of its own, and the lines around it
    stay theirs."""
    entry = DETECT_EXCEPTIONS[name]
    trace = entry["trace"].rstrip("\n")
    log = tmp_path / "app.log"
    log.write_text(f'{{"level":"error","msg":"request failed"}}\n{trace}\n{{"level":"info","msg":"next"}}\n')
    records, _ = read_once(log)
    assert [rec.text().count("\n") + 1 for rec in records] == entry["records"], entry.get("why", "")
    assert records[-1].text() == '{"level":"info","msg":"next"}'
