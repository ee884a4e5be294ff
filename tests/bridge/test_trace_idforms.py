"""IDs that are not plain hex strings (Python's JSON numbers, ``hex()``, Kong's object, Google Cloud's
header), W3C's invalid ``traceparent``s, and the rule that no byte of the app's line changes.

The Python lines were produced by running python-json-logger 4.2.0 and structlog 26.1.0 with
opentelemetry-sdk 1.45.2 (a fixed ID generator giving the W3C spec's example IDs); the others are in
the public corpus with their sources.
"""

from __future__ import annotations

import orjson
import pytest

from obsbox.config import build
from obsbox.exporters.bridge.component import ExportResult
from obsbox.exporters.bridge.processors.parse import ParseProcessor
from obsbox.exporters.bridge.processors.redact import RedactConfig, RedactProcessor
from obsbox.exporters.bridge.processors.trace import TraceConfig, TraceProcessor
from obsbox.exporters.bridge.sinks.file import FileConfig, FileSink
from obsbox.exporters.bridge.sinks.loki import LokiConfig, LokiSink
from tests.bridge.harness import context, records, traced
from tests.bridge.test_trace_forms import S16, T32, line_span

# python-json-logger: ``extra={"ratio": float("nan")}``
PJL_NAN = (
    b'{"asctime": "2026-12-02 00:10:13,692", "levelname": "INFO", "name": "orders", "message": "ratio computed",'
    b' "ratio": NaN, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}'
)
# structlog JSONRenderer, ``trace_id=ctx.trace_id, span_id=ctx.span_id`` (the SDK's integers)
STRUCTLOG_INF_INTS = (
    b'{"hit_rate": Infinity, "trace_id": 100985939111033328018442752961257817910, "span_id": 67667974448284343,'
    b' "event": "cache miss", "level": "info"}'
)
# python-json-logger, the same integers without any NaN: orjson reads the 128-bit one as a float
PJL_INTS = (
    b'{"asctime": "2026-12-02 00:10:13,692", "levelname": "INFO", "name": "orders", "message": "ids as numbers",'
    b' "trace_id": 100985939111033328018442752961257817910, "span_id": 67667974448284343}'
)
# structlog, ``trace_id=hex(ctx.trace_id)``
STRUCTLOG_HEX = (
    b'{"trace_id": "0x4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "0xf067aa0ba902b7",'
    b' "event": "ids via hex()", "level": "info"}'
)


def ids(raw: bytes, **options) -> tuple[str, str]:
    (rec,) = traced(raw, **options)
    return rec.trace_id, rec.span_id


@pytest.mark.parametrize("raw", [PJL_NAN, STRUCTLOG_INF_INTS, PJL_INTS, STRUCTLOG_HEX])
def test_python_json_numbers_and_hex_give_the_ids_exactly(raw):
    assert ids(raw) == (T32, S16)


def test_nan_line_keeps_its_bytes_on_the_file_sink_and_is_not_a_parse_error(tmp_path):
    """The line's own ID fields are the bridge's, so nothing is added and the bytes are the line's."""
    recs = traced(PJL_NAN, STRUCTLOG_INF_INTS)
    assert [rec.parse_error for rec in recs] == [None, None]
    out = tmp_path / "out.jsonl"
    sink = FileSink(build(FileConfig, {"path": str(out)}), context("file", state_dir=tmp_path))
    try:
        assert sink.export(recs) is ExportResult.SUCCESS
    finally:
        sink.shutdown()
    first, second = out.read_bytes().splitlines()
    assert first == PJL_NAN
    # integers are not the bridge's strings: its IDs go beside them, every original byte kept
    assert second == STRUCTLOG_INF_INTS[:-1] + f',"obsbox.trace_id":"{T32}","obsbox.span_id":"{S16}"}}'.encode()


def test_datadog_and_plain_64_bit_integers_are_exact():
    dd_trace, dd_span = 13835058055282163712, 9007199254740993  # 2**63 + 2**62, 2**53 + 1: no float has them
    raw = orjson.dumps({"dd.trace_id": dd_trace, "dd.span_id": dd_span, "msg": "m"})
    want = (format(dd_trace, "032x"), format(dd_span, "016x"))
    assert ids(raw) == want
    assert ids(orjson.dumps({"trace_id": dd_trace, "span_id": dd_span})) == want


@pytest.mark.parametrize("small", [0, 1, 42, 2**32 - 1, True, 1.5e38, 2**128])
def test_small_or_oversized_or_float_numbers_are_not_ids(small):
    assert ids(orjson.dumps({"trace_id": small}) if small != 2**128 else b'{"trace_id": %d}' % small)[1] == line_span(0)


@pytest.mark.parametrize(
    "value",
    [
        f"00-{T32.upper()}-{S16}-01",  # uppercase: the spec's first example of an invalid value
        f"00-{T32}-{S16.upper()}-01",
        f"ff-{T32}-{S16}-01",  # version ff is invalid
        f"00-{T32}-{S16}-01-extra",  # version 00 has exactly four fields
        f"00-{'0' * 32}-{S16}-01",
        f"00-{T32}-{'0' * 16}-01",
        f"00-{T32[:-1]}-{S16}-01",
        f"00-{T32}-{S16}-1",
    ],
)
def test_invalid_traceparent_is_ignored(value):
    assert ids(orjson.dumps({"traceparent": value})) == ids(b"{}")


def test_future_traceparent_version_may_carry_more_fields():
    assert ids(orjson.dumps({"traceparent": f"01-{T32}-{S16}-01-what-the-future-holds"})) == (T32, S16)


def test_kong_trace_id_object_prefers_w3c_then_hex_then_datadog_low_half():
    both = {"w3c": "4bf92000000000000000000000000001", "datadog": "1"}
    assert ids(orjson.dumps({"trace_id": both}))[0] == "4bf92000000000000000000000000001"
    assert ids(orjson.dumps({"trace_id": {"b3": "463ac35c9f6413ad"}}))[0] == "0000000000000000463ac35c9f6413ad"
    assert ids(orjson.dumps({"trace_id": {"datadog": "5208512171318403364"}}))[0] == format(5208512171318403364, "032x")
    assert ids(orjson.dumps({"trace_id": {"w3c": "zz", "gcp": T32}}))[0] == T32
    assert ids(orjson.dumps({"trace_id": {"datadog": "0"}}))[1] == line_span(0)


@pytest.mark.parametrize(
    "key",
    ["X-Cloud-Trace-Context", "x_cloud_trace_context", "request_X-Cloud-Trace-Context", "http_x_cloud_trace_context"],
)
def test_x_cloud_trace_context_decimal_span(key):
    raw = orjson.dumps({key: f"{T32}/67667974448284343;o=1", "status": 200})
    assert ids(raw) == (T32, S16)
    assert ids(orjson.dumps({key: f"{T32}/0;o=0"}))[0] == T32  # no span: the line's own
    assert ids(orjson.dumps({key: f"{T32}/{2**64};o=1"}))[1] == line_span(0)
    assert ids(orjson.dumps({key: f"{T32}"}))[0] == T32


def test_cloud_logging_span_id_hex_as_documented_or_the_headers_decimal():
    trace = f"projects/p/traces/{T32}"
    decimal = {"logging.googleapis.com/trace": trace, "logging.googleapis.com/spanId": "67667974448284343"}
    assert ids(orjson.dumps(decimal)) == (T32, S16)
    hexed = {"logging.googleapis.com/trace": trace, "logging.googleapis.com/spanId": "1234567890123456"}
    assert ids(orjson.dumps(hexed)) == (T32, "1234567890123456")  # 16 digits: hex, the documented form


# ---------------------------------------------------------------- the app's own fields


def test_an_apps_field_of_the_output_name_keeps_its_bytes_and_the_ids_go_beside_it():
    raw = b'{"trace_id": "4BF92F3577B34DA6A3CE929D0E0E4736", "span_id": "00f067aa0ba902b7" , "n": 1.50} '
    (rec,) = traced(raw)
    assert rec.line() == raw[:-2] + f',"obsbox.trace_id":"{T32}"}} '.encode()


def test_kong_object_is_kept_and_an_unreadable_value_too():
    raw = b'{"trace_id":{"w3c":"4bf92000000000000000000000000001","datadog":"1"},"latencies":{"kong":1}}'
    (rec,) = traced(raw)
    assert rec.line().startswith(raw[:-1] + b',"obsbox.trace_id":"4bf92000000000000000000000000001","span_id":"')
    bad = b'{"trace_id": "not-an-id", "span_id": null, "obsbox.span_id": "x"}'
    (rec,) = traced(bad)
    out = rec.line()
    assert out.startswith(bad[:-1]) and orjson.loads(out)["obsbox.trace_id"] == rec.trace_id
    assert out.count(b"span_id") == 2  # both names taken: the line's own are left as they are


def test_configured_names_follow_the_same_rule():
    raw = orjson.dumps({"TraceId": 5, "traceparent": f"00-{T32}-{S16}-01"})
    (rec,) = traced(raw, trace_id_field="TraceId", span_id_field="SpanId")
    assert rec.line() == raw[:-1] + f',"obsbox.TraceId":"{T32}","SpanId":"{S16}"}}'.encode()


def test_a_redacted_nan_line_is_still_json():
    ctx = context()
    raw = b'{"ratio": NaN, "password": "hunter2", "trace_id": "' + T32.encode() + b'"}'
    recs = RedactProcessor(build(RedactConfig, {}), ctx).process(ParseProcessor(None, ctx).process(records(raw)))
    (rec,) = TraceProcessor(build(TraceConfig, {}), ctx).process(recs)
    assert rec.parse_error is None and rec.fields is not None and rec.fields["password"] != "hunter2"
    assert b"NaN" in rec.line() and b"hunter2" not in rec.line() and rec.trace_id == T32


def test_plain_lines_keep_the_splice():
    (rec,) = traced(b'{"a": 1}')
    assert rec.line() == b'{"a": 1,"trace_id":"%s","span_id":"%s"}' % (rec.trace_id.encode(), rec.span_id.encode())


def test_the_loki_sink_sends_an_integer_past_64_bits_as_metadata_exactly(tmp_path):
    """STRUCTLOG_INF_INTS is read by the standard library (Infinity), which keeps the 128-bit integer:
    orjson refuses to write it, and the push sink's structured metadata must not stop on it."""
    config = LokiConfig(url="http://loki:3100", compression="none", structured_metadata=["trace_id", "hit_rate"])
    sink = LokiSink(config, context(state_dir=tmp_path))
    ((body, _, _),) = list(sink.requests(traced(STRUCTLOG_INF_INTS)))
    ((_, _, metadata),) = orjson.loads(body)["streams"][0]["values"]
    assert metadata["trace_id"] == "100985939111033328018442752961257817910"
    assert metadata["hit_rate"] == "Infinity"
