"""obsbox's breakdown of LLM serving: its signals (TTFT, queue, prefill, decode, ...) and the series each
is recorded as (``obsbox:llm_<stage>_seconds_...``).

Core data that both ``obsbox.slo`` (stage budgets read the latency signals' recorded series) and
``obsbox.llm`` (which maps each serving stack's metrics onto these signals) import, so that neither
package has to load the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["histogram", "counter", "gauge", "ratio"]


@dataclass(frozen=True)
class Signal:
    """One signal of the breakdown and the series it is recorded as (with ``source`` and ``model``)."""

    name: str
    kind: Kind
    metric: str  # the recorded name's metric part: obsbox:<metric>[...]:<operation>
    help: str
    aggregate: Literal["sum", "avg"] = "sum"  # gauges: over engines and targets
    counters: bool = False  # ratios: of counter rates (True) or of gauges
    operation: str = ""  # the recorded name's last part, when not the kind's default

    @property
    def records(self) -> tuple[str, ...]:
        """The recorded series' names, for the docs and the tests."""
        if self.kind == "histogram":
            return (*(f"obsbox:{self.metric}_{part}:rate5m" for part in ("bucket", "count", "sum")), self.mean)
        operation = self.operation or {"counter": "rate5m", "gauge": self.aggregate, "ratio": "ratio"}[self.kind]
        return (f"obsbox:{self.metric}:{operation}",)

    @property
    def mean(self) -> str:
        return f"obsbox:{self.metric}:mean5m"


def _latency(name: str, metric: str, help: str) -> Signal:
    return Signal(name, "histogram", f"llm_{metric}_seconds", help)


SIGNALS = {
    s.name: s
    for s in (
        _latency("ttft", "ttft", "time to first token"),
        _latency("queue", "queue", "time waiting in the queue or the scheduler before running"),
        _latency("prefill", "prefill", "time in prefill (the prompt's forward pass)"),
        _latency("decode", "decode", "time in decode (generating the output tokens)"),
        _latency("inter_token", "inter_token", "time between two output tokens"),
        _latency("e2e", "e2e", "end-to-end request latency"),
        _latency("gateway_overhead", "gateway_overhead", "the gateway's own time, upstream call excluded"),
        Signal("cache_hit", "ratio", "llm_cache_hit", "prefix (KV) cache hit ratio, 0..1", counters=True),
        Signal("requests", "counter", "llm_requests", "requests finished per second, whatever their outcome"),
        Signal("errors", "counter", "llm_request_errors", "requests per second that failed on the server's side"),
        Signal("prompt_tokens", "counter", "llm_prompt_tokens", "prompt (input) tokens per second"),
        Signal("generation_tokens", "counter", "llm_generation_tokens", "generated (output) tokens per second"),
        Signal("requests_running", "gauge", "llm_requests_running", "requests being served"),
        Signal("requests_waiting", "gauge", "llm_requests_waiting", "requests queued, not yet running"),
        Signal("kv_cache_usage", "gauge", "llm_kv_cache_usage", "KV-cache usage, 0..1", "avg", operation="ratio"),
        Signal("gpu_utilization", "gauge", "llm_gpu_utilization", "GPU utilisation, 0..1", "avg", operation="ratio"),
        Signal("gpu_memory_usage", "ratio", "llm_gpu_memory_usage", "GPU memory in use, 0..1"),
    )
}
