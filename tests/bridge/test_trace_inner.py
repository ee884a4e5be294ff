"""The app's JSON inside a string (journald's ``MESSAGE``, an app's ``message``) and CloudWatch Logs
subscription payloads: the IDs are found one level down, the outer record is what is written.

The journald, CloudWatch and nested lines are the public corpus's (tests/bridge/corpus/lines.yaml),
produced by running structlog 26.1.0 and python-json-logger 4.2.0 with opentelemetry-sdk 1.45.2.
"""

from __future__ import annotations

import orjson
import pytest

from obsbox.exporters.bridge.processors.parse import ParseConfig, ParseProcessor
from tests.bridge.harness import context, records, traced
from tests.bridge.test_corpus import ENTRIES
from tests.bridge.test_trace_forms import S16, T32

JOURNALD, JOURNALD_BYTES = (e["line"].encode() for e in ENTRIES if e["producer"] == "journald-json-export")
(CLOUDWATCH,) = (e["line"].encode() for e in ENTRIES if e["producer"] == "aws-cloudwatch-subscription")
APP = orjson.loads(orjson.loads(JOURNALD)["MESSAGE"])  # structlog's line inside journald's


def test_journald_line_is_written_whole_with_the_apps_ids_appended():
    (rec,) = traced(JOURNALD)
    assert (rec.trace_id, rec.span_id) == (APP["trace_id"], APP["span_id"])
    assert rec.line() == JOURNALD[:-1] + f',"trace_id":"{rec.trace_id}","span_id":"{rec.span_id}"}}'.encode()


def test_journald_message_as_byte_values_is_read():
    (rec,) = traced(JOURNALD_BYTES)
    app = orjson.loads(bytes(orjson.loads(JOURNALD_BYTES)["MESSAGE"]).decode("latin-1"))
    assert (rec.trace_id, rec.span_id) == (app["trace_id"], app["span_id"])
    assert rec.line().startswith(JOURNALD_BYTES[:-1])


def message(inner: dict | str, **outer) -> bytes:
    return orjson.dumps(
        {"level": "info", **outer, "message": inner if type(inner) is str else orjson.dumps(inner).decode()}
    )


def test_the_outer_records_own_id_wins_over_the_one_inside():
    raw = message({"trace_id": "a" * 32, "span_id": "b" * 16}, traceparent=f"00-{T32}-{S16}-01")
    (rec,) = traced(raw)
    assert (rec.trace_id, rec.span_id) == (T32, S16)


def test_an_id_inside_wins_over_a_correlation_digest_outside_and_correlation_reads_inside_too():
    (rec,) = traced(message({"trace_id": T32}, request_id="r-1"), correlation_keys=["request_id"])
    assert rec.trace_id == T32
    by_outer, by_inner = traced(
        message({"event": "x"}, request_id="r-1"), message({"request_id": "r-1"}), correlation_keys=["request_id"]
    )
    assert by_outer.trace_id == by_inner.trace_id != T32
    (envoy,) = traced(message({"x-request-id": "r-2"}))
    (plain,) = traced(orjson.dumps({"x-request-id": "r-2"}))
    assert envoy.trace_id == plain.trace_id


@pytest.mark.parametrize(
    "raw",
    [
        orjson.dumps({"MESSAGE": orjson.dumps({"traceparent": f"00-{T32}-{S16}-01"}).decode()}),
        orjson.dumps({"log": orjson.dumps({"trace_id": T32, "span_id": S16}).decode() + "\n", "stream": "stdout"}),
        orjson.dumps({"msg": "text first", "body": orjson.dumps({"otelTraceID": T32, "otelSpanID": S16}).decode()}),
        message(f'{{"trace_id": "{T32}", "span_id": "{S16}", "ratio": NaN}}'),  # python-json-logger's NaN
    ],
    ids=["journald-traceparent", "docker-log", "second-message-field", "nan"],
)
def test_message_fields_and_forms(raw):
    (rec,) = traced(raw)
    assert (rec.trace_id, rec.span_id) == (T32, S16)


@pytest.mark.parametrize(
    "raw",
    [
        orjson.dumps({"@mt": "{User} logged in", "User": "ann"}),  # a template's brace is a placeholder
        message(" " + orjson.dumps({"trace_id": T32}).decode()),  # not starting with {
        message(orjson.dumps({"message": orjson.dumps({"trace_id": T32}).decode()}).decode()),  # two levels
        orjson.dumps({"MESSAGE": None}),  # journalctl's null for a field over 4096 bytes
        orjson.dumps({"MESSAGE": ["{", "x"]}),  # several values
    ],
)
def test_what_is_not_unwrapped(raw):
    (rec,) = traced(raw)
    assert rec.trace_id != T32 and rec.parse_error is None


def test_cloudwatch_payload_becomes_its_events():
    recs = traced(CLOUDWATCH)
    events = orjson.loads(CLOUDWATCH)["logEvents"]
    assert [rec.raw for rec in recs] == [orjson.dumps(event) for event in events]
    apps = [orjson.loads(event["message"]) for event in events[:2]]
    assert [(rec.trace_id, rec.span_id) for rec in recs[:2]] == [(a["trace_id"], a["span_id"]) for a in apps]
    assert len({rec.trace_id for rec in recs}) == 3
    assert (
        recs[0].line()
        == recs[0].raw[:-1] + f',"trace_id":"{recs[0].trace_id}","span_id":"{recs[0].span_id}"}}'.encode()
    )


def test_control_message_and_expand_cloudwatch_false_keep_one_record():
    control = orjson.dumps(
        {
            "messageType": "CONTROL_MESSAGE",
            "owner": "CloudwatchLogs",
            "logGroup": "",
            "logStream": "",
            "subscriptionFilters": [],
            "logEvents": [
                {
                    "id": "",
                    "timestamp": 1432826855000,
                    "message": "CWL CONTROL MESSAGE: Checking health of destination Firehose.",
                }
            ],
        }
    )
    assert [rec.raw for rec in traced(control)] == [control]
    kept = ParseProcessor(ParseConfig(expand_cloudwatch=False), context()).process(records(CLOUDWATCH))
    assert [rec.raw for rec in kept] == [CLOUDWATCH]
    odd = orjson.loads(CLOUDWATCH)
    odd["logEvents"].append("not an event")  # off the documented shape: nothing of it is dropped
    assert [rec.raw for rec in traced(orjson.dumps(odd))] == [orjson.dumps(odd)]
