"""instrument() speaks OpenTelemetry's GenAI conventions: span attributes and model-server metrics,
recorded by the real SDK (InMemorySpanExporter, InMemoryMetricReader) for requests through real
servers (uvicorn, wsgiref), every name checked against opentelemetry-semantic-conventions."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as gm
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from prometheus_client import CollectorRegistry

from obsbox.exporters import instrument, record_decode, record_prefill, record_usage, set_operation
from obsbox.exporters.instrumentation.genai import latest_experimental
from tests.exporters.servers import no_otlp, serve_asgi, serve_wsgi

GAP = 0.2  # seconds between a streamed reply's first chunk and the rest
# The advised ExplicitBucketBoundaries, as semantic-conventions v1.41.1 docs/gen-ai/gen-ai-metrics.md
# writes them (the package has the names but no bucket advice).
ADVISED = {
    gm.GEN_AI_SERVER_REQUEST_DURATION: [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    ],
    gm.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN: [
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    ],
    gm.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN: [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5],
    gm.GEN_AI_CLIENT_TOKEN_USAGE: [
        1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
    ],
}  # fmt: skip
UNITS = {
    gm.GEN_AI_SERVER_REQUEST_DURATION: "s",
    gm.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN: "s",
    gm.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN: "s",
    gm.GEN_AI_CLIENT_TOKEN_USAGE: "{token}",
}


async def chat_app(scope, receive, send):
    """An OpenAI-style chat route that streams three chunks, the last two GAP seconds after the first."""
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/v1/models":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
        return
    if scope["path"] == "/v1/embeddings":
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b"busy"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    await asyncio.sleep(GAP)
    await send({"type": "http.response.body", "body": b"data: 2\n\n", "more_body": True})
    record_usage(input_tokens=12, output_tokens=3, response_model="llama-3-8b-0613", finish_reasons=["stop"])
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def wsgi_app(environ, start_response):
    """A route of its own that the app names as a text completion served by vLLM."""
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    set_operation(ga.GenAiOperationNameValues.TEXT_COMPLETION.value, provider="vllm")
    record_prefill(7)
    start_response("200 OK", [("Content-Type", "text/plain")])

    def chunks():
        yield b"first"
        time.sleep(GAP)
        record_decode(5, GAP)
        yield b"rest"

    return chunks()


def _observers() -> tuple[InMemorySpanExporter, InMemoryMetricReader, dict[str, Any]]:
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    otel = no_otlp(span_processors=[SimpleSpanProcessor(spans)], meter_provider=MeterProvider([reader]))
    return spans, reader, {"registry": CollectorRegistry(), "otel": otel}


def _histograms(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    return {
        metric.name: metric
        for resource in (data.resource_metrics if data else ())
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name.startswith("gen_ai.")
    }


def _point(metric: Any, **attributes: Any) -> Any:
    """The one data point whose attributes include ``attributes``."""
    found = [p for p in metric.data.data_points if attributes.items() <= dict(p.attributes).items()]
    assert len(found) == 1, (attributes, [dict(p.attributes) for p in metric.data.data_points])
    return found[0]


def test_asgi_streamed_chat_default_mode(monkeypatch):
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    spans, reader, options = _observers()
    app = instrument(chat_app, "gw", models=["llama-3-8b"], **options)
    with serve_asgi(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        port = int(url.rsplit(":", 1)[1])
        assert client.post("/v1/chat/completions", json={"model": "llama-3-8b", "stream": True}).status_code == 200
        assert client.get("/v1/models").status_code == 200
        assert client.post("/v1/embeddings", json={"model": "llama-3-8b"}).status_code == 503
    app.instrumentation.shutdown()

    chat, models, embeddings = sorted(spans.get_finished_spans(), key=lambda s: s.start_time)
    assert (
        dict(chat.attributes).items()
        >= {
            ga.GEN_AI_OPERATION_NAME: ga.GenAiOperationNameValues.CHAT.value,
            ga.GEN_AI_SYSTEM: ga.GenAiProviderNameValues.OPENAI.value,  # default mode: the older attribute
            ga.GEN_AI_REQUEST_MODEL: "llama-3-8b",
            ga.GEN_AI_RESPONSE_MODEL: "llama-3-8b-0613",
            ga.GEN_AI_USAGE_INPUT_TOKENS: 12,
            ga.GEN_AI_USAGE_OUTPUT_TOKENS: 3,
            ga.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
            SERVER_ADDRESS: "127.0.0.1",
            SERVER_PORT: port,
        }.items()
    )
    assert ga.GEN_AI_PROVIDER_NAME not in chat.attributes
    assert ga.GEN_AI_OPERATION_NAME not in models.attributes  # not a GenAI operation
    assert embeddings.attributes[ga.GEN_AI_OPERATION_NAME] == ga.GenAiOperationNameValues.EMBEDDINGS.value

    metrics = _histograms(reader)
    assert set(metrics) == set(ADVISED)
    for name, metric in metrics.items():
        assert metric.unit == UNITS[name]
        for point in metric.data.data_points:
            assert list(point.explicit_bounds) == ADVISED[name]
    common = {ga.GEN_AI_OPERATION_NAME: "chat", ga.GEN_AI_SYSTEM: "openai", SERVER_ADDRESS: "127.0.0.1"}
    duration = _point(metrics[gm.GEN_AI_SERVER_REQUEST_DURATION], **common)
    assert dict(duration.attributes) == {
        **common,
        SERVER_PORT: port,
        ga.GEN_AI_REQUEST_MODEL: "llama-3-8b",
        ga.GEN_AI_RESPONSE_MODEL: "llama-3-8b-0613",
    }
    ttft = _point(metrics[gm.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN], **common)
    # The first chunk's time: the same measurement as gateway_reply_latency_seconds.
    reply = options["registry"].get_sample_value(
        "gateway_reply_latency_seconds_sum", {"route": "/v1/chat/completions", "model": "llama-3-8b"}
    )
    assert ttft.count == 1 and ttft.sum == reply
    assert ttft.sum < GAP <= duration.sum
    tpot = _point(metrics[gm.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN], **common)
    assert tpot.sum == pytest.approx((duration.sum - ttft.sum) / 2)
    usage = metrics[gm.GEN_AI_CLIENT_TOKEN_USAGE]
    assert _point(usage, **{ga.GEN_AI_TOKEN_TYPE: ga.GenAiTokenTypeValues.INPUT.value}).sum == 12
    assert _point(usage, **{ga.GEN_AI_TOKEN_TYPE: ga.GenAiTokenTypeValues.OUTPUT.value}).sum == 3
    # A failed operation: its duration with error.type, and no time to first token.
    failed = _point(metrics[gm.GEN_AI_SERVER_REQUEST_DURATION], **{ERROR_TYPE: "503"})
    assert failed.attributes[ga.GEN_AI_OPERATION_NAME] == "embeddings"
    assert [
        p.attributes[ga.GEN_AI_OPERATION_NAME] for p in metrics[gm.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN].data.data_points
    ] == ["chat"]


def test_wsgi_latest_experimental_app_named_operation(monkeypatch):
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http, gen_ai_latest_experimental")
    spans, reader, options = _observers()
    app = instrument(wsgi_app, "gw", **options)
    with serve_wsgi(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        response = client.post("/generate", json={"model": "qwen-7b"})
    app.instrumentation.shutdown()
    assert response.text == "firstrest"

    (span,) = spans.get_finished_spans()
    assert (
        dict(span.attributes).items()
        >= {
            ga.GEN_AI_OPERATION_NAME: "text_completion",
            ga.GEN_AI_PROVIDER_NAME: "vllm",  # latest: the new attribute, and not the old one
            ga.GEN_AI_REQUEST_MODEL: "qwen-7b",
            ga.GEN_AI_USAGE_INPUT_TOKENS: 7,  # from record_prefill / record_decode
            ga.GEN_AI_USAGE_OUTPUT_TOKENS: 5,
        }.items()
    )
    assert ga.GEN_AI_SYSTEM not in span.attributes
    assert ga.GEN_AI_RESPONSE_MODEL not in span.attributes and ga.GEN_AI_RESPONSE_FINISH_REASONS not in span.attributes
    assert isinstance(span.attributes[SERVER_PORT], int) and span.attributes[SERVER_ADDRESS]

    metrics = _histograms(reader)
    ttft = _point(metrics[gm.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN], **{ga.GEN_AI_PROVIDER_NAME: "vllm"})
    duration = _point(metrics[gm.GEN_AI_SERVER_REQUEST_DURATION], **{ga.GEN_AI_PROVIDER_NAME: "vllm"})
    assert ga.GEN_AI_SYSTEM not in duration.attributes
    assert ttft.sum < GAP <= duration.sum  # the first chunk, not the end of the stream
    assert _point(metrics[gm.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN]).sum == pytest.approx((duration.sum - ttft.sum) / 4)


@pytest.mark.parametrize(
    ("value", "latest"),
    [
        ("gen_ai_latest_experimental", True),
        ("http/dup , gen_ai_latest_experimental", True),
        ("gen_ai", False),
        ("", False),
    ],
)
def test_opt_in_is_read_as_contrib_reads_it(value, latest):
    assert latest_experimental(value) is latest


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: record_usage(input_tokens=-1), "input_tokens must be a non-negative integer"),
        (lambda: record_usage(output_tokens=1.5), "output_tokens must be a non-negative integer"),
        (lambda: record_usage(finish_reasons="stop"), "finish_reasons must be a sequence of strings"),
        (lambda: record_usage(response_model=3), "response_model must be a string"),
        (lambda: set_operation(""), "the operation must be a non-empty string"),
    ],
)
def test_bad_usage_is_one_line_error(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()
