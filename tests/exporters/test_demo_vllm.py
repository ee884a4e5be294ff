"""The demo's simulated inference backend speaks vLLM: the same families, types, HELP, label names
and buckets as the real vLLM v0.33.0 exposition under tests/llm/expositions/, with values that
follow what the backend did."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from obsbox.exporters import InstrumentConfig
from obsbox.exporters.demo.gateway import GatewayConfig, build_gateway
from obsbox.exporters.demo.latency import LatencyModel
from obsbox.exporters.demo.scenarios import scenario
from obsbox.exporters.demo.server import metrics_app
from obsbox.exporters.demo.vllm_metrics import VllmMetrics
from tests.exporters.servers import no_otlp, serve_asgi

VLLM = Path(__file__).parents[1] / "llm" / "expositions" / "vllm.prom"


def shape(text: str) -> dict[str, tuple[str, str, frozenset[str], tuple[str, ...]]]:
    """Per family: type, HELP, label names, bucket bounds (as printed). The ``_created`` gauges that
    prometheus_client adds (and vLLM shows) are left out, as the stored exposition leaves them out."""
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):
            continue
        labels = frozenset(name for s in family.samples for name in s.labels if name != "le")
        bounds = tuple(dict.fromkeys(s.labels["le"] for s in family.samples if s.name.endswith("_bucket")))
        out[family.name] = (family.type, family.documentation, labels, bounds)
    return out


def values(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(found: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in found.items() if n == name and want <= lab)


def run(name: str, requests: int, latency: LatencyModel | None = None, **body: object) -> str:
    """``requests`` chat completions through the demo gateway (no simulated waiting); the backend's exposition."""
    config = GatewayConfig(scenario=scenario(name), time_scale=0.0, latency=latency or LatencyModel(), seed=3)
    app = build_gateway(config, InstrumentConfig(registry=CollectorRegistry(), otel=no_otlp()))
    with serve_asgi(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        for i in range(requests):
            content = f"explain this stack trace #{i % 7}"
            chat = {"model": "code-small", "messages": [{"role": "user", "content": content}], **body}
            client.post("/v1/chat/completions", json=chat)
    app.instrumentation.shutdown()
    return generate_latest(app.backend.registry).decode()


def test_the_backend_exposes_vllm_s_families_types_help_labels_and_buckets():
    ours = shape(run("untuned", 5))
    theirs = shape(VLLM.read_text(encoding="utf-8"))
    assert ours.keys() == theirs.keys(), ours.keys() ^ theirs.keys()
    for name, expected in theirs.items():
        assert ours[name] == expected, name


def test_every_value_follows_what_the_backend_did():
    found = values(run("untuned", 30, stream=True))
    served = total(found, "vllm:request_success_total", finished_reason="stop")
    served += total(found, "vllm:request_success_total", finished_reason="length")
    assert served == 30
    for histogram in ("time_to_first_token", "e2e_request_latency", "request_queue_time", "request_prefill_time"):
        assert total(found, f"vllm:{histogram}_seconds_count") == served, histogram
    assert total(found, "vllm:prompt_tokens_total") == total(found, "vllm:request_prompt_tokens_sum") > 30 * 100
    generated = total(found, "vllm:generation_tokens_total")
    assert generated == total(found, "vllm:request_generation_tokens_sum") >= 30 * 4
    assert total(found, "vllm:inter_token_latency_seconds_count") == generated - served  # every token but the first
    for gauge in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert total(found, f"vllm:{gauge}") == 0, f"{gauge}: nothing is in flight once every reply is read"
    assert total(found, "vllm:num_preemptions_total") == 0


def test_a_failed_request_finishes_as_abort_or_error_and_a_capped_reply_as_length():
    failing = LatencyModel(deadline_rate=0.3, oom_rate=0.3)
    found = values(run("untuned", 30, failing, max_tokens=4))
    reasons = {
        r: total(found, "vllm:request_success_total", finished_reason=r) for r in ("stop", "length", "abort", "error")
    }
    assert reasons["abort"] > 0 and reasons["error"] > 0, reasons  # the scheduler's deadline, the decoder's OOM
    assert reasons["length"] > 0 and reasons["stop"] == 0, reasons  # every reply reaches max_tokens
    assert sum(reasons.values()) == 30
    assert total(found, "vllm:time_to_first_token_seconds_count") == reasons["length"]


def test_the_tuned_scenario_shows_through_vllm_s_names():
    """Trimmed context: fewer prompt tokens; a warmed cache: prefix-cache hits where untuned has none."""
    untuned, tuned = values(run("untuned", 20)), values(run("tuned", 20))

    def per_request(found: dict) -> float:
        return total(found, "vllm:prompt_tokens_total") / total(found, "vllm:request_prompt_tokens_count")

    def hit_ratio(found: dict) -> float:
        return total(found, "vllm:prefix_cache_hits_total") / total(found, "vllm:prefix_cache_queries_total")

    assert per_request(tuned) < per_request(untuned) / 3
    assert hit_ratio(untuned) == 0
    assert hit_ratio(tuned) > 0.3


def test_the_names_keep_their_colon_whatever_format_the_scraper_asks_for():
    """Prometheus 2.42 asks for OpenMetrics first; prometheus_client 0.26 would then write vllm_... on
    the sample lines (client_python#1177), and no LLM rule would match."""
    backend = VllmMetrics(("code-small",), 1000)
    openmetrics = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    with serve_asgi(metrics_app(backend.registry)) as url:
        response = httpx.get(f"{url}/metrics", headers={"Accept": openmetrics}, timeout=10)
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = [line for line in response.text.splitlines() if line and not line.startswith("#")]
    assert samples and all(line.startswith("vllm:") for line in samples), samples[:3]
