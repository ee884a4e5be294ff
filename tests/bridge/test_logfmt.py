"""logfmt lines: go-logfmt's decoder rules, detection per file (plain, CRI-wrapped, forced, a banner
first), IDs, level and time, write-back byte for byte through the real bridge, Loki and OTLP, redaction,
malformed lines.

The decoder cases are go-logfmt's own (github.com/go-logfmt/logfmt v0.6.1, ``decode_test.go``:
``TestDecoder_scan`` and ``TestDecoder_SyntaxError``), one record per line here, as the bridge reads
one line at a time. ``TestDecoder_errors`` (``bufio.ErrTooLong``) is the scanner's buffer, which the
bridge's ``max_line_bytes`` stands for. Lines of real producers are in ``corpus/lines.yaml``.
"""

from __future__ import annotations

import orjson
import pytest

from obsbox import logfields
from obsbox.exporters.bridge.logfmt import LogfmtError, LogfmtFields, decode, pairs
from obsbox.exporters.bridge.metrics import BridgeMetrics
from obsbox.exporters.bridge.processors.parse import ParseProcessor
from obsbox.exporters.bridge.processors.redact import RedactConfig, RedactProcessor, RuleConfig
from obsbox.exporters.bridge.sources.containers import logfmt_inside
from obsbox.local.receiver import Receiver
from tests.bridge.harness import LOGFMT, ORIGIN, Running, context, records, traced
from tests.bridge.test_config import error

# Loki's own request log line (grafana/loki v3.7.6 docs/sources/query/log_queries/_index.md)
LOKI = (
    b"level=debug ts=2021-06-10T09:24:13.472094048Z caller=logging.go:66 traceID=0568b66ad2d9294c"
    b' msg="POST /loki/api/v1/push (204) 16.652862ms"'
)
LOKI_TRACE = "00000000000000000568b66ad2d9294c"
# Tempo's distributor (grafana/tempo v3.0.3 docs/sources/tempo/troubleshooting/send-traces/max-trace-limit-reached.md)
TEMPO = (
    b"level=info ts=2024-08-19T16:06:25.880684385Z caller=distributor.go:767 msg=discarded"
    b" spanid=c2ebe710d2e2ce7a traceid=bd63605778e3dbe935b05e6afd291006"
)


def cri(line: bytes) -> bytes:
    return b"2026-11-30T12:00:00.000000001Z stdout F " + line + b"\n"


# ---------------------------------------------------------------- go-logfmt's decoder

SCAN = [  # TestDecoder_scan: (data, pairs); go-logfmt's nil value is ""
    ("", []),
    ("x= ", [("x", "")]),
    ("y=", [("y", "")]),
    ("y", [("y", "")]),
    ("y=f", [("y", "f")]),
    ('y="\\tf"', [("y", "\tf")]),
    ("a=1", [("a", "1")]),
    (
        'a=1 b="bar" ƒ=2h3s r="esc\\t" d x=sf   ',
        [("a", "1"), ("b", "bar"), ("ƒ", "2h3s"), ("r", "esc\t"), ("d", ""), ("x", "sf")],
    ),
    ("\x1e y=g", [("y", "g")]),  # bytes <= ' ' between pairs are garbage
    ("y= d y=g", [("y", ""), ("d", ""), ("y", "g")]),
    ('y="f\\n"y=g', [("y", "f\n"), ("y", "g")]),
    ("y=f " * 5, [("y", "f")] * 5),
]

SYNTAX_ERRORS = [  # TestDecoder_SyntaxError: (line, message, position); the second line of each
    ("=bar", "unexpected '='", 1),
    ('"k"=bar', "unexpected '\"'", 1),
    ('k"ey=bar', "unexpected '\"'", 2),
    ('k=b"ar', "unexpected '\"'", 4),
    ("k=b =ar", "unexpected '='", 5),
    ("a==", "unexpected '='", 3),
    ("k=b=ar", "unexpected '='", 4),
    ('a="1', "unterminated quoted value", 5),
    ('a="1\\', "unterminated quoted value", 6),
    ('a="\\t1', "unterminated quoted value", 7),
    ('a="\\u1"', "invalid quoted value", 8),
    ("a\ufffd=bar", "invalid key", 3),  # go-logfmt counts bytes (5); positions here count characters
    (b"\x80=bar".decode("utf-8", "replace"), "invalid key", 2),
    (b"\x80".decode("utf-8", "replace"), "invalid key", 2),
]


@pytest.mark.parametrize(("line", "expected"), SCAN)
def test_go_logfmt_scan_cases(line, expected):
    assert pairs(line) == expected


@pytest.mark.parametrize(("line", "message", "pos"), SYNTAX_ERRORS)
def test_go_logfmt_syntax_errors(line, message, pos):
    with pytest.raises(LogfmtError, match=f"^{message} at pos {pos}$"):
        pairs(line)


@pytest.mark.parametrize(
    ("quoted", "value"),
    [
        (r'"a \"b\" c"', 'a "b" c'),
        (r'"C:\\logs"', "C:\\logs"),
        (r'"caf\u00e9"', "café"),
        (r'"\ud83d\ude00"', "\U0001f600"),  # a surrogate pair joined
        (r'"\ud83d x"', "\ufffd x"),  # a lone surrogate: U+FFFD, as Go's utf16.DecodeRune
        (r'"it\'s \/ \b\f\r"', "it's / \b\f\r"),
        ('"tab\there"', "tab\there"),  # no backslash: the bytes as they are, control bytes too
    ],
)
def test_quoted_values_are_unquoted_as_json_strings(quoted, value):
    assert decode("k=" + quoted) == {"k": value}


@pytest.mark.parametrize("quoted", [r'"\x41"', r'"\a"', r'"\U0001F600"', '"tab\t\\n"'])
def test_go_escapes_json_does_not_know_and_control_bytes_beside_an_escape_are_errors(quoted):
    """log/slog's TextHandler quotes with strconv.Quote (\\a, \\xNN, \\UNNNNNNNN): go-logfmt rejects them."""
    with pytest.raises(LogfmtError, match="invalid quoted value"):
        decode("k=" + quoted)


def test_a_key_given_twice_keeps_its_last_value():
    assert decode("a=1 b=2 a=3") == {"a": "3", "b": "2"}


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("fmt", "head", "expected"),
    [
        ("json", LOKI, True),
        ("json", b'{"level":"info"}', False),
        ("json", b"Starting Loki v3.7.6", False),
        ("json", b"2024-05-01T10:00:00Z level=info msg=x", False),  # a prefix that is not a key
        ("cri", cri(LOKI), True),
        ("cri", cri(b'{"level":"info"}'), False),
        ("docker", b'{"log":"level=info ts=2024-05-01T10:00:00Z msg=\\"hi\\"\\n","stream":"stderr"}', True),
        ("docker", b'{"log":"{\\"level\\":\\"info\\"}\\n","stream":"stdout"}', False),
    ],
)
def test_the_app_lines_format_is_judged_from_the_first_one_inside_any_wrapping(fmt, head, expected):
    assert logfmt_inside(fmt, head) is expected


def _ran(tmp_path, data: bytes, **options) -> Running:
    """``data`` as app.log through a bridge run with --once (memory sink unless ``sinks`` says)."""
    log = tmp_path / "app.log"
    log.write_bytes(data)
    running = Running([str(log)], tmp_path / "state", once=True, **options)
    running.thread.join(30)
    assert not running.thread.is_alive()
    return running


def _run(tmp_path, data: bytes, **options) -> list:
    return _ran(tmp_path, data, **options).sink.records()


def test_a_plain_logfmt_file_is_detected_and_its_lines_read_as_logfmt(tmp_path):
    first, second = _run(tmp_path, LOKI + b"\n" + TEMPO + b"\n")
    assert first.origin.logfmt and type(first.fields) is LogfmtFields
    assert (first.trace_id, second.trace_id, second.span_id) == (
        LOKI_TRACE,
        "bd63605778e3dbe935b05e6afd291006",
        "c2ebe710d2e2ce7a",
    )


def test_the_metrics_say_a_file_is_read_as_logfmt(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(LOKI + b"\n")
    running = Running([str(log)], tmp_path / "state")
    try:
        running.wait_for(1, timeout=10)
        sample = running.bridge.metrics.registry.get_sample_value
        assert sample("obsbox_bridge_file_format", {"path": str(log), "format": "logfmt"}) == 1
    finally:
        running.stop()


def test_logfmt_inside_cri_entries_in_kubelets_folders_is_detected(tmp_path):
    folder = tmp_path / "var/log/pods/loki_loki-0_49cc7c1fd3702c40b2686ea7486091d6/loki"
    folder.mkdir(parents=True)
    (folder / "0.log").write_bytes(cri(LOKI) + cri(b'caller=main.go:1 level=warn msg="slow"'))
    running = Running([str(tmp_path / "var/log/pods/*/*/*.log")], tmp_path / "state", once=True)
    running.thread.join(30)
    first, second = running.sink.records()
    assert first.raw == LOKI and first.origin.logfmt and first.trace_id == LOKI_TRACE
    assert logfields.severity(second.fields).level == "warn" and second.parse_error is None


def test_a_banner_first_leaves_the_file_json_but_its_logfmt_lines_are_still_read(tmp_path):
    banner, loki = _run(tmp_path, b"Starting Loki v3.7.6\n" + LOKI + b"\n")
    assert not banner.origin.logfmt, "one first line does not make a file logfmt"
    assert banner.parse_error == "invalid_json" and banner.fields is None
    assert loki.parse_error is None and loki.trace_id == LOKI_TRACE, "the per-line check reads it"


def test_logfmt_can_be_forced_and_then_text_lines_are_invalid_logfmt(tmp_path):
    banner, loki, json_line = _run(
        tmp_path,
        b"Starting Loki v3.7.6\n" + LOKI + b'\n{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}\n',
        format="logfmt",
    )
    assert banner.origin.logfmt and banner.parse_error == "invalid_logfmt" and banner.raw == b"Starting Loki v3.7.6"
    assert loki.trace_id == LOKI_TRACE
    assert json_line.fields == {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"} and type(json_line.fields) is dict


def test_format_json_forced_turns_file_detection_off(tmp_path):
    (loki,) = _run(tmp_path, LOKI + b"\n", format="json")
    assert not loki.origin.logfmt and loki.trace_id == LOKI_TRACE, "the per-line check still applies"


def test_a_bad_format_value_is_one_line_naming_the_key():
    message = error(
        "sources:\n  tail:\n    include: [a.log]\n    format: logfnt\n"
        "sinks:\n  stdout: {}\npipelines:\n  logs: {sources: [tail], sinks: [stdout]}\n"
    )
    assert "format" in message and "'logfmt'" in message and "logfnt" in message and "\n" not in message


# ---------------------------------------------------------------- IDs, level, time


def test_level_and_time_feed_the_fields_json_lines_feed():
    (loki,) = traced(LOKI, origin=LOGFMT)
    assert logfields.severity(loki.fields) == logfields.Severity(5, "debug", "debug")
    assert loki.time_ns() == 1623317053472094048
    (grafana,) = traced(b'logger=settings t=2024-05-01T10:00:00.5Z lvl=info msg="Starting Grafana"', origin=LOGFMT)
    assert grafana.time_ns() == 1714557600500000000, "Grafana's t="
    (slog,) = traced(b"time=2022-11-08T15:28:26.000-05:00 level=WARN+2 msg=hello", origin=LOGFMT)
    assert logfields.severity(slog.fields).number == 15 and slog.time_ns() == 1667939306000000000


@pytest.mark.parametrize(
    ("pair", "trace", "span"),
    [
        ("traceID=1980d41501b57b68", "00000000000000001980d41501b57b68", None),
        (
            "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "00f067aa0ba902b7",
        ),
        (
            "traceId=4bf92f3577b34da6a3ce929d0e0e4736 spanID=00f067aa0ba902b7",
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "00f067aa0ba902b7",
        ),
        (
            "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "00f067aa0ba902b7",
        ),
        (
            "dd.trace_id=5208512171318403364 dd.span_id=7043040094806018850",
            "000000000000000048485a3953bb6124",
            "61bde7a68dbf0b22",
        ),
        (
            "b3=80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1",
            "80f198ee56343ba864fe8b2a57d3eff7",
            "e457b5a2e4d86bd1",
        ),
    ],
)
def test_ids_are_found_in_the_pairs_as_in_json(pair, trace, span):
    (rec,) = traced(f'level=info msg="served" {pair}'.encode(), origin=LOGFMT)
    assert rec.trace_id == trace
    if span is not None:
        assert rec.span_id == span


def test_x_request_id_correlates_logfmt_lines_as_json_ones():
    one, two = traced(b"at=info x_request_id=abc path=/a", b'{"x-request-id":"abc"}', origin=LOGFMT)
    assert one.trace_id == two.trace_id


# ---------------------------------------------------------------- writing back


def test_the_file_sink_writes_each_line_back_byte_for_byte_with_the_ids_as_pairs(tmp_path):
    own = b'level=info trace_id=NOT-AN-ID msg="mine"'
    lines = [LOKI, TEMPO + b"\r", own, b'level=error msg="broken']
    out = tmp_path / "out.log"
    _ran(tmp_path, b"\n".join(lines) + b"\n", sinks={"file": {"path": str(out)}})
    loki, tempo, mine, broken = out.read_bytes().split(b"\n")[:-1]
    assert loki.startswith(LOKI + b" trace_id=" + LOKI_TRACE.encode() + b" span_id=") and len(loki) == len(LOKI) + 67
    assert tempo == TEMPO + b" trace_id=bd63605778e3dbe935b05e6afd291006 span_id=c2ebe710d2e2ce7a\r"
    assert mine.startswith(own + b" obsbox.trace_id=") and b" span_id=" in mine, "the app's own value keeps its bytes"
    assert decode(mine.decode())["trace_id"] == "NOT-AN-ID"
    assert broken == lines[3], "a malformed line passes through unchanged"


@pytest.mark.parametrize("workers", [0, 1])
def test_the_same_in_the_bridge_process_and_in_a_worker_process(tmp_path, workers):
    out = tmp_path / "out.log"
    _ran(tmp_path, LOKI + b"\n", workers=workers, sinks={"file": {"path": str(out)}})
    assert out.read_bytes().startswith(LOKI + b" trace_id=" + LOKI_TRACE.encode() + b" span_id=")


def test_loki_and_otlp_get_the_line_unchanged_with_its_ids_level_and_time(tmp_path):
    rx = Receiver().start()
    try:
        _ran(tmp_path, LOKI + b"\n", sinks={"otlp": {"endpoint": rx.url}, "loki": {"url": rx.url}})
        (entry,) = rx.loki
        assert entry.line == LOKI.decode() and entry.timestamp_ns == 1623317053472094048
        assert entry.metadata["trace_id"] == LOKI_TRACE and entry.metadata["detected_level"] == "debug"
        assert "obsbox_parse_error" not in entry.metadata
        ((_, record),) = rx.log_records
        assert record.body.string_value == LOKI.decode() and record.trace_id.hex() == LOKI_TRACE
        assert record.severity_number == 5 and record.time_unix_nano == 1623317053472094048
    finally:
        rx.stop()


# ---------------------------------------------------------------- redaction, malformed lines


def test_secret_pairs_in_logfmt_lines_are_redacted_and_the_pairs_read_again():
    ctx = context()
    line = b'level=info user=ann password=hunter2 db_password="a b c" msg="login"'
    recs = ParseProcessor(None, ctx).process(records(line, origin=LOGFMT))
    (rec,) = RedactProcessor(RedactConfig(), ctx).process(recs)
    assert rec.raw == b'level=info user=ann password=[REDACTED] db_password="[REDACTED]" msg="login"'
    assert rec.fields == {
        "level": "info",
        "user": "ann",
        "password": "[REDACTED]",
        "db_password": "[REDACTED]",
        "msg": "login",
    }
    assert type(rec.fields) is LogfmtFields and rec.parse_error is None


def test_a_custom_rule_that_breaks_a_logfmt_line_leaves_it_flagged_as_text():
    ctx = context()
    recs = ParseProcessor(None, ctx).process(records(b"level=info card=4111", origin=LOGFMT))
    config = RedactConfig(builtin=False, rules=[RuleConfig("card", r"4111", '"')])
    (rec,) = RedactProcessor(config, ctx).process(recs)
    assert rec.raw == b'level=info card="' and rec.fields is None
    assert rec.parse_error == "redaction left a line that is not logfmt"


def test_a_malformed_line_is_counted_and_passes_through_with_derived_ids():
    metrics = BridgeMetrics()
    ctx = context(metrics=metrics)
    bad = b'level=info msg="unterminated'
    logfmt_file, json_file = ParseProcessor(None, ctx).process(
        records(bad, origin=LOGFMT) + records(bad, origin=ORIGIN)
    )
    assert (logfmt_file.parse_error, json_file.parse_error) == ("invalid_logfmt", "invalid_json")
    assert logfmt_file.raw == bad and logfmt_file.fields is None
    sample = metrics.registry.get_sample_value
    assert sample("obsbox_bridge_parse_errors_total", {"reason": "invalid_logfmt"}) == 1
    assert sample("obsbox_bridge_parse_errors_total", {"reason": "invalid_json"}) == 1


def test_plain_json_lines_never_reach_logfmt():
    (rec,) = traced(b'{"level":"info","msg":"a=b"}', origin=LOGFMT)
    assert type(rec.fields) is dict and orjson.dumps(rec.fields) == b'{"level":"info","msg":"a=b"}'
