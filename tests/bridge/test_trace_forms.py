"""Every legacy trace-context form the bridge recognises, each with its exact expected W3C IDs."""

from __future__ import annotations

import hashlib
import re

import orjson
import pytest

from obsbox.exporters.bridge.processors.parse import ParseConfig, ParseProcessor
from obsbox.exporters.bridge.processors.trace import TraceConfig, TraceProcessor
from tests.bridge.harness import ORIGIN, context, records, traced

T32 = "4bf92f3577b34da6a3ce929d0e0e4736"
S16 = "00f067aa0ba902b7"
HEX32, HEX16 = re.compile(r"[0-9a-f]{32}"), re.compile(r"[0-9a-f]{16}")


def one(obj, **options):
    (rec,) = traced(orjson.dumps(obj), **options)
    assert HEX32.fullmatch(rec.trace_id) and HEX16.fullmatch(rec.span_id)
    return rec


def line_span(offset=0) -> str:
    """The documented derivation: blake2b-64 of (fingerprint digest, 8-byte big-endian offset)."""
    identity = ORIGIN.key + offset.to_bytes(8, "big")
    return hashlib.blake2b(identity, digest_size=8, person=b"obsbox-span").hexdigest()


def test_w3c_traceparent():
    rec = one({"msg": "x", "traceparent": f"00-{T32}-{S16}-01"})
    assert (rec.trace_id, rec.span_id) == (T32, S16)


@pytest.mark.parametrize(
    ("trace_key", "span_key"),
    [("trace_id", "span_id"), ("traceId", "spanId"), ("traceID", "spanID"), ("TraceId", "SpanId")],
)
def test_plain_fields_any_spelling_uppercase_hex(trace_key, span_key):
    rec = one({trace_key: T32.upper(), span_key: S16.upper()})
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_otel_python_logging_names():
    rec = one({"otelTraceID": T32, "otelSpanID": S16, "otelServiceName": "svc"})
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_otel_logging_invalid_zero_ids_fall_back_to_derivation():
    rec = one({"otelTraceID": "0", "otelSpanID": "0"})
    assert rec.span_id == line_span(0)


def test_ecs_dotted():
    rec = one({"trace.id": T32, "span.id": S16, "message": "m"})
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_ecs_nested():
    rec = one({"trace": {"id": T32}, "span": {"id": S16}, "message": "m"})
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_serilog_clef():
    rec = one({"@t": "2026-11-30T10:00:00Z", "@mt": "Hello {Name}", "@tr": T32, "@sp": S16})
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_dotnet_activity_id_guid_with_parent_id():
    rec = one({"ActivityId": "7A6E3F1C-9B2D-4E8F-A1B2-C3D4E5F60718", "ParentId": "53995c3f42cd8ad8"})
    assert rec.trace_id == "7a6e3f1c9b2d4e8fa1b2c3d4e5f60718"
    assert rec.parent_span_id == "53995c3f42cd8ad8"
    assert rec.span_id == line_span(0)  # the line's own span, derived


@pytest.mark.parametrize(
    ("activity", "parent"),
    [
        ("7a6e3f1c-9b2d-4e8f-a1b2-c3d4e5f6071 ", "53995c3f42cd8ad "),  # a space where a digit should be
        ("7a6e3f1c-9b2d-4e8f-a1b2-c3d4e5f6071g", "53995c3f42cd8adg"),
        ("7a6e3f1c-9b2d-4e8f-a1b2-c3d4e5f6 071", "53995c3f 42cd8ad"),
        ("00000000-0000-0000-0000-000000000000", "0000000000000000"),
    ],
)
def test_dotnet_activity_id_and_parent_id_that_are_not_hex_are_not_ids(activity, parent):
    rec = one({"ActivityId": activity, "ParentId": parent})
    assert rec.parent_span_id is None
    assert rec.span_id == line_span(0)
    assert rec.trace_id != activity.replace("-", "")  # derived from the line, not read


def test_dotnet_activity_id_with_w3c_parent_id():
    rec = one({"ActivityId": "{7a6e3f1c-9b2d-4e8f-a1b2-c3d4e5f60718}", "ParentId": f"00-{T32}-{S16}-01"})
    assert rec.trace_id == "7a6e3f1c9b2d4e8fa1b2c3d4e5f60718"
    assert rec.parent_span_id == S16


def test_dotnet_w3c_parent_id_alone_names_the_trace():
    rec = one({"ParentId": f"00-{T32}-{S16}-01", "Message": "m"})
    assert (rec.trace_id, rec.parent_span_id) == (T32, S16)


def test_dotnet_hierarchical_request_id():
    rec = one({"Request-Id": f"|{T32}.{S16}.", "Message": "m"})
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_zipkin_b3_multi_header_64_bit_trace_is_left_padded():
    rec = one(
        {
            "X-B3-TraceId": "463ac35c9f6413ad",
            "X-B3-SpanId": "a2fb4a1d1a96d312",
            "X-B3-ParentSpanId": "0020000000000001",
            "X-B3-Sampled": "1",
        }
    )
    assert (rec.trace_id, rec.span_id) == ("0000000000000000463ac35c9f6413ad", "a2fb4a1d1a96d312")
    assert rec.parent_span_id == "0020000000000001"


def test_zipkin_b3_single_header():
    rec = one({"b3": "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90"})
    assert (rec.trace_id, rec.span_id) == ("80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1")
    assert rec.parent_span_id == "05e3ac9a4f6e3b90"


def test_zipkin_b3_sampling_only_is_not_an_id():
    rec = one({"b3": "0"})
    assert rec.span_id == line_span(0)


@pytest.mark.parametrize("value", [f"{T32}:{S16}:0:1", f"{T32}%3A{S16}%3A0%3A1"])
def test_jaeger_uber_trace_id(value):
    rec = one({"uber-trace-id": value})
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_jaeger_short_ids_are_left_padded():
    rec = one({"uber-trace-id": "463ac35c9f6413ad:2fb4a1d1a96d312:0:1"})
    assert (rec.trace_id, rec.span_id) == ("0000000000000000463ac35c9f6413ad", "02fb4a1d1a96d312")


def test_aws_xray_header():
    rec = one({"X-Amzn-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"})
    assert (rec.trace_id, rec.span_id) == ("5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8")


def test_aws_xray_bare_trace_id():
    rec = one({"xray_trace_id": "1-5759e988-bd862e3fe1be46a994272793"})
    assert rec.trace_id == "5759e988bd862e3fe1be46a994272793"


def test_datadog_decimal_ids_are_the_low_half():
    # 1234567890123456789 = 0x112210f47de98115, 987654321 = 0x3ade68b1
    rec = one({"dd.trace_id": "1234567890123456789", "dd.span_id": "987654321", "message": "m"})
    assert (rec.trace_id, rec.span_id) == ("0000000000000000112210f47de98115", "000000003ade68b1")


def test_datadog_nested_numbers():
    rec = one({"dd": {"trace_id": 1234567890123456789, "span_id": 987654321, "service": "web"}})
    assert (rec.trace_id, rec.span_id) == ("0000000000000000112210f47de98115", "000000003ade68b1")


def test_datadog_nested_decimal_is_not_read_as_hex():
    # 16 decimal digits would also be valid hex: the dd prefix decides
    rec = one({"dd": {"trace_id": "1000000000000000"}})
    assert rec.trace_id == format(1000000000000000, "032x")


def test_google_cloud_logging():
    rec = one(
        {
            "logging.googleapis.com/trace": f"projects/my-proj/traces/{T32}",
            "logging.googleapis.com/spanId": S16,
            "severity": "INFO",
        }
    )
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_nested_headers_object():
    rec = one({"request": {"headers": {"traceparent": f"00-{T32}-{S16}-01"}}, "msg": "m"})
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_top_level_wins_over_nested():
    other = "11111111111111111111111111111111"
    rec = one({"trace_id": T32, "span_id": S16, "ctx": {"trace_id": other, "span_id": "2222222222222222"}})
    assert rec.trace_id == T32


@pytest.mark.parametrize("bad", ["", "zz", "0" * 32, "x" * 40, 42, None, ["a"], f"00-{'0' * 32}-{S16}-01"])
def test_malformed_values_are_ignored_and_ids_derived(bad):
    rec = one({"trace_id": bad, "traceparent": bad})
    assert rec.span_id == line_span(0)


def test_correlation_key_shares_the_trace_and_keeps_spans_apart():
    lines = [orjson.dumps({"request_id": "req-42", "step": i}) for i in range(3)]
    recs = traced(*lines, correlation_keys=["request_id"])
    expected = hashlib.blake2b(b"req-42", digest_size=16, person=b"obsbox-corr").hexdigest()
    assert {r.trace_id for r in recs} == {expected}
    assert len({r.span_id for r in recs}) == 3


def test_correlation_key_nested_path_and_order():
    recs = traced(
        orjson.dumps({"ctx": {"session": "s-1"}}),
        orjson.dumps({"request_id": "r-9", "ctx": {"session": "s-1"}}),
        correlation_keys=["request_id", "ctx.session"],
    )
    assert recs[0].trace_id == hashlib.blake2b(b"s-1", digest_size=16, person=b"obsbox-corr").hexdigest()
    assert recs[1].trace_id == hashlib.blake2b(b"r-9", digest_size=16, person=b"obsbox-corr").hexdigest()


def test_line_identity_derivation_is_stable_and_distinct():
    first = traced(b'{"a":1}', b'{"a":1}')
    again = traced(b'{"a":1}', b'{"a":1}')
    assert [(r.trace_id, r.span_id) for r in first] == [(r.trace_id, r.span_id) for r in again]
    assert first[0].trace_id != first[1].trace_id  # same content, different offsets


def test_injection_keeps_every_original_byte_and_appends_ids():
    raw = (
        b'{"n": 1.0, "big": 123456789012345678901234567890, "esc": "\\u00e9", '
        b'"ActivityId": "7a6e3f1c-9b2d-4e8f-a1b2-c3d4e5f60718"}'
    )
    (rec,) = traced(raw)
    assert rec.line().startswith(raw[:-1])
    assert orjson.loads(rec.line())["trace_id"] == "7a6e3f1c9b2d4e8fa1b2c3d4e5f60718"


def test_configured_output_field_names():
    (rec,) = traced(
        orjson.dumps({"traceparent": f"00-{T32}-{S16}-01"}), trace_id_field="TraceId", span_id_field="SpanId"
    )
    out = orjson.loads(rec.line())
    assert (out["TraceId"], out["SpanId"]) == (T32, S16)


def test_conflicting_existing_output_field_is_kept_and_the_id_goes_beside_it():
    raw = orjson.dumps({"trace_id": "463ac35c9f6413ad", "span_id": S16})
    (rec,) = traced(raw)
    assert rec.line() == raw[:-1] + b',"obsbox.trace_id":"0000000000000000463ac35c9f6413ad"}'


def test_line_already_in_output_form_is_left_alone():
    (rec,) = traced(orjson.dumps({"trace_id": T32, "span_id": S16}))
    assert rec.line() == orjson.dumps({"trace_id": T32, "span_id": S16})


def test_empty_object_gets_ids_without_a_leading_comma():
    (rec,) = traced(b"{}")
    assert set(orjson.loads(rec.line())) == {"trace_id", "span_id"}


# ---------------------------------------------------------------- shapes libraries and platforms write
# (the public corpus, tests/bridge/corpus/lines.yaml, covers each producer; these pin the limits)


def test_ids_in_a_list_element_are_found():
    rec = one(
        {"Message": "m", "Scopes": [{"Message": "x"}, {"TraceId": T32, "SpanId": S16, "ParentId": "b7ad6b7169203331"}]}
    )
    assert (rec.trace_id, rec.span_id, rec.parent_span_id) == (T32, S16, "b7ad6b7169203331")


def test_list_search_is_bounded_in_breadth():
    scopes = [{"n": i} for i in range(16)] + [{"TraceId": T32, "SpanId": S16}]
    rec = one({"Scopes": scopes})
    assert rec.span_id == line_span(0)


def test_top_level_ids_keep_the_plan_cache_and_skip_the_nested_search():
    proc = TraceProcessor(TraceConfig(), context())
    assert proc._plan({"trace_id": 1, "Scopes": 2}.keys(), ("trace_id", "Scopes"))[1] is False
    assert proc._plan({"msg": 1, "Scopes": 2}.keys(), ("msg", "Scopes"))[1] is True


def test_xray_header_in_any_value_with_its_parent_as_span():
    rec = one({"msg": "m", "hdr": {"v": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"}})
    assert (rec.trace_id, rec.span_id, rec.parent_span_id) == (
        "5759e988bd862e3fe1be46a994272793",
        "53995c3f42cd8ad8",
        None,
    )


def test_text_that_only_mentions_root_is_not_an_id():
    rec = one({"msg": "Root=1-not-a-trace"})
    assert rec.span_id == line_span(0)


def test_x_request_id_derives_the_trace_like_a_correlation_key():
    recs = traced(orjson.dumps({"x-request-id": "r-1", "n": 1}), orjson.dumps({"request_X-Request-Id": "r-1"}))
    expected = hashlib.blake2b(b"r-1", digest_size=16, person=b"obsbox-corr").hexdigest()
    assert {r.trace_id for r in recs} == {expected}
    assert recs[0].span_id == line_span(0)


def test_x_request_id_yields_to_a_configured_key_and_can_be_turned_off():
    line = orjson.dumps({"x-request-id": "r-1", "session": "s-1"})
    (rec,) = traced(line, correlation_keys=["session"])
    assert rec.trace_id == hashlib.blake2b(b"s-1", digest_size=16, person=b"obsbox-corr").hexdigest()
    (rec,) = traced(line, request_id_correlation=False)
    assert (
        rec.span_id == line_span(0)
        and rec.trace_id != hashlib.blake2b(b"r-1", digest_size=16, person=b"obsbox-corr").hexdigest()
    )


def test_transaction_id_is_not_a_span_without_a_trace():
    rec = one({"transaction_id": S16, "amount": 3})
    assert rec.span_id == line_span(0)


def test_gcp_logentry_trace_must_be_a_trace():
    rec = one({"trace": "projects/p/traces/not-hex", "spanId": S16})
    assert rec.span_id == line_span(0)  # a span ID alone names no trace: derived


OTLP = {
    "resourceLogs": [
        {
            "resource": {
                "attributes": [
                    {"key": "service.name", "value": {"stringValue": "orders"}},
                    {"key": "n", "value": {"intValue": "3"}},
                    {"key": "ok", "value": {"boolValue": True}},
                    {"key": "tags", "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}]}}},
                    {"key": "m", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": "v"}}]}}},
                ]
            },
            "scopeLogs": [{"scope": {}, "logRecords": [{"body": {"stringValue": f"r{i}"}} for i in range(3)]}],
        }
    ]
}


def test_otlp_json_line_becomes_one_record_per_log_record():
    recs = traced(b'{"a":1}', orjson.dumps(OTLP))
    assert len(recs) == 4
    parts = recs[1:]
    assert {(r.origin, r.offset) for r in parts} == {(ORIGIN, 8)}  # the line's checkpoint identity
    assert len({r.span_id for r in parts}) == 3 and len({r.trace_id for r in parts}) == 3
    identity = ORIGIN.key + (8).to_bytes(8, "big")
    assert parts[0].span_id == hashlib.blake2b(identity, digest_size=8, person=b"obsbox-span").hexdigest()
    assert (
        parts[2].span_id
        == hashlib.blake2b(identity + (2).to_bytes(4, "big"), digest_size=8, person=b"obsbox-span").hexdigest()
    )
    assert parts[0].attributes == {
        "service.name": "orders",
        "n": "3",
        "ok": "true",
        "tags": '["a","1"]',
        "m": '{"k":"v"}',
    }
    out = orjson.loads(parts[1].line())
    assert out["body"] == {"stringValue": "r1"} and out["trace_id"] == parts[1].trace_id


def test_otlp_json_expansion_can_be_turned_off_and_empty_exports_stay_whole():
    (kept,) = ParseProcessor(ParseConfig(expand_otlp=False), context()).process(records(orjson.dumps(OTLP)))
    assert kept.fields == OTLP
    for line in (
        b'{"resourceLogs":[]}',
        b'{"resourceLogs":"x"}',
        b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[1]}]}]}',
    ):
        (rec,) = traced(line)
        assert rec.raw == line and rec.span_id == line_span(0)


def test_many_nested_objects_are_all_searched():
    line = {f"k{i}": {"v": i} for i in range(40)}
    line["ctx"] = {"trace_id": T32, "span_id": S16}
    rec = one(line)
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_a_header_logged_as_a_one_value_list_is_read_and_a_repeated_one_is_not():
    # Caddy's access log keeps request headers as Go's http.Header: {"Traceparent": ["00-..."]}
    header = f"00-{T32}-{S16}-01"
    listed = one({"request": {"headers": {"Traceparent": [header]}}})
    assert (listed.trace_id, listed.span_id) == (T32, S16)
    twice = one({"request": {"headers": {"Traceparent": [header, header]}}})
    assert twice.trace_id != T32


def test_kubernetes_audit_id_correlates_unless_request_id_correlation_is_off():
    event = {"kind": "Event", "auditID": "b2c6a43e-3c7e-4a3d-9d51-6b1f2a9e7c10", "stage": "ResponseComplete"}
    first, second = one(event), one({**event, "stage": "RequestReceived"})
    assert first.trace_id == second.trace_id != "b2c6a43e3c7e4a3d9d516b1f2a9e7c10"
    off = one(event, request_id_correlation=False)
    assert off.trace_id != first.trace_id


def test_nginx_otel_parent_and_logger_json_span_complete_their_forms():
    nginx = one({"otel_trace_id": T32, "otel_span_id": S16, "otel_parent_id": "b7ad6b7169203331"})
    assert nginx.parent_span_id == "b7ad6b7169203331"
    basic = one({"trace": "294740ce41cc9f202dedb563db123532", "span": "bff20904aa5883a6"})
    assert (basic.trace_id, basic.span_id) == ("294740ce41cc9f202dedb563db123532", "bff20904aa5883a6")
    alone = one({"span": "bff20904aa5883a6", "msg": "no trace"})
    assert alone.span_id != "bff20904aa5883a6"
