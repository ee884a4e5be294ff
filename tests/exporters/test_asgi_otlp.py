"""instrument() on a real ASGI app over real HTTP (uvicorn), spans sent by the real OTLP/HTTP
exporter (configured by OTEL_* variables) to a receiver that decodes them with opentelemetry-proto."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from prometheus_client import CollectorRegistry

from obsbox.exporters import instrument, set_model, stage
from tests.exporters.servers import Receiver, attributes, serve_asgi


async def chat_app(scope, receive, send):
    """A small gateway: two stages, then a streamed reply of three chunks."""
    if scope["type"] != "http":
        return
    await receive()
    if scope["path"] == "/boom":
        raise RuntimeError("the model server fell over")
    with stage("retrieval"):
        await asyncio.sleep(0.01)
    with stage("prefill"):
        await asyncio.sleep(0.01)
    if scope["path"] == "/v1/named":
        set_model("named-by-app")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for word in (b"one", b"two", b"three"):
        await send({"type": "http.response.body", "body": b"data: " + word + b"\n\n", "more_body": True})
        await asyncio.sleep(0.005)
    await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def receiver(monkeypatch):
    r = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{r.url}/v1/traces")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    yield r
    r.close()


def _traceresponse(response: httpx.Response) -> tuple[str, str, str]:
    version, trace_id, span_id, flags = response.headers["traceresponse"].split("-")
    assert version == "00"
    assert response.headers["x-span-id"] == span_id
    return trace_id, span_id, flags


def test_spans_headers_and_propagation_over_real_http(receiver):
    app = instrument(chat_app, "chat-gw", registry=CollectorRegistry(), models=["gpt-4o"], stage_spans=True)
    parent_trace, parent_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    activity = uuid.UUID("0af76519-16cd-43dd-8448-eb211c80319c")
    with serve_asgi(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        w3c = client.post(
            "/v1/chat/completions", json=body, headers={"traceparent": f"00-{parent_trace}-{parent_span}-01"}
        )
        legacy = client.post(
            "/v1/chat/completions",
            json={**body, "model": "mystery-model"},
            headers={"X-Activity-ID": str(activity), "X-Worker-Pool": "gpu-a"},
        )
        plain = client.post("/v1/named", content=b"{}", headers={"content-type": "application/json"})
        with pytest.raises(httpx.HTTPError):  # uvicorn answers 500 and closes, or drops the connection
            client.post("/boom", content=b"{}").raise_for_status()
    app.instrumentation.shutdown()  # flushes the batch span processor through the OTLP exporter

    assert w3c.status_code == legacy.status_code == plain.status_code == 200
    assert w3c.text.count("data: ") == 3
    w3c_trace, w3c_span, _ = _traceresponse(w3c)
    legacy_trace, legacy_span, _ = _traceresponse(legacy)
    plain_trace, plain_span, _ = _traceresponse(plain)
    assert w3c_trace == parent_trace  # traceparent joins the caller's trace
    assert legacy_trace == activity.hex  # X-Activity-ID becomes the trace ID
    assert plain_trace not in (parent_trace, activity.hex)

    spans = receiver.spans()
    by_id = {span.span_id.hex(): (resource, span) for resource, span in spans}
    servers = [span for _, span in spans if span.kind == span.SPAN_KIND_SERVER]
    assert len(servers) == 4, [s.name for s in servers]
    assert {r["service.name"] for r, _ in spans} == {"chat-gw"}
    assert {r["deployment.environment"] for r, _ in spans} == {"test"}

    _, server = by_id[w3c_span]
    assert server.trace_id.hex() == parent_trace
    assert server.parent_span_id.hex() == parent_span
    assert server.name == "POST /v1/chat/completions"
    attrs = attributes(server)
    assert attrs["http.request.method"] == "POST"
    assert attrs["http.route"] == "/v1/chat/completions"
    assert attrs["http.response.status_code"] == 200
    assert attrs["gen_ai.request.model"] == "gpt-4o"  # read from the JSON body

    _, legacy_server = by_id[legacy_span]
    assert legacy_server.trace_id.hex() == activity.hex
    assert legacy_server.parent_span_id == b""  # a true root, no invented remote parent
    assert attributes(legacy_server)["gen_ai.request.model"] == "mystery-model"

    _, named = by_id[plain_span]
    assert attributes(named)["gen_ai.request.model"] == "named-by-app"  # set_model() wins over the body
    assert named.parent_span_id == b""

    children = [span for _, span in spans if span.parent_span_id.hex() == w3c_span]
    assert sorted(c.name for c in children) == ["prefill", "retrieval"]
    assert all(c.trace_id.hex() == parent_trace for c in children)
    assert all(c.end_time_unix_nano - c.start_time_unix_nano >= 10_000_000 for c in children)

    failed = next(s for s in servers if s.name.endswith("/boom"))
    assert attributes(failed)["http.response.status_code"] == 500
    assert failed.status.code == failed.status.STATUS_CODE_ERROR
    assert any(event.name == "exception" for event in failed.events)


def test_metrics_of_the_requests(receiver):
    registry = CollectorRegistry()
    app = instrument(chat_app, "chat-gw", registry=registry, models=["gpt-4o"], worker_pools=["gpu-a"])
    with serve_asgi(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        for pool, model in (("gpu-a", "gpt-4o"), ("gpu-b", "gpt-4o"), ("gpu-a", "unknown-llm")):
            client.post(
                "/v1/chat/completions",
                json={"model": model, "messages": []},
                headers={"X-Worker-Pool": pool},
            ).raise_for_status()
        metrics = client.get("/metrics").text
    app.instrumentation.shutdown()

    def count(**labels):
        return registry.get_sample_value("gateway_request_duration_seconds_count", labels)

    base = {"route": "/v1/chat/completions", "status_code": "200"}
    assert count(**base, model="gpt-4o", worker_pool="gpu-a") == 1
    assert count(**base, model="gpt-4o", worker_pool="other") == 1  # gpu-b is not in the configured list
    assert count(**base, model="other", worker_pool="gpu-a") == 1  # unknown model folded
    reply = registry.get_sample_value(
        "gateway_reply_latency_seconds_count", {"route": "/v1/chat/completions", "model": "gpt-4o"}
    )
    assert reply == 2
    assert registry.get_sample_value("gateway_stage_duration_seconds_count", {"stage": "prefill"}) == 3
    assert registry.get_sample_value("gateway_requests_in_flight", {"worker_pool": "gpu-a"}) == 0
    assert "gateway_request_duration_seconds_bucket" in metrics
    # Time to first byte is the first streamed chunk, not the end of the stream (3 chunks 5 ms apart).
    ttfb_sum = registry.get_sample_value(
        "gateway_reply_latency_seconds_sum", {"route": "/v1/chat/completions", "model": "gpt-4o"}
    )
    total_sum = sum(
        count
        for pool in ("gpu-a", "other")
        if (
            count := registry.get_sample_value(
                "gateway_request_duration_seconds_sum", {**base, "model": "gpt-4o", "worker_pool": pool}
            )
        )
    )
    assert ttfb_sum < total_sum - 0.015
