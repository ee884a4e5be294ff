"""The Loki, OTLP and spans sinks against a real HTTP receiver that decodes with the official formats
(opentelemetry-proto messages; Loki's JSON push schema). A real Loki, Collector or Tempo does not run
here: what is checked is the documented wire contract. And the file sink on real files: its
output's mode, and an output moved away or removed."""

from __future__ import annotations

import gzip
import os
import platform
import stat
import sys
import threading
import time

import orjson
import pytest

from obsbox.config import ConfigError, build, parse_yaml
from obsbox.exporters.bridge.component import ExportResult
from obsbox.exporters.bridge.processors.redact import RedactProcessor
from obsbox.exporters.bridge.sinks import http
from obsbox.exporters.bridge.sinks.file import FileConfig, FileSink
from obsbox.exporters.bridge.sinks.loki import LokiConfig, LokiSink
from obsbox.exporters.bridge.sinks.otlp import OtlpConfig, OtlpSink
from obsbox.exporters.bridge.sinks.spans import SpansConfig, SpansSink
from obsbox.local.receiver import Receiver
from obsbox.logfields import iso_ns
from tests.bridge.harness import context, records, traced

T32, S16 = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
FAST_RETRY = {"initial_interval": 0.05, "max_interval": 0.2}

LINES = [
    orjson.dumps(
        {
            "Timestamp": "2026-11-30T12:00:00.123456789Z",
            "Level": "Warning",
            "Service": "gateway",
            "Message": "slow upstream",
            "traceparent": f"00-{T32}-{S16}-01",
        }
    ),
    orjson.dumps({"time": 1796040000.5, "level": "error", "msg": "boom", "request_id": "r1"}),
    b"plain text, not json",
    b'{"broken utf8": "\xff\xfe"}',
]


@pytest.fixture
def receiver():
    rx = Receiver().start()
    yield rx
    rx.stop()


def sink(cls, config_cls, tmp_path, **options):
    return cls(build(config_cls, options), context("sink", state_dir=tmp_path))


def test_otlp_logs_decode_field_by_field(receiver, tmp_path):
    otlp = sink(
        OtlpSink,
        OtlpConfig,
        tmp_path,
        endpoint=receiver.url,
        service_name="gateway",
        resource={"deployment.environment": "test"},
    )
    recs = traced(*LINES)
    assert otlp.export(recs) is ExportResult.SUCCESS
    assert len(receiver.log_records) == 4
    (resource, first), (_, second), (_, text), (_, broken) = receiver.log_records
    assert resource == {"deployment.environment": "test", "service.name": "gateway"}
    assert first.trace_id.hex() == T32 and first.span_id.hex() == S16
    assert first.time_unix_nano == 1796040000_123456789
    assert (first.severity_number, first.severity_text) == (13, "Warning")
    assert first.body.string_value == LINES[0].decode()
    attrs = {kv.key: kv.value.string_value for kv in first.attributes}
    assert attrs == {"log.file.path": "/var/log/app.json", "log.file.name": "app.json", "detected_level": "warn"}
    assert second.time_unix_nano == 1796040000_500000000 and second.severity_number == 17
    assert second.trace_id.hex() == recs[1].trace_id and len(second.span_id) == 8
    assert {kv.key: kv.value.string_value for kv in text.attributes}["obsbox.parse_error"] == "invalid_json"
    assert text.body.string_value == "plain text, not json" and text.time_unix_nano == 0
    assert {kv.key: kv.value.string_value for kv in broken.attributes}["obsbox.parse_error"] == "invalid_utf8"
    assert broken.observed_time_unix_nano > 0 and len(broken.trace_id) == 16


def test_otlp_gzip_and_headers(receiver, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme,authorization=Bearer%20t0k")
    otlp = sink(OtlpSink, OtlpConfig, tmp_path, endpoint=receiver.url + "/v1/logs", compression="gzip")
    assert otlp.export(traced(*LINES[:2])) is ExportResult.SUCCESS
    path, headers, status = receiver.requests[-1]
    assert (path, status) == ("/v1/logs", 200)
    assert headers["content-encoding"] == "gzip" and headers["content-type"] == "application/x-protobuf"
    assert headers["x-tenant"] == "acme" and headers["authorization"] == "Bearer t0k"
    assert len(receiver.log_records) == 2


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_otlp_retries_retryable_statuses_then_delivers(receiver, tmp_path, status):
    otlp = sink(OtlpSink, OtlpConfig, tmp_path, endpoint=receiver.url, retry=FAST_RETRY)
    receiver.refuse(status, times=3)
    assert otlp.export(traced(*LINES)) is ExportResult.SUCCESS
    assert [s for _, _, s in receiver.requests] == [status, status, status, 200]
    assert len(receiver.log_records) == 4
    assert otlp.context.metrics.retries.labels("sink", f"http_{status}")._value.get() == 3


def test_otlp_honours_retry_after(receiver, tmp_path):
    otlp = sink(OtlpSink, OtlpConfig, tmp_path, endpoint=receiver.url, retry={"initial_interval": 5, "max_interval": 5})
    receiver.refuse(503, times=1, retry_after="0.3")
    started = time.monotonic()
    assert otlp.export(traced(*LINES[:1])) is ExportResult.SUCCESS
    assert 0.25 <= time.monotonic() - started < 4, "Retry-After (0.3 s) must win over the 5 s backoff"


def test_otlp_400_goes_to_the_dead_letter_file_with_its_reason(receiver, tmp_path):
    otlp = sink(OtlpSink, OtlpConfig, tmp_path, endpoint=receiver.url, dead_letter=str(tmp_path / "dead.jsonl"))
    receiver.refuse(400, times=1, body=b"invalid LogRecord")
    recs = traced(*LINES)
    assert otlp.export(recs) is ExportResult.SUCCESS  # acknowledged: kept in the dead-letter file
    dead = [orjson.loads(line) for line in (tmp_path / "dead.jsonl").read_bytes().splitlines()]
    assert len(dead) == 4 and {d["status"] for d in dead} == {400}
    assert "invalid LogRecord" in dead[0]["reason"]
    assert dead[0]["line"] == LINES[0].decode() and dead[0]["trace_id"] == T32
    assert "line_base64" in dead[3]  # broken UTF-8 kept exactly
    assert otlp.context.metrics.dead_letters.labels("sink")._value.get() == 4


def test_a_sink_down_then_up_loses_nothing(receiver, tmp_path):
    """503 for a while, then 200: export blocks and retries, and every record arrives once."""
    otlp = sink(OtlpSink, OtlpConfig, tmp_path, endpoint=receiver.url, retry=FAST_RETRY)
    receiver.refuse(503)
    threading.Timer(0.8, receiver.accept).start()
    recs = traced(*[orjson.dumps({"seq": i}) for i in range(1000)])
    assert otlp.export(recs) is ExportResult.SUCCESS
    assert len(receiver.log_records) == 1000 and sum(1 for *_, s in receiver.requests if s == 503) >= 2


def test_abort_while_down_is_a_failure_not_an_acknowledgement(receiver, tmp_path):
    otlp = sink(OtlpSink, OtlpConfig, tmp_path, endpoint=receiver.url, retry=FAST_RETRY)
    receiver.refuse(503)
    threading.Timer(0.3, otlp.context.abort.set).start()
    assert otlp.export(traced(*LINES)) is ExportResult.FAILURE


def test_connection_refused_is_retried(tmp_path):
    rx = Receiver().start()
    port = rx.port
    rx.stop()  # nothing listens on the port for a while
    otlp = sink(OtlpSink, OtlpConfig, tmp_path, endpoint=f"http://127.0.0.1:{port}", retry=FAST_RETRY)
    late = Receiver(port=port)
    threading.Timer(0.5, late.start).start()
    try:
        assert otlp.export(traced(*LINES[:2])) is ExportResult.SUCCESS
        assert len(late.log_records) == 2
        assert otlp.context.metrics.retries.labels("sink", "connection")._value.get() >= 1
    finally:
        late.stop()


def test_loki_push_decodes_with_structured_metadata_and_few_labels(receiver, tmp_path, monkeypatch):
    monkeypatch.setenv("LOKI_TENANT_ID", "team-a")
    monkeypatch.setenv("LOKI_USERNAME", "u")
    monkeypatch.setenv("LOKI_PASSWORD", "p")
    loki = sink(LokiSink, LokiConfig, tmp_path, url=receiver.url, labels={"env": "test"})
    recs = traced(*LINES)
    assert loki.export(recs) is ExportResult.SUCCESS
    path, headers, status = receiver.requests[-1]
    assert (path, status) == ("/loki/api/v1/push", 204)
    assert headers["content-encoding"] == "gzip" and headers["x-scope-orgid"] == "team-a"
    assert headers["authorization"] == "Basic dTpw"
    by_line = {e.line: e for e in receiver.loki}
    first = by_line[LINES[0].decode()]
    # the labels and metadata Loki's OTLP ingestion gives the same line (compose/README.md's convention)
    assert first.labels == {"env": "test", "service_name": "gateway"}
    assert first.metadata == {
        "trace_id": T32,
        "span_id": S16,
        "severity_text": "Warning",
        "severity_number": "13",
        "detected_level": "warn",
        "log_file_path": "/var/log/app.json",
        "log_file_name": "app.json",
    }
    assert first.timestamp_ns == 1796040000_123456789
    text = by_line["plain text, not json"]
    assert text.metadata["obsbox_parse_error"] == "invalid_json" and "severity_text" not in text.metadata
    assert by_line['{"broken utf8": "\ufffd\ufffd"}'].metadata["obsbox_parse_error"] == "invalid_utf8"
    assert all("trace_id" not in e.labels for e in receiver.loki)


def test_loki_labels_the_resource_loki_indexes_as_the_otlp_sink_sends_it(monkeypatch):
    """OTEL_RESOURCE_ATTRIBUTES and ``resource``, as the otlp sink takes them: what Loki's OTLP
    ingestion indexes becomes a label, the rest structured metadata, so both land alike."""
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,service.version=1.2")
    config = LokiConfig(url="http://l:3100", compression="none", resource={"k8s.namespace.name": "ns"})
    ((body, _, _),) = list(LokiSink(config, context()).requests(traced(LINES[0])))
    (stream,) = orjson.loads(body)["streams"]
    assert stream["stream"] == {"service_name": "gateway", "deployment_environment": "prod", "k8s_namespace_name": "ns"}
    assert stream["values"][0][2]["service_version"] == "1.2"


def test_loki_splits_large_batches_into_requests(receiver, tmp_path):
    loki = sink(LokiSink, LokiConfig, tmp_path, url=receiver.url, max_request_bytes=20_000, compression="none")
    assert (
        loki.export(traced(*[orjson.dumps({"seq": i, "pad": "x" * 100}) for i in range(500)])) is ExportResult.SUCCESS
    )
    assert len(receiver.requests) > 3 and len(receiver.loki) == 500


def test_loki_400_dead_letter_and_5xx_retry(receiver, tmp_path):
    loki = sink(LokiSink, LokiConfig, tmp_path, url=receiver.url, retry=FAST_RETRY)
    receiver.refuse(500, times=2)
    assert loki.export(traced(*LINES[:2])) is ExportResult.SUCCESS and len(receiver.loki) == 2
    receiver.refuse(400, times=1, body=b"entry too far behind")
    assert loki.export(traced(*LINES[:2])) is ExportResult.SUCCESS
    dead = (tmp_path / "dead-letter-sink.jsonl").read_text()
    assert "entry too far behind" in dead and dead.count("\n") == 2


def test_loki_bearer_token_and_invalid_label_name(receiver, tmp_path, monkeypatch):
    monkeypatch.setenv("LOKI_BEARER_TOKEN", "s3cret")
    loki = sink(LokiSink, LokiConfig, tmp_path, url=receiver.url)
    loki.export(traced(LINES[0]))
    assert receiver.requests[-1][1]["authorization"] == "Bearer s3cret"
    with pytest.raises(Exception, match="invalid Loki label names"):
        build(LokiConfig, {"url": receiver.url, "labels": {"bad-name": "x"}})


def test_redacted_secrets_never_reach_the_wire(receiver, tmp_path):
    secret = b'{"msg": "auth Bearer abcdefghijklmnopqrstuvwxyz0123", "password": "hunter2hunter2"}'
    recs = traced(secret)
    RedactProcessor(build(RedactProcessor.Config, {}), context()).process(recs)
    sink(LokiSink, LokiConfig, tmp_path, url=receiver.url).export(recs)
    sink(OtlpSink, OtlpConfig, tmp_path, endpoint=receiver.url).export(recs)
    wire = receiver.loki[0].line + receiver.log_records[0][1].body.string_value
    assert "abcdefghijklmnop" not in wire and "hunter2" not in wire and wire.count("[REDACTED]") == 4


def test_spans_from_a_request_record_form_a_waterfall(receiver, tmp_path):
    line = orjson.dumps(
        {
            "Timestamp": "2026-11-30T12:00:01.000Z",
            "Level": "Information",
            "Service": "legacy-api",
            "ActivityId": "7a6e3f1c-9b2d-4e8f-a1b2-c3d4e5f60718",
            "ParentId": "53995c3f42cd8ad8",
            "Method": "POST",
            "Route": "/v1/chat/completions",
            "StatusCode": 200,
            "Model": "gpt-4o-mini",
            "DurationMs": 400,
            "LatencyBreakdown": {"NetworkMs": 50, "SerializationMs": 100, "SchedulerWaitMs": 250},
        }
    )
    spans_sink = sink(SpansSink, SpansConfig, tmp_path, endpoint=receiver.url)
    recs = traced(line, b'{"no": "duration"}', b"not json")
    assert spans_sink.export(recs) is ExportResult.SUCCESS
    assert receiver.requests[-1][0] == "/v1/traces"
    spans = [span for _, span in receiver.spans]
    assert receiver.spans[0][0]["service.name"] == "legacy-api"
    assert receiver.spans[0][0]["obsbox.span.source"] == "logs", "kept apart from the SDK's spans in span metrics"
    root, *children = spans
    assert root.trace_id.hex() == "7a6e3f1c9b2d4e8fa1b2c3d4e5f60718"
    assert root.span_id.hex() == recs[0].span_id and root.parent_span_id.hex() == "53995c3f42cd8ad8"
    assert root.name == "POST /v1/chat/completions"
    end = 1796040001_000_000_000
    assert (root.start_time_unix_nano, root.end_time_unix_nano) == (end - 400_000_000, end)
    attrs = {kv.key: kv.value for kv in root.attributes}
    assert attrs["http.response.status_code"].int_value == 200
    assert attrs["gen_ai.request.model"].string_value == "gpt-4o-mini"
    assert [c.name for c in children] == ["network", "serialization", "scheduler_wait"]
    assert all(c.parent_span_id == root.span_id and c.trace_id == root.trace_id for c in children)
    starts = [c.start_time_unix_nano - root.start_time_unix_nano for c in children]
    ends = [c.end_time_unix_nano - root.start_time_unix_nano for c in children]
    assert starts == [0, 50_000_000, 150_000_000] and ends == [50_000_000, 150_000_000, 400_000_000]
    skipped = spans_sink.skipped
    assert skipped.labels("no_duration")._value.get() == 1 and skipped.labels("not_json")._value.get() == 1

    again = Receiver().start()
    try:
        sink(SpansSink, SpansConfig, tmp_path, endpoint=again.url).export(traced(line))
        assert [s.SerializeToString() for _, s in again.spans] == [s.SerializeToString() for s in spans]
    finally:
        again.stop()


def test_records_from_an_otlp_json_line_keep_their_service_time_and_level(receiver, tmp_path):
    """The collector's file exporter line (OTLP/JSON): each log record reaches Loki under its own
    resource's service.name, at its own timeUnixNano, with its severityText."""
    line = orjson.dumps(
        {
            "resourceLogs": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "checkout"}}]},
                    "scopeLogs": [
                        {
                            "logRecords": [
                                {
                                    "timeUnixNano": "1796040000123456789",
                                    "severityText": "ERROR",
                                    "severityNumber": 17,
                                    "body": {"stringValue": "payment declined"},
                                    "traceId": T32,
                                    "spanId": S16,
                                }
                            ]
                        }
                    ],
                }
            ]
        }
    )
    otlp = sink(OtlpSink, OtlpConfig, tmp_path, endpoint=receiver.url)
    assert otlp.export(traced(line)) is ExportResult.SUCCESS
    ((resource, record),) = receiver.log_records
    assert resource["service.name"] == "checkout" and record.time_unix_nano == 1796040000123456789
    loki = sink(LokiSink, LokiConfig, tmp_path, url=receiver.url)
    assert loki.export(traced(line)) is ExportResult.SUCCESS
    (entry,) = receiver.loki
    assert entry.labels["service_name"] == "checkout" and entry.timestamp_ns == 1796040000123456789
    assert entry.metadata["severity_text"] == "ERROR" and entry.metadata["trace_id"] == T32


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1796040000, 1796040000_000000000),  # epoch seconds (logrus, zap's default "ts" is a float)
        (1796040000.25, 1796040000_250000000),
        (1796040000123, 1796040000_123000000),  # milliseconds (pino, bunyan-style numbers)
        ("1796040000123", 1796040000_123000000),
        (1796040000123456, 1796040000_123456000),  # microseconds
        ("1796040000123456789", 1796040000_123456789),  # nanoseconds (OTLP/JSON timeUnixNano)
        (5, None),  # not a time after 2001
    ],
)
def test_epoch_numbers_are_read_in_the_unit_their_size_says(value, expected):
    from obsbox.logfields import timestamp_ns  # noqa: PLC0415

    assert timestamp_ns({"ts": value}) == expected


def test_gzip_bodies_are_standard_gzip_and_made_by_isa_l_where_its_wheel_is_a_dependency():
    body = b"".join(orjson.dumps({"seq": i, "msg": "x" * (i % 50)}) + b"\n" for i in range(5_000)) + bytes(range(256))
    headers: dict[str, str] = {}
    sent = http.compress(body, "gzip", headers)
    assert headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(sent) == body  # what any receiver's gzip reader takes
    assert len(sent) < len(body) // 4
    if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64"):  # pyproject's marker
        assert http.gzip_compress.__module__.startswith("isal"), "isal is a dependency here but was not used"
    assert http.compress(body, "none", {}) is body


def test_a_time_keeps_every_digit_of_its_fraction_up_to_nanoseconds():
    second = 1796040000 * 10**9  # 2026-11-30T12:00:00Z
    for digits in range(13):
        fraction = "123456789012"[:digits]
        text = "2026-11-30T12:00:00" + (f".{fraction}" if digits else "") + "Z"
        want = second + int((fraction + "0" * 9)[:9])
        assert iso_ns(text) == iso_ns(text) == want, text  # the second time through the cache


# The file sink: its output's mode, an output moved away, an output that cannot be opened.


def file_sink(tmp_path, yaml_text: str) -> FileSink:
    return FileSink(build(FileConfig, parse_yaml(yaml_text).data), context("file", state_dir=tmp_path))


def test_the_file_sink_creates_its_output_for_its_owner_unless_mode_says_otherwise(tmp_path):
    """0600 by default, whatever the umask; ``mode`` as YAML writes it (0640 is octal to YAML 1.1)
    or as a string; a decimal that is no mode is refused; an existing file keeps its mode."""
    old_umask = os.umask(0)
    try:
        for text, expected in (("", 0o600), ("mode: 0640", 0o640), ("mode: '0644'", 0o644), ("mode: 0o604", 0o604)):
            out = tmp_path / f"{expected:o}.jsonl"
            file_sink(tmp_path, f"path: {out}\n{text}").shutdown()
            assert stat.S_IMODE(out.stat().st_mode) == expected, text
    finally:
        os.umask(old_umask)
    with pytest.raises(ConfigError, match="not a permission mode; write it in octal"):
        file_sink(tmp_path, "path: x.jsonl\nmode: 640")
    kept = tmp_path / "kept.jsonl"
    kept.write_bytes(b"")
    kept.chmod(0o640)
    file_sink(tmp_path, f"path: {kept}").shutdown()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640


def test_the_file_sink_reopens_its_output_when_it_is_moved_away_or_removed(tmp_path):
    """``mv out.jsonl out.jsonl.1`` (logrotate): the next batch goes to a new out.jsonl, not into
    the moved file; the same after ``rm``. Each batch lands whole in exactly one file."""
    out = tmp_path / "out.jsonl"
    sink = file_sink(tmp_path, f"path: {out}")
    try:
        assert sink.export(records(b'{"n": 1}')) is ExportResult.SUCCESS
        out.rename(tmp_path / "out.jsonl.1")
        assert sink.export(records(b'{"n": 2}')) is ExportResult.SUCCESS
        assert (tmp_path / "out.jsonl.1").read_bytes() == b'{"n": 1}\n'
        assert out.read_bytes() == b'{"n": 2}\n'
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        out.unlink()
        assert sink.export(records(b'{"n": 3}')) is ExportResult.SUCCESS
        assert out.read_bytes() == b'{"n": 3}\n'
    finally:
        sink.shutdown()


def test_an_output_that_cannot_be_opened_is_one_config_error(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConfigError, match=r"taken cannot be opened for writing \(Is a directory\)"):
        file_sink(tmp_path, f"path: {tmp_path / 'taken'}")
