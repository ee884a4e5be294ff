"""Every /metrics we serve passes `promtool check metrics`, and the OpenMetrics exposition carries
exemplars whose trace IDs are the requests' own."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from obsbox import conventions
from obsbox.exporters import InstrumentConfig
from obsbox.exporters.demo.gateway import GatewayConfig, build_gateway
from obsbox.exporters.demo.scenarios import scenario
from tests.exporters.servers import no_otlp, promtool_check_metrics, serve_asgi

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def chat(client: httpx.Client, stream: bool, model: str = "code-small") -> httpx.Response:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "complete this python loop #3"}]}
    response = client.post("/v1/chat/completions", json=body, headers={"X-Worker-Pool": "interactive"})
    assert response.status_code == 200, response.text
    return response


@pytest.fixture
def demo_gateway(tmp_path):
    """The demo gateway, instrumented, with simulated time shrunk tenfold; /metrics also on a port."""
    config = InstrumentConfig(registry=CollectorRegistry(), otel=no_otlp(), metrics_port=0)
    app = build_gateway(GatewayConfig(scenario=scenario("tuned"), time_scale=0.1, log_dir=tmp_path), config)
    with serve_asgi(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        requests = [(True, "code-small"), (False, "code-large"), (True, "not-a-demo-model")]
        traces = {chat(client, stream, model).headers["traceresponse"].split("-")[1] for stream, model in requests}
        yield app, client, traces
    app.instrumentation.shutdown()
    app.close()


def test_promtool_accepts_the_gateway_metrics(demo_gateway):
    app, client, _ = demo_gateway
    text = client.get("/metrics").content
    families = {f.name for f in text_families(text.decode())}
    for name in (
        conventions.REQUEST_DURATION,
        conventions.REPLY_LATENCY,
        conventions.STAGE_DURATION,
        conventions.DECODE_TOKENS_PER_SECOND,
        conventions.DECODE_WARMUP,
        conventions.GPU_MEMORY_UTILIZATION,
        conventions.REQUESTS_IN_FLIGHT,
    ):
        assert name in families, f"{name} missing from /metrics"
    result = promtool_check_metrics(text)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.strip() == b"", result.stdout.decode()  # no lint warning either
    on_port = httpx.get(f"http://127.0.0.1:{app.instrumentation.metrics_port}/metrics", timeout=10).content
    result = promtool_check_metrics(on_port)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"gateway_reply_latency_seconds_bucket" in on_port


def test_promtool_reports_a_broken_exposition():
    result = promtool_check_metrics(b"# TYPE x counter\nx{a=1} 1\n")
    assert result.returncode != 0


def test_openmetrics_exemplars_carry_the_request_trace_ids(demo_gateway):
    _, client, traces = demo_gateway
    response = client.get("/metrics", headers={"Accept": OPENMETRICS})
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    exemplars = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.exemplar is not None:
                exemplars.setdefault(family.name, set()).add(sample.exemplar.labels["trace_id"])
    for name in (conventions.REQUEST_DURATION, conventions.REPLY_LATENCY, conventions.STAGE_DURATION):
        assert exemplars.get(name), f"no exemplar on {name}"
        assert exemplars[name] <= traces, f"{name} has exemplars of traces we did not make"
    plain = client.get("/metrics").text  # without the Accept header: Prometheus text, no exemplars
    assert "trace_id" not in plain


def test_observe_counts_as_prometheus_client_counts():
    """GatewayMetrics.observe adds to a child's values itself when no exemplar is due: the samples
    are those prometheus-client's own observe gives, bounds, +Inf and NaN included."""
    from obsbox.exporters.instrumentation.gateway_metrics import GatewayMetrics  # noqa: PLC0415

    ours, theirs = GatewayMetrics(CollectorRegistry()), GatewayMetrics(CollectorRegistry())
    amounts = [0.0, 0.05, 0.1, 0.1000001, 0.3, 1.0, 2.5, 5.0, 7.0, -1.0, float("inf"), float("nan")]
    for amount in amounts:
        ours.observe(ours.request_duration, ("/r", "m", "200", "p"), amount, {"trace_id": "ab" * 16})
        ours.observe(ours.decode_warmup, (), amount, None)
        theirs.request_duration.labels("/r", "m", "200", "p").observe(amount)  # prometheus-client's own
        theirs.decode_warmup.observe(amount)

    def samples(m: GatewayMetrics) -> list[tuple[str, dict[str, str], float]]:
        return [
            (s.name, s.labels, s.value)
            for family in m.registry.collect()
            if family.name in (conventions.REQUEST_DURATION, conventions.DECODE_WARMUP)
            for s in family.samples
            if s.name.endswith(("_bucket", "_count"))
        ]

    assert samples(ours) == samples(theirs) and len(samples(ours)) == (6 + 2) + (8 + 2)  # buckets, +Inf, count
    exposition = generate_latest(ours.registry).decode()
    assert 'trace_id="' + "ab" * 16 in exposition  # an exemplar is kept when its bucket is due for one
