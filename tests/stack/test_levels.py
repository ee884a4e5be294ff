"""Levels as real loggers write them, through both of the bridge's ways into Loki: its ``otlp`` sink
(as compose configures it) into Loki's /otlp, and its ``loki`` push sink into /loki/api/v1/push.

Loki 3.7.6 reads ``severity_text`` (a structured-metadata entry on its level list) before
``severity_number`` and keeps a word it does not know as written (pkg/distributor/field_detection.go
extractLogLevel, normalizeLogLevel): pino's ``50`` became ``detected_level="50"`` on a real Loki,
which the "Error logs" panel's ``detected_level=~"error|critical|fatal"`` misses. The bridge sends
``detected_level`` itself, which Loki keeps (normalised); the Loki double does the same, so these
tests fail if the bridge stops sending it.
"""

from __future__ import annotations

import gzip
import re
import time
from datetime import UTC, datetime

import orjson
import pytest

from obsbox.dashboards import queries as q
from obsbox.exporters.bridge.sinks.loki import LokiConfig, LokiSink
from obsbox.logfields import severity
from tests.bridge.harness import context, traced
from tests.stack.loki_double import Entry, LokiOTLP
from tests.stack.test_links import bridge_request, compose_limits

NOW = datetime.now(UTC)
ISO = NOW.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
MS = int(NOW.timestamp() * 1000)

# (a line as the logger writes it, the detected_level Loki must end up with)
LINES = [
    # pino (default JSON output) and bunyan: numeric levels
    ({"level": 10, "time": MS, "pid": 7, "hostname": "api-1", "msg": "pino trace"}, "trace"),
    ({"level": 30, "time": MS, "pid": 7, "hostname": "api-1", "msg": "pino info"}, "info"),
    ({"level": 50, "time": MS, "pid": 7, "hostname": "api-1", "msg": "pino error"}, "error"),
    ({"level": 60, "time": MS, "pid": 7, "hostname": "api-1", "msg": "pino fatal"}, "fatal"),
    ({"name": "app", "hostname": "h", "pid": 1, "level": 40, "msg": "bunyan warn", "time": ISO, "v": 0}, "warn"),
    # Serilog compact JSON (CLEF): @l is left out for Information
    ({"@t": ISO, "@mt": "Serilog {Kind}", "Kind": "information"}, "info"),
    ({"@t": ISO, "@mt": "Serilog {Kind}", "@l": "Verbose", "Kind": "verbose"}, "trace"),
    ({"@t": ISO, "@mt": "Serilog {Kind}", "@l": "Warning", "Kind": "warning"}, "warn"),
    ({"@t": ISO, "@mt": "Serilog {Kind}", "@l": "Error", "Kind": "error"}, "error"),
    ({"@t": ISO, "@mt": "Serilog {Kind}", "@l": "Fatal", "Kind": "fatal"}, "fatal"),
    # .NET's JSON console formatter (ILogger levels)
    (
        {"Timestamp": ISO, "EventId": 0, "LogLevel": "Critical", "Category": "Db", "Message": ".NET critical"},
        "critical",
    ),
    ({"Timestamp": ISO, "EventId": 0, "LogLevel": "Information", "Category": "Db", "Message": ".NET info"}, "info"),
    # syslog severities in a JSON line (rsyslog's json template, journald exporters)
    ({"timestamp": ISO, "host": "web-1", "severity": "emerg", "message": "syslog emerg"}, "fatal"),
    ({"timestamp": ISO, "host": "web-1", "severity": "alert", "message": "syslog alert"}, "critical"),
    ({"timestamp": ISO, "host": "web-1", "severity": "crit", "message": "syslog crit"}, "critical"),
    ({"timestamp": ISO, "host": "web-1", "severity": "err", "message": "syslog err"}, "error"),
    ({"timestamp": ISO, "host": "web-1", "severity": "notice", "message": "syslog notice"}, "info"),
    ({"timestamp": ISO, "host": "web-1", "severity": "warning", "message": "syslog warning"}, "warn"),
    # Python's logging (levelname), log4j's ECS layout, zap, Go slog between levels
    ({"timestamp": ISO, "levelname": "CRITICAL", "message": "python critical"}, "critical"),
    ({"@timestamp": ISO, "log.level": "FATAL", "message": "log4j fatal"}, "fatal"),
    ({"level": "dpanic", "ts": MS / 1000, "caller": "main.go:12", "msg": "zap dpanic"}, "error"),
    ({"time": ISO, "level": "ERROR+4", "msg": "slog above error"}, "fatal"),
    ({"time": ISO, "level": "DEBUG-4", "msg": "slog below debug"}, "trace"),
    # a word no logger here writes: Loki's own "unknown", the word kept in severity_text
    ({"time": ISO, "level": "bogus", "msg": "unknown word"}, "unknown"),
]
RAW = [orjson.dumps(fields) for fields, _ in LINES]


def otlp_entries() -> dict[str, Entry]:
    """Each line as Loki stores it after the compose bridge's otlp sink sent it (by the line)."""
    result = LokiOTLP(compose_limits()).push(bridge_request(*RAW), time.time_ns())
    assert not result.rejected, result.rejected
    return {e.line: e for entries in result.accepted.values() for e in entries}


def push_entries() -> dict[str, Entry]:
    """Each line as Loki stores it after the loki sink pushed it."""
    sink = LokiSink(LokiConfig(url="http://loki:3100", compression="none"), context())
    ((body, headers, _),) = list(sink.requests(traced(*RAW)))
    assert "Content-Encoding" not in headers
    result = LokiOTLP(compose_limits()).push_json(orjson.loads(body), time.time_ns())
    assert not result.rejected, result.rejected
    return {e.line: e for entries in result.accepted.values() for e in entries}


PATHS = {"otlp": otlp_entries, "push": push_entries}


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_every_logger_s_level_lands_as_loki_s_word_and_as_written(path):
    stored = path()
    for raw, (fields, expected) in zip(RAW, LINES, strict=True):
        entry = stored[raw.decode()]
        assert entry.structured_metadata["detected_level"] == expected, fields
        written = next(
            (fields[k] for k in ("level", "@l", "LogLevel", "severity", "levelname", "log.level") if k in fields), None
        )
        if written is not None:  # the raw level stays, as written
            assert entry.structured_metadata["severity_text"] == str(written), fields


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_the_error_panel_s_selector_finds_every_error_fatal_and_critical_line(path):
    (pattern,) = re.findall(r'detected_level=~"([^"]+)"', q.LOKI_ERRORS.expr)
    stored = path()
    matched = {raw for raw in RAW if re.fullmatch(pattern, stored[raw.decode()].structured_metadata["detected_level"])}
    assert matched == {
        raw for raw, (_, level) in zip(RAW, LINES, strict=True) if level in ("error", "critical", "fatal")
    }
    assert len(matched) == 13


def test_both_paths_group_the_volume_panel_alike():
    """ "Log volume by level" counts by detected_level: both paths give each line the same one."""
    otlp, push = otlp_entries(), push_entries()
    assert {k: e.structured_metadata["detected_level"] for k, e in otlp.items()} == {
        k: e.structured_metadata["detected_level"] for k, e in push.items()
    }


def test_a_line_without_a_level_is_left_to_loki_s_own_reading():
    """No level field: the bridge sends no detected_level, and Loki reads the line as it would."""
    line = orjson.dumps({"time": ISO, "msg": "payment failed with error E42"})
    for stored in (
        LokiOTLP(compose_limits()).push(bridge_request(line), time.time_ns()),
        LokiOTLP(compose_limits()).push_json(
            orjson.loads(
                next(LokiSink(LokiConfig(url="http://l:3100", compression="none"), context()).requests(traced(line)))[0]
            ),
            time.time_ns(),
        ),
    ):
        ((entry,),) = stored.accepted.values()
        assert "severity_text" not in entry.structured_metadata
        assert entry.structured_metadata["detected_level"] == "error"  # Loki's word scan of the line

    assert severity({"level": " "}).level == severity({"msg": "no level"}).level == ""


# ---------------------------------------------------------------- the double keeps Loki's lesson


def pushed(metadata: dict[str, str], line: str = "a line", labels: dict[str, str] | None = None) -> str:
    payload = {
        "streams": [{"stream": labels or {"service_name": "s"}, "values": [[str(time.time_ns()), line, metadata]]}]
    }
    result = LokiOTLP(compose_limits()).push_json(payload, time.time_ns())
    ((entry,),) = result.accepted.values()
    return entry.structured_metadata["detected_level"]


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        # what a real Loki 3.7.6 did with the bridge's earlier lines: the word as written
        ({"severity_text": "50", "severity_number": "17"}, "50"),
        ({"severity_text": "Verbose", "severity_number": "1"}, "Verbose"),
        ({"severity_text": "crit", "severity_number": "21"}, "crit"),
        ({"severity_text": "WARNING"}, "warn"),
        # an explicit detected_level wins, normalised (checked on the real Loki for severity_text=50)
        ({"severity_text": "50", "detected_level": "error"}, "error"),
        ({"severity_text": "bogus", "detected_level": "FaTaL"}, "fatal"),
        ({"detected_level": "bogus"}, "bogus"),
        # severity_number alone, by OTel's ranges; outside them unknown; not a number: info
        ({"severity_number": "18"}, "error"),
        ({"severity_number": "25"}, "unknown"),
        ({"severity_number": "x"}, "info"),
    ],
)
def test_the_double_derives_detected_level_as_loki_3_7_6_does(metadata, expected):
    assert pushed(metadata) == expected


def test_the_double_reads_the_line_last_as_loki_does():
    assert pushed({}, '{"level": 50, "msg": "x"}') == "unknown"  # a number is not a JSON level string
    assert pushed({}, '{"a": {"lvl": "Debug"}}') == "debug"  # two levels deep
    assert pushed({}, '{"a": {"b": {"level": "error"}}}') == "error"  # too deep: the word "error" in the text
    assert pushed({}, "ts=1 LEVEL=wrn msg=x") == "warn"  # logfmt, keys in any case
    assert pushed({}, "misc:error but [WARN] first") == "warn"  # a word after a colon is not a level
    assert pushed({}, "a line", labels={"service_name": "s", "level": "ERROR"}) == "error"


def test_the_push_sink_sends_the_raw_level_and_loki_s_word(tmp_path):
    sink = LokiSink(LokiConfig(url="http://loki:3100", compression="none"), context(state_dir=tmp_path))
    ((body, _, _),) = list(sink.requests(traced(orjson.dumps({"level": 50, "msg": "m"}))))
    (stream,) = orjson.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)["streams"]
    ((_, _, metadata),) = stream["values"]
    assert (metadata["severity_text"], metadata["severity_number"], metadata["detected_level"]) == ("50", "17", "error")
