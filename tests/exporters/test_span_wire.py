"""The span exporter of our own: its bytes, decoded with the official opentelemetry-proto messages,
must equal what the SDK's own encoder (``encode_spans``) makes of the same spans; and its HTTP side
behaves as the SDK's OTLPSpanExporter does (endpoint, headers and compression from the environment,
retries), against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import contextlib
import http.server
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from obsbox.exporters.instrumentation import otel_setup
from obsbox.exporters.instrumentation.otel_setup import OtelConfig
from obsbox.exporters.instrumentation.span_exporter import OtlpHttpSpanExporter
from obsbox.exporters.instrumentation.span_wire import SpanEncoder
from tests.exporters.servers import Receiver, free_port

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
REMOTE_PARENT = SpanContext(
    TRACE_ID,
    0x00F067AA0BA902B7,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
    trace_state=TraceState([("vendor", "v1"), ("other", "x-2")]),
)
EVERY_TYPE = {
    "str": "POST",
    "str.empty": "",
    "str.non_ascii": "grüße, 世界 🚀",
    "str.long": "SELECT * FROM models WHERE name = 'ü' " * 20,  # past the pair cache's length bound
    "bool.true": True,
    "bool.false": False,
    "int.zero": 0,
    "int.small": 200,
    "int.two_bytes": 16383,
    "int.three_bytes": 16384,
    "int.negative": -1,
    "int.negative_large": -(2**40) - 7,
    "int.max": 2**63 - 1,
    "int.min": -(2**63),
    "float": 0.25,
    "float.negative": -1e300,
    "float.inf": float("inf"),
    "bytes": b"\x00\xff\x10",
    "array.str": ["a", "ü", ""],
    "array.bool": [True, False],
    "array.int": [1, -1, 2**63 - 1],
    "array.float": [1.5, -0.0],
    "array.empty": [],
    "array.mixed_with_none": ["x", None, 3],
    "array.nested": [[1, 2], ["z"]],
    "map": {"k": "v", "n": 1, "inner": {"deep": [True]}},
    "ключ.non_ascii_key": "значение",
}


def finished(provider: TracerProvider) -> InMemorySpanExporter:
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory


def decode(data: bytes) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(data)


def assert_same_as_sdk(spans: Sequence[ReadableSpan], encoder: SpanEncoder | None = None) -> ExportTraceServiceRequest:
    """Encode with ours and with the SDK's encoder; the parsed requests must be equal, field by field."""
    ours = decode((encoder or SpanEncoder()).encode(spans))
    sdk = decode(encode_spans(spans).SerializeToString())
    assert MessageToDict(ours) == MessageToDict(sdk)  # a readable diff when they differ
    assert ours == sdk  # and exact equality, presence of empty messages included
    return ours


def test_a_span_with_every_attribute_type_events_links_and_an_error_status():
    provider = TracerProvider(resource=Resource.create({"service.name": "gateway", "région": "eu-ouest"}))
    memory = finished(provider)
    tracer = provider.get_tracer(
        "obsbox.exporters", "0.1.0", schema_url="https://opentelemetry.io/schemas/1.26.0", attributes={"lib": "ü"}
    )
    linked_remote = SpanContext(0xABC, 0xDEF, is_remote=True)
    linked_local = SpanContext(0x1234, 0x5678, is_remote=False)
    parent = trace.set_span_in_context(NonRecordingSpan(REMOTE_PARENT))
    span = tracer.start_span(
        "POST /v1/chat/completions ✓",
        parent,
        SpanKind.SERVER,
        EVERY_TYPE,
        links=[Link(linked_remote, {"link.kind": "follows", "n": -3}), Link(linked_local)],
        start_time=1_700_000_000_123_456_789,
    )
    span.add_event("first token", {"tokens": 12, "ratio": 0.5, "ok": True}, timestamp=1_700_000_000_200_000_000)
    span.add_event("no attributes", timestamp=1_700_000_000_300_000_000)
    span.record_exception(ValueError("bad ünïcode"), timestamp=1_700_000_000_400_000_000)
    span.set_status(Status(StatusCode.ERROR, "model server fell over: ошибка"))
    span.end(end_time=1_700_000_000_500_000_000)

    request = assert_same_as_sdk(memory.get_finished_spans())
    (resource_spans,) = request.resource_spans
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.schema_url == "https://opentelemetry.io/schemas/1.26.0"
    assert (scope_spans.scope.name, scope_spans.scope.version) == ("obsbox.exporters", "0.1.0")
    (decoded,) = scope_spans.spans
    # what the comparison leans on, checked against plain values too
    assert decoded.trace_id == TRACE_ID.to_bytes(16, "big")
    assert decoded.parent_span_id == bytes.fromhex("00f067aa0ba902b7")
    assert decoded.trace_state == "vendor=v1,other=x-2"
    assert decoded.flags == 0x300  # has is_remote | is_remote (the parent came over the wire)
    assert decoded.kind == decoded.SPAN_KIND_SERVER
    assert decoded.name == "POST /v1/chat/completions ✓"
    assert decoded.end_time_unix_nano - decoded.start_time_unix_nano == 376_543_211
    values = {kv.key: kv.value for kv in decoded.attributes}
    assert values["int.negative"].int_value == -1
    assert values["int.min"].int_value == -(2**63)
    assert values["int.max"].int_value == 2**63 - 1
    assert values["bool.false"].WhichOneof("value") == "bool_value"
    assert values["str.empty"].WhichOneof("value") == "string_value"
    assert values["float.negative"].double_value == -1e300
    assert values["bytes"].bytes_value == b"\x00\xff\x10"
    assert [v.WhichOneof("value") for v in values["array.mixed_with_none"].array_value.values] == [
        "string_value",
        None,
        "int_value",
    ]
    assert values["map"].kvlist_value.values[2].value.kvlist_value.values[0].key == "deep"
    assert values["ключ.non_ascii_key"].string_value == "значение"
    assert [event.name for event in decoded.events] == ["first token", "no attributes", "exception"]
    assert [link.flags for link in decoded.links] == [0x300, 0x100]
    assert (decoded.status.code, decoded.status.message) == (2, "model server fell over: ошибка")


def test_every_kind_and_status_a_local_parent_and_no_parent():
    provider = TracerProvider(resource=Resource.create({"service.name": "kinds"}))
    memory = finished(provider)
    tracer = provider.get_tracer("kinds")
    with tracer.start_as_current_span("root", kind=SpanKind.INTERNAL) as root:
        for kind in SpanKind:
            tracer.start_span(f"child {kind.name}", kind=kind).end()
        with tracer.start_as_current_span("ok") as ok:
            ok.set_status(StatusCode.OK)
        tracer.start_span("").end()  # an empty name is left out, as the SDK leaves it out
        root.set_status(StatusCode.ERROR)  # an error without a message
    request = assert_same_as_sdk(memory.get_finished_spans())
    spans = {span.name: span for span in request.resource_spans[0].scope_spans[0].spans}
    assert spans["root"].flags == 0x100 and not spans["root"].parent_span_id
    assert spans["child SERVER"].flags == 0x100 and spans["child SERVER"].parent_span_id == spans["root"].span_id
    assert spans["ok"].status.code == 1
    assert spans["root"].status.code == 2 and spans["root"].status.message == ""
    assert spans["child CONSUMER"].kind == 5 and spans["child INTERNAL"].kind == 1


def test_several_resources_and_scopes_are_grouped_in_order_of_first_appearance():
    gateway = TracerProvider(resource=Resource({"service.name": "gateway"}, schema_url="https://example.com/s/1"))
    worker = TracerProvider(resource=Resource({"service.name": "wörker", "pool": 3}))
    twin = TracerProvider(resource=Resource({"service.name": "gateway"}, schema_url="https://example.com/s/1"))
    memories = [finished(p) for p in (gateway, worker, twin)]
    a, b = gateway.get_tracer("a", "1"), gateway.get_tracer("b", None, attributes={"x": True})
    c, d = worker.get_tracer("c"), twin.get_tracer("a", "1")
    for tracer, name in [(a, "a1"), (c, "c1"), (b, "b1"), (a, "a2"), (d, "d1"), (c, "c2")]:
        tracer.start_span(name).end()
    spans = sorted((s for m in memories for s in m.get_finished_spans()), key=lambda s: s.start_time)
    unscoped = ReadableSpan(
        "no scope", SpanContext(1, 2, False), resource=worker.resource, start_time=5, end_time=6
    )  # a span without an instrumentation scope: an empty scope message, as the SDK writes it
    request = assert_same_as_sdk([*spans, unscoped])
    layout = [
        [(scope.scope.name, [span.name for span in scope.spans]) for scope in resource.scope_spans]
        for resource in request.resource_spans
    ]
    # the twin provider's resource equals the gateway's: one ResourceSpans for both, as the SDK does
    assert layout == [[("a", ["a1", "a2", "d1"]), ("b", ["b1"])], [("c", ["c1", "c2"]), ("", ["no scope"])]]
    assert request.resource_spans[0].schema_url == "https://example.com/s/1"


def test_dropped_counts_and_limits():
    limits = SpanLimits(max_span_attributes=2, max_events=1, max_links=1, max_event_attributes=1, max_link_attributes=1)
    provider = TracerProvider(resource=Resource.create({}), span_limits=limits)
    memory = finished(provider)
    tracer = provider.get_tracer("limits")
    links = [Link(SpanContext(9, 10, False)), Link(SpanContext(7, 8, False), {"a": 1, "b": 2})]
    span = tracer.start_span("limited", attributes={"a": 1, "b": 2, "c": 3}, links=links)
    span.add_event("e1")
    span.add_event("e2", {"x": 1, "y": 2})  # the newest are kept
    span.end()
    request = assert_same_as_sdk(memory.get_finished_spans())
    decoded = request.resource_spans[0].scope_spans[0].spans[0]
    assert (decoded.dropped_attributes_count, decoded.dropped_events_count, decoded.dropped_links_count) == (1, 1, 1)
    assert decoded.events[0].dropped_attributes_count == 1 and decoded.links[0].dropped_attributes_count == 1


def test_attributes_the_sdk_cannot_encode_are_left_out_by_both(caplog):
    span = ReadableSpan(
        "out of range",
        SpanContext(TRACE_ID, 3, False),
        resource=Resource({}),
        attributes={
            "kept": 1,
            "too.big": 2**63,
            "too.small": -(2**63) - 1,
            "array.too.big": [1, 2**64],
            "lone.surrogate": "\ud800",  # not valid Unicode: no UTF-8 for it
            "last": "x",
        },
        start_time=1,
        end_time=2,
    )
    request = assert_same_as_sdk([span])
    assert [kv.key for kv in request.resource_spans[0].scope_spans[0].spans[0].attributes] == ["kept", "last"]
    assert caplog.text.count("Failed to encode key") >= 8  # four by ours, four by the SDK's


def test_the_caches_give_the_same_bytes_on_every_batch():
    provider = TracerProvider(resource=Resource.create({"service.name": "cache"}))
    memory = finished(provider)
    tracer = provider.get_tracer("cache", "2")
    for i in range(300):
        tracer.start_span("GET", attributes={"http.route": f"/r/{i % 7}", "status": 200 + i % 3}).end()
    spans = memory.get_finished_spans()
    encoder = SpanEncoder()
    first = encoder.encode(spans)
    assert encoder.encode(spans) == first
    for start in range(0, 300, 100):
        assert_same_as_sdk(spans[start : start + 100], encoder)
    assert encoder.encode([]) == b""


class PublicOnly:
    """A span read only through ReadableSpan's public properties, as any other span class would be."""

    def __init__(self, span: ReadableSpan) -> None:
        self.span = span

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.span, name)


def test_spans_without_the_sdk_fields_are_read_through_the_public_properties():
    limits = SpanLimits(max_span_attributes=2, max_events=1, max_links=1)
    provider = TracerProvider(resource=Resource.create({"service.name": "public"}), span_limits=limits)
    memory = finished(provider)
    tracer = provider.get_tracer("public", "3")
    links = [Link(SpanContext(1, 2, True)), Link(SpanContext(3, 4, False), {"l": 1})]
    span = tracer.start_span("p", attributes={"a": 1, "b": "x", "c": True}, links=links)
    span.add_event("dropped")
    span.add_event("kept", {"e": 2.5})
    span.end()
    tracer.start_span("plain", attributes={"only": "one"}).end()
    spans = memory.get_finished_spans()
    ours = decode(SpanEncoder().encode([PublicOnly(s) for s in spans]))
    assert ours == decode(encode_spans(spans).SerializeToString())
    assert ours == decode(SpanEncoder().encode(spans))  # the direct reads give the same request
    decoded = ours.resource_spans[0].scope_spans[0].spans[0]
    assert (decoded.dropped_attributes_count, decoded.dropped_events_count, decoded.dropped_links_count) == (1, 1, 1)
    assert [kv.key for kv in decoded.attributes] == ["b", "c"]


leaves = st.one_of(
    st.text(max_size=12),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),  # out of int64: left out by both
    st.floats(allow_nan=False),  # NaN is never equal to itself, in a message either
    st.binary(max_size=8),
    st.none(),
)
values = st.recursive(
    leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=10,
)
attribute_maps = st.dictionaries(st.text(min_size=1, max_size=10), values, max_size=6)
ENCODER = SpanEncoder()  # one for every example: its caches see many resources, scopes and pairs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    span_attributes=attribute_maps,
    event_attributes=attribute_maps,
    link_attributes=attribute_maps,
    resource_attributes=attribute_maps,
    name=st.text(max_size=20),
    remote=st.booleans(),
    kind=st.sampled_from(list(SpanKind)),
)
def test_any_attributes_encode_as_the_sdk_encodes_them(**drawn: Any):
    span_attributes, event_attributes, link_attributes = (drawn[f"{n}_attributes"] for n in ("span", "event", "link"))
    resource_attributes, name, remote, kind = (
        drawn["resource_attributes"],
        drawn["name"],
        drawn["remote"],
        drawn["kind"],
    )
    parent = SpanContext(TRACE_ID, 0xAB, is_remote=remote)
    span = ReadableSpan(
        name,
        SpanContext(TRACE_ID, 0xCD, False),
        parent=parent,
        resource=Resource(resource_attributes),
        attributes=span_attributes,
        events=[Event("e", event_attributes, timestamp=3)],
        links=[Link(SpanContext(5, 6, remote), link_attributes)],
        kind=kind,
        start_time=1,
        end_time=2,
        instrumentation_scope=InstrumentationScope("scope", "1", attributes=resource_attributes),
    )
    assert_same_as_sdk([span], ENCODER)


# --- over HTTP ----------------------------------------------------------------------------------


def some_spans(n: int = 3) -> list[ReadableSpan]:
    provider = TracerProvider(resource=Resource.create({"service.name": "http-test"}))
    memory = finished(provider)
    tracer = provider.get_tracer("http-test")
    for i in range(n):
        tracer.start_span(f"span {i}", attributes={"i": i}).end()
    return list(memory.get_finished_spans())


@pytest.fixture
def receiver(monkeypatch):
    for variable in (
        "ENDPOINT",
        "HEADERS",
        "COMPRESSION",
        "TIMEOUT",
        "CERTIFICATE",
        "CLIENT_CERTIFICATE",
        "CLIENT_KEY",
    ):
        monkeypatch.delenv(f"OTEL_EXPORTER_OTLP_{variable}", raising=False)
        monkeypatch.delenv(f"OTEL_EXPORTER_OTLP_TRACES_{variable}", raising=False)
    r = Receiver()
    yield r
    r.close()


def test_posts_to_the_traces_path_with_headers_and_gzip_from_the_environment(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{receiver.url}/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-generic=not-used")  # the traces variable wins
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "X-Tenant=acme,Authorization=Bearer%20t0k%3Den")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
    exporter = OtlpHttpSpanExporter()
    assert exporter.endpoint == f"{receiver.url}/v1/traces"
    try:
        assert exporter.export(some_spans(3)) is SpanExportResult.SUCCESS
        assert exporter.export(some_spans(2)) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    requests = receiver.inner.requests
    assert [(path, status) for path, _, status in requests] == [("/v1/traces", 200)] * 2
    headers = requests[0][1]
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["content-encoding"] == "gzip"  # the receiver gunzipped it before decoding
    assert headers["x-tenant"] == "acme"
    assert headers["authorization"] == "Bearer t0k=en"
    assert "x-generic" not in headers
    assert [span.name for _, span in receiver.spans()] == ["span 0", "span 1", "span 2", "span 0", "span 1"]
    assert {resource["service.name"] for resource, _ in receiver.spans()} == {"http-test"}


def test_the_traces_endpoint_is_taken_as_given_and_arguments_win(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.url}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3.5")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli")  # unsupported: a warning, then none
    exporter = OtlpHttpSpanExporter(headers={"X-Arg": "1"})
    try:
        assert (exporter.endpoint, exporter.timeout, exporter.compression) == (f"{receiver.url}/v1/traces", 3.5, "none")
        assert exporter.export(some_spans(1)) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    path, headers, _ = receiver.inner.requests[0]
    assert path == "/v1/traces" and headers["x-arg"] == "1" and "content-encoding" not in headers
    assert exporter.export(some_spans(1)) is SpanExportResult.FAILURE  # after shutdown
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    assert OtlpHttpSpanExporter().endpoint == "http://127.0.0.1:9/v1/traces"
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    assert OtlpHttpSpanExporter().endpoint == "http://localhost:4318/v1/traces"


def export_once(url: str, spans: list, timeout: float = 10) -> tuple[SpanExportResult, float]:
    """One export by a fresh exporter, then its shutdown: the result, and the seconds both took."""
    exporter = OtlpHttpSpanExporter(url, timeout=timeout)
    started = time.monotonic()
    try:
        result = exporter.export(spans)
    finally:
        exporter.shutdown()
    return result, time.monotonic() - started


def test_a_503_is_retried_after_a_backoff_then_succeeds(receiver):
    receiver.inner.refuse(503, times=1)
    result, elapsed = export_once(f"{receiver.url}/v1/traces", some_spans(2))
    assert result is SpanExportResult.SUCCESS
    assert [status for _, _, status in receiver.inner.requests] == [503, 200]
    assert 0.75 <= elapsed < 5, elapsed  # the first backoff: 1 s ± 20%
    assert [span.name for _, span in receiver.spans()] == ["span 0", "span 1"]


def test_retry_after_is_honoured(receiver):
    receiver.inner.refuse(429, times=2, retry_after="0")
    result, elapsed = export_once(f"{receiver.url}/v1/traces", some_spans(1))
    assert result is SpanExportResult.SUCCESS
    assert [status for _, _, status in receiver.inner.requests] == [429, 429, 200]
    assert elapsed < 0.7  # no backoff of its own


def test_a_400_is_not_retried(receiver):
    receiver.inner.refuse(400)
    result, _ = export_once(f"{receiver.url}/v1/traces", some_spans(1))
    assert result is SpanExportResult.FAILURE
    assert [status for _, _, status in receiver.inner.requests] == [400]


def test_a_retry_that_would_outlast_the_timeout_is_not_waited_for(receiver):
    receiver.inner.refuse(503)
    result, elapsed = export_once(f"{receiver.url}/v1/traces", some_spans(1), timeout=1.5)
    assert result is SpanExportResult.FAILURE
    # 1 s backoff fits in 1.5 s, the next (2 s) does not
    assert [status for _, _, status in receiver.inner.requests] == [503, 503]
    assert elapsed < 1.5


def test_a_refused_connection_fails_within_the_timeout():
    result, elapsed = export_once(f"http://127.0.0.1:{free_port()}/v1/traces", some_spans(1), timeout=1.0)
    assert result is SpanExportResult.FAILURE
    assert elapsed < 1.5


def test_shutdown_interrupts_a_backoff(receiver):
    receiver.inner.refuse(503)
    exporter = OtlpHttpSpanExporter(f"{receiver.url}/v1/traces", timeout=30)
    results: list[SpanExportResult] = []
    worker = threading.Thread(target=lambda: results.append(exporter.export(some_spans(1))))
    worker.start()
    deadline = time.monotonic() + 5
    while not receiver.inner.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    exporter.shutdown()
    worker.join(5)
    assert results == [SpanExportResult.FAILURE]
    assert time.monotonic() - started < 1
    assert len(receiver.inner.requests) == 1


def test_one_connection_is_kept_alive_across_exports(receiver):
    exporter = OtlpHttpSpanExporter(f"{receiver.url}/v1/traces")
    try:
        ports = []
        for _ in range(3):
            assert exporter.export(some_spans(1)) is SpanExportResult.SUCCESS
            ports.append(exporter._conn.sock.getsockname()[1])
    finally:
        exporter.shutdown()
    assert len(set(ports)) == 1
    assert exporter._conn is None


# --- TLS, with certificates made by openssl -----------------------------------------------------


def make_certificate(folder: Path, name: str) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is not installed: apt-get install openssl")
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


class _Accept(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    paths: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


@contextlib.contextmanager
def tls_server(cert: Path, key: Path, client_ca: Path) -> Iterator[tuple[str, list[str]]]:
    """An HTTPS server that asks for a client certificate signed by ``client_ca``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(client_ca)
    paths: list[str] = []
    handler = type("Handler", (_Accept,), {"paths": paths})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/v1/traces", paths
    finally:
        server.shutdown()
        server.server_close()


def test_tls_with_the_certificate_variables(tmp_path, monkeypatch):
    server_cert, server_key = make_certificate(tmp_path, "server")
    client_cert, client_key = make_certificate(tmp_path, "client")
    with tls_server(server_cert, server_key, client_ca=client_cert) as (url, paths):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
        untrusted = OtlpHttpSpanExporter()  # the server's certificate is self-signed: refused
        assert untrusted.export(some_spans(1)) is SpanExportResult.FAILURE
        untrusted.shutdown()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(server_cert))
        anonymous = OtlpHttpSpanExporter()  # trusts the server, but shows no client certificate
        assert anonymous.export(some_spans(1)) is SpanExportResult.FAILURE
        anonymous.shutdown()
        assert paths == []
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", str(client_cert))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", str(client_key))
        exporter = OtlpHttpSpanExporter()
        try:
            assert exporter.export(some_spans(1)) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
        assert paths == ["/v1/traces"]


# --- what instrument() uses ----------------------------------------------------------------------


def test_otel_setup_uses_ours_for_http_and_the_sdk_when_asked(monkeypatch):
    for variable in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OBSBOX_SDK_SPAN_EXPORTER"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")

    def built(config: OtelConfig) -> Any:
        providers = otel_setup.build(config)
        try:
            return providers.tracer_provider._active_span_processor._span_processors[0].span_exporter
        finally:
            providers.shutdown()

    def config(**kwargs: Any) -> OtelConfig:
        return OtelConfig(metrics_exporter="none", logs_exporter="none", set_global=False, **kwargs)

    assert type(built(config())) is OtlpHttpSpanExporter
    sdk_http = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    assert type(built(config(sdk_span_exporter=True))).__module__ == sdk_http
    monkeypatch.setenv("OBSBOX_SDK_SPAN_EXPORTER", "1")
    assert type(built(config())).__module__ == sdk_http
    assert type(built(config(sdk_span_exporter=False))) is OtlpHttpSpanExporter  # the argument wins
    monkeypatch.delenv("OBSBOX_SDK_SPAN_EXPORTER")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    assert type(built(config())).__module__.startswith("opentelemetry.exporter.otlp.proto.grpc")
