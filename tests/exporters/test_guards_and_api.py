"""The cardinality guard, the app-side API's input checks, and instrument()'s own checks."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from obsbox.config import ConfigError
from obsbox.exporters import (
    InstrumentConfig,
    OtelConfig,
    instrument,
    record_cache,
    record_decode,
    record_stage,
    set_gpu_memory_utilization,
    set_model,
    stage,
)
from obsbox.exporters.instrumentation.labels import BoundedLabel, RouteTemplates
from obsbox.exporters.instrumentation.otel_setup import build
from obsbox.exporters.instrumentation.propagation import guid_from_trace_id, trace_id_from_guid
from tests.exporters.servers import no_otlp


def test_routes_are_templated_and_bounded():
    routes = RouteTemplates(["/v1/models/{model}", "/v1/chat/completions"], cap=3)
    assert routes("/v1/models/gpt-4o") == "/v1/models/{model}"
    assert routes("/v1/chat/completions") == "/v1/chat/completions"
    assert routes("/users/12345/orders/0af76519-16cd-43dd-8448-eb211c80319c") == "/users/{id}/orders/{id}"
    assert routes("/users/99/orders/deadbeefdeadbeefdeadbeef") == "/users/{id}/orders/{id}"
    assert routes("/a") == "/a"
    assert routes("/b") == "/b"
    assert routes("/c") == "other"  # past the cap of 3 untemplated shapes
    assert routes.admit("/v1/models/{model}") == "/v1/models/{model}"
    with pytest.raises(ValueError, match="must start with '/'"):
        RouteTemplates(["v1/x"])


def test_bounded_label_folds_into_other():
    closed = BoundedLabel("model", ["gpt-4o"], cap=10)
    assert [closed(v) for v in ("gpt-4o", "gpt-5", None)] == ["gpt-4o", "other", "unknown"]
    open_ = BoundedLabel("worker_pool", cap=2)
    assert [open_(v) for v in ("a", "b", "c", "a")] == ["a", "b", "other", "a"]
    with pytest.raises(ValueError, match="cap must be >= 0"):
        BoundedLabel("x", cap=-1)


def test_guid_round_trip():
    trace_id = trace_id_from_guid("{0AF76519-16CD-43DD-8448-EB211C80319C}")
    assert trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert guid_from_trace_id(trace_id) == "0af76519-16cd-43dd-8448-eb211c80319c"
    assert trace_id_from_guid("00000000-0000-0000-0000-000000000000") is None
    assert trace_id_from_guid("not-a-guid") is None


def test_app_api_rejects_bad_input_even_outside_a_request():
    with pytest.raises(ValueError, match="unknown cache 'redis'; expected one of prompt_lru, intent_fingerprint, kv"):
        record_cache("redis", True)
    with pytest.raises(ValueError, match="tokens must be a non-negative integer"):
        record_decode(-1, 0.5)
    with pytest.raises(ValueError, match=r"ratio must be within 0\.\.1"):
        set_gpu_memory_utilization(1.5)
    with pytest.raises(TypeError, match="must be a string"):
        set_model(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seconds must be >= 0"):
        record_stage("prefill", -1)
    with stage("anything") as timed:  # outside a request: measures, records nothing
        pass
    assert timed.seconds >= 0


async def _app(scope, receive, send):
    with stage("warp_drive"):
        pass


def test_unknown_stage_names_the_known_ones():
    app = instrument(_app, "t", registry=CollectorRegistry(), otel=no_otlp())
    scope = {"type": "http", "method": "GET", "path": "/", "headers": []}

    async def receive():
        return {"type": "http.request"}

    async def send(message):
        pass

    expected = r"unknown stage 'warp_drive': expected one of network, tls, .*InstrumentConfig"
    with pytest.raises(ValueError, match=expected):
        asyncio.run(app(scope, receive, send))
    app.instrumentation.shutdown()


def test_instrument_checks_its_options(monkeypatch):
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['model_list'\]"):
        instrument(_app, "t", model_list=["x"])
    with pytest.raises(ValueError, match="max_models must be >= 0"):
        InstrumentConfig(max_models=-1)
    with pytest.raises(ValueError, match="must include the standard stages"):
        InstrumentConfig(stages=("prefill",))
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER='zipkin': expected one of otlp, console, none"):
        build(OtelConfig(metrics_exporter="none", logs_exporter="none", set_global=False))


def test_otel_setup_reads_the_environment(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    providers = build(OtelConfig(metrics_exporter="otlp", logs_exporter="none", set_global=False))
    try:
        assert providers.tracer_provider.resource.attributes["service.name"] == "from-env"
        exporter = providers.tracer_provider._active_span_processor._span_processors[0].span_exporter
        assert type(exporter).__module__.startswith("opentelemetry.exporter.otlp.proto.grpc")
        assert providers.meter_provider is not None
    finally:
        providers.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"):
        build(OtelConfig(set_global=False))
