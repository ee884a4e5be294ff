"""instrument() on a WSGI app served by wsgiref over real HTTP."""

from __future__ import annotations

import time

import httpx
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from obsbox.exporters import current_request, instrument, record_cache, stage
from tests.exporters.servers import no_otlp, promtool_check_metrics, serve_wsgi


def wsgi_app(environ, start_response):
    """Streams three chunks 20 ms apart; the chunks are produced inside the request's span."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    environ["wsgi.input"].read(length)  # the body is still there after the model was sniffed
    with stage("jwt_verify"):
        time.sleep(0.005)
    if environ["PATH_INFO"] == "/missing":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"no"]
    start_response("200 OK", [("Content-Type", "text/plain")])

    def chunks():
        for i in range(3):
            with stage("decode"):
                time.sleep(0.02)
            record_cache("kv", hit=i > 0)
            yield f"chunk {i} in request {current_request() is not None}\n".encode()

    return chunks()


def test_wsgi_spans_streaming_and_metrics():
    spans = InMemorySpanExporter()
    registry = CollectorRegistry()
    app = instrument(
        wsgi_app,
        "wsgi-gw",
        registry=registry,
        routes=["/v1/items/{item}"],
        stage_spans=True,
        otel=no_otlp(span_processors=[SimpleSpanProcessor(spans)]),
    )
    activity = "{7c9e6679-7425-40de-944b-e07fc1f90ae7}"
    with serve_wsgi(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        ok = client.post(
            "/v1/items/42", json={"model": "llama-3"}, headers={"X-Activity-ID": activity, "X-Worker-Pool": "batch"}
        )
        missing = client.get("/missing")
        metrics = client.get("/metrics").content
    app.instrumentation.shutdown()

    assert ok.status_code == 200
    assert ok.text.count("in request True") == 3  # the scope stays current while the body streams
    trace_id, span_id = ok.headers["traceresponse"].split("-")[1:3]
    assert trace_id == "7c9e6679742540de944be07fc1f90ae7"
    assert missing.status_code == 404 and "x-span-id" in missing.headers

    finished = spans.get_finished_spans()
    server = next(s for s in finished if format(s.context.span_id, "016x") == span_id)
    assert server.parent is None
    assert server.name == "POST /v1/items/{item}"
    assert server.attributes["http.route"] == "/v1/items/{item}"
    assert server.attributes["gen_ai.request.model"] == "llama-3"
    children = sorted(s.name for s in finished if s.parent and s.parent.span_id == server.context.span_id)
    assert children == ["decode", "decode", "decode", "jwt_verify"]

    labels = {"route": "/v1/items/{item}", "model": "llama-3", "status_code": "200", "worker_pool": "batch"}
    assert registry.get_sample_value("gateway_request_duration_seconds_count", labels) == 1
    reply = {"route": "/v1/items/{item}", "model": "llama-3"}
    ttfb = registry.get_sample_value("gateway_reply_latency_seconds_sum", reply)
    total = registry.get_sample_value("gateway_request_duration_seconds_sum", labels)
    assert ttfb < total - 0.03  # first chunk after ~25 ms, the last after ~65 ms
    assert registry.get_sample_value("gateway_cache_requests_total", {"cache": "kv", "result": "hit"}) == 2
    missing_labels = {"route": "/missing", "model": "unknown", "status_code": "404", "worker_pool": "default"}
    assert registry.get_sample_value("gateway_request_duration_seconds_count", missing_labels) == 1
    result = promtool_check_metrics(metrics)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
