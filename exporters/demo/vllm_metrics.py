"""The simulated inference backend's metrics, under vLLM's own names, so the demo feeds the same
recording rules (``obsbox llm rules``, ``source="vllm"``) as a real vLLM server would.

Names, types, HELP, label names and bucket layouts are vLLM v0.33.0's (V1 engine):
``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) and ``vllm/v1/metrics/buckets.py``, as
printed in ``tests/llm/expositions/vllm.prom``. Every value is observed from what the simulated
backend does (``pipeline.Pipeline``): a request *arrives* when it starts waiting for a GPU slot,
is *scheduled* when it gets one, prefills, decodes token by token and *finishes*; the intervals
are vLLM's (queue = arrival to scheduled, prefill = scheduled to first token, decode = first to
last token, inference = scheduled to last token, end-to-end = arrival to last token).

The registry is the backend's own, served on a port of its own (``--backend-metrics-port``),
apart from the gateway's ``/metrics``: in a real deployment they are two processes.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from obsbox.exporters.instrumentation.labels import OTHER

# vllm/v1/metrics/buckets.py at v0.33.0
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0)
REQUEST_LATENCY_BUCKETS += (40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TIME_TO_FIRST_TOKEN_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5)
TIME_TO_FIRST_TOKEN_BUCKETS += (0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_LATENCY_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)
INTER_TOKEN_LATENCY_BUCKETS += (0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # vllm/v1/engine/__init__.py
MAX_MODEL_LEN = 131072  # the token histograms' buckets run up to it (build_1_2_5_buckets)
ENGINE = "0"  # one engine (data-parallel rank 0)
LABELS = ("model_name", "engine")


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value``, as vLLM builds its token-count buckets."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(float(b) for b in buckets)
            buckets.append(value)
        exponent += 1


class VllmMetrics:
    """vLLM's metrics in a registry of their own, one per backend, called from one event loop.

    The simulated backend is one engine serving every model the gateway knows (``models``; any
    other is counted as ``other``): where a real deployment runs one vLLM per model, each with its
    own ``model_name``, here each model's series carry its own requests and KV cache."""

    def __init__(
        self, models: tuple[str, ...], kv_capacity_tokens: int, registry: CollectorRegistry | None = None
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.models = models
        self.kv_capacity = kv_capacity_tokens
        self.waiting: Tally[str] = Tally()
        self.running: Tally[str] = Tally()
        self.kv_tokens: Tally[str] = Tally()
        r = self.registry

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=r)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = LABELS) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        def counter(name: str, doc: str, labels: tuple[str, ...] = LABELS) -> Counter:
            return Counter(name, doc, labels, registry=r)

        self.num_requests_running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.num_requests_waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.num_requests_waiting_by_reason = gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
            "Sum of all reasons equals vllm:num_requests_waiting.",
            (*LABELS, "reason"),
        )
        self.kv_cache_usage_perc = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.num_preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.request_success = counter(
            "vllm:request_success", "Count of successfully processed requests.", (*LABELS, "finished_reason")
        )
        tokens = build_1_2_5_buckets(MAX_MODEL_LEN)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.time_to_first_token = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TIME_TO_FIRST_TOKEN_BUCKETS,
        )
        self.inter_token_latency = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            INTER_TOKEN_LATENCY_BUCKETS,
        )
        self.request_time_per_output_token = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            INTER_TOKEN_LATENCY_BUCKETS,
        )
        phases = {
            "e2e_request_latency": "Histogram of e2e request latency in seconds.",
            "request_queue_time": "Histogram of time spent in WAITING phase for request.",
            "request_inference_time": "Histogram of time spent in RUNNING phase for request.",
            "request_prefill_time": "Histogram of time spent in PREFILL phase for request.",
            "request_decode_time": "Histogram of time spent in DECODE phase for request.",
        }
        self.phases = {
            name: histogram(f"vllm:{name}_seconds", doc, REQUEST_LATENCY_BUCKETS) for name, doc in phases.items()
        }
        for model in models:
            self._serve(model)

    def _serve(self, model: str) -> None:
        """``model``'s series at zero before its first request, as vLLM shows its model's."""
        self.set_gauges(model)
        for reason in FINISH_REASONS:
            self.request_success.labels(model, ENGINE, reason)
        for metric in (
            self.prefix_cache_queries,
            self.prefix_cache_hits,
            self.num_preemptions,
            self.prompt_tokens,
            self.generation_tokens,
        ):
            metric.labels(model, ENGINE)

    def arrive(self, model: str) -> EngineRequest:
        """A request entering the scheduler's waiting queue; ``model`` as the client named it."""
        model = model if model in self.models else OTHER
        self.waiting[model] += 1
        self.set_gauges(model)
        return EngineRequest(self, model, time.perf_counter())

    def set_gauges(self, model: str) -> None:
        self.num_requests_waiting.labels(model, ENGINE).set(self.waiting[model])
        self.num_requests_waiting_by_reason.labels(model, ENGINE, "capacity").set(self.waiting[model])
        self.num_requests_waiting_by_reason.labels(model, ENGINE, "deferred").set(0)
        self.num_requests_running.labels(model, ENGINE).set(self.running[model])
        self.kv_cache_usage_perc.labels(model, ENGINE).set(min(1.0, self.kv_tokens[model] / self.kv_capacity))


@dataclass
class EngineRequest:
    """One request's way through the engine: ``schedule``, ``prefill``, ``hold_kv``, ``tokens`` (once
    per decode step), then ``finish``, which ends it whatever happened; only a complete reply
    (``stop``, ``length``) observes the per-request latencies and token histograms."""

    metrics: VllmMetrics
    model: str
    arrived: float
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    prompt_tokens: int = 0
    generated: int = 0
    kv_held: int = 0
    done: bool = False

    def schedule(self) -> None:
        """Out of the waiting queue, into the running batch."""
        m, model = self.metrics, self.model
        self.scheduled = time.perf_counter()
        m.waiting[model] -= 1
        m.running[model] += 1
        m.phases["request_queue_time"].labels(model, ENGINE).observe(self.scheduled - self.arrived)
        m.set_gauges(model)

    def prefill(self, prompt_tokens: int, cached_tokens: int) -> None:
        """The prompt was computed; ``cached_tokens`` of it came from the prefix cache."""
        m, labels = self.metrics, (self.model, ENGINE)
        self.prompt_tokens = prompt_tokens
        m.prompt_tokens.labels(*labels).inc(prompt_tokens)
        m.prefix_cache_queries.labels(*labels).inc(prompt_tokens)
        m.prefix_cache_hits.labels(*labels).inc(cached_tokens)

    def hold_kv(self, tokens: int) -> None:
        """The sequence's KV cache is allocated. Where it does not fit vLLM would preempt a sequence;
        the simulated engine counts the preemption and runs over capacity instead of recomputing."""
        m = self.metrics
        if sum(m.kv_tokens.values()) + tokens > m.kv_capacity:
            m.num_preemptions.labels(self.model, ENGINE).inc()
        self.kv_held = tokens
        m.kv_tokens[self.model] += tokens
        m.set_gauges(self.model)

    def tokens(self, count: int) -> None:
        """``count`` tokens came out of the decode steps that just ended: the first one is the first
        token (TTFT); each later one is an inter-token gap, the steps' time shared among them."""
        now = time.perf_counter()
        labels = (self.model, ENGINE)
        self.generated += count
        self.metrics.generation_tokens.labels(*labels).inc(count)
        if self.first_token is None:
            self.first_token = self.last_token = now
            self.metrics.time_to_first_token.labels(*labels).observe(now - self.arrived)
            count -= 1
        if count and self.last_token is not None:
            gap = (now - self.last_token) / count
            for _ in range(count):
                self.metrics.inter_token_latency.labels(*labels).observe(gap)
        self.last_token = now

    def finish(self, reason: str) -> None:
        """The request left the engine: ``stop``, ``length``, ``abort`` or ``error``; idempotent."""
        if self.done:
            return
        self.done = True
        m, model = self.metrics, self.model
        labels = (model, ENGINE)
        if self.scheduled is None:
            m.waiting[model] -= 1
        else:
            m.running[model] -= 1
        m.kv_tokens[model] -= self.kv_held
        m.set_gauges(model)
        m.request_success.labels(*labels, reason).inc()
        complete = reason in ("stop", "length")
        if not complete or self.scheduled is None or self.first_token is None or self.last_token is None:
            return
        end = self.last_token
        phases = m.phases
        phases["e2e_request_latency"].labels(*labels).observe(end - self.arrived)
        phases["request_inference_time"].labels(*labels).observe(end - self.scheduled)
        phases["request_prefill_time"].labels(*labels).observe(self.first_token - self.scheduled)
        phases["request_decode_time"].labels(*labels).observe(end - self.first_token)
        m.request_prompt_tokens.labels(*labels).observe(self.prompt_tokens)
        m.request_generation_tokens.labels(*labels).observe(self.generated)
        if self.generated > 1:
            m.request_time_per_output_token.labels(*labels).observe((end - self.first_token) / (self.generated - 1))
