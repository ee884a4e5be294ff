"""The gateway's Prometheus instruments (prometheus-client), in a registry of their own.

Names, buckets and labels come from ``obsbox.conventions``. Histograms take an exemplar with the
request's ``trace_id``, so Grafana can jump from a slow bucket to its trace (OpenMetrics only).
Label children are cached: ``labels()`` validates and locks, which matters at thousands of req/s.

A histogram bucket keeps only its latest exemplar, so attaching one to every observation is work
thrown away: ``observe`` attaches at most one per bucket and label set every ``exemplar_interval``
seconds (shorter than any scrape interval), which is what a scraper would have seen anyway.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from obsbox import conventions as c
from obsbox.exporters.instrumentation.span_batcher import REASONS as SPAN_DROP_REASONS

# an exemplar's labels, or a function that makes them (None: no exemplar, e.g. an unsampled span)
Exemplar = dict[str, str] | Callable[[], dict[str, str] | None] | None

STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
TOKENS_PER_SECOND_BUCKETS = (5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0)
WARMUP_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class GatewayMetrics:
    """One set of gateway instruments. ``gpu_gauge=False`` when a real GPU exporter (NVML) owns
    ``gateway_gpu_memory_utilization_ratio`` in the same registry."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, gpu_gauge: bool = True, exemplar_interval: float = 0.5
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.request_duration = Histogram(
            c.REQUEST_DURATION,
            "Time from the request's arrival to the last byte of its response.",
            ["route", "model", "status_code", "worker_pool"],
            buckets=c.REQUEST_BUCKETS,
            registry=r,
        )
        self.reply_latency = Histogram(
            c.REPLY_LATENCY,
            "Time to the first byte of the (streamed) reply: the ReplyLatency SLI.",
            ["route", "model"],
            buckets=c.REPLY_BUCKETS,
            registry=r,
        )
        self.stage_duration = Histogram(
            c.STAGE_DURATION, "Time spent in one stage of a request.", ["stage"], buckets=STAGE_BUCKETS, registry=r
        )
        self.cache_requests = Counter(
            c.CACHE_REQUESTS, "Cache lookups by cache and result (hit or miss).", ["cache", "result"], registry=r
        )
        self.prefill_tokens = Counter(c.PREFILL_TOKENS, "Prompt tokens prefilled.", ["model"], registry=r)
        self.decode_tokens = Counter(c.DECODE_TOKENS, "Tokens decoded.", ["model"], registry=r)
        self.decode_tokens_per_second = Histogram(
            c.DECODE_TOKENS_PER_SECOND,
            "Decode speed of one reply, in tokens per second.",
            ["model"],
            buckets=TOKENS_PER_SECOND_BUCKETS,
            registry=r,
        )
        self.decode_warmup = Histogram(
            c.DECODE_WARMUP, "Time to decode the first (slower) tokens of a reply.", buckets=WARMUP_BUCKETS, registry=r
        )
        self.embedding_batch_stalls = Counter(
            c.EMBEDDING_BATCH_STALLS, "Embedding batches stalled by uneven sequence lengths.", registry=r
        )
        self.in_flight = Gauge(c.REQUESTS_IN_FLIGHT, "Requests being served.", ["worker_pool"], registry=r)
        self.gpu_memory = (
            Gauge(c.GPU_MEMORY_UTILIZATION, "GPU memory in use, as a ratio of the total.", ["gpu"], registry=r)
            if gpu_gauge
            else None
        )
        self.spans_dropped = Counter(
            c.INSTRUMENTATION_SPANS_DROPPED,
            "Spans ended but not delivered, by reason (queue_full: a burst the exporter could not keep up with).",
            ["reason"],
            registry=r,
        )
        for reason in SPAN_DROP_REASONS:  # every reason present from the start, at 0
            self.spans_dropped.labels(reason)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.exemplar_interval = exemplar_interval
        self._observed: dict[tuple[int, tuple[str, ...]], tuple[Any, tuple[float, ...], list[float], Any]] = {}
        self._bounds = {
            id(self.request_duration): c.REQUEST_BUCKETS,
            id(self.reply_latency): c.REPLY_BUCKETS,
            id(self.stage_duration): STAGE_BUCKETS,
            id(self.decode_tokens_per_second): TOKENS_PER_SECOND_BUCKETS,
            id(self.decode_warmup): WARMUP_BUCKETS,
        }

    def span_dropped(self, reason: str, count: int) -> None:
        """``SpanBatcher``'s ``on_drop``: ``count`` spans given up on for ``reason``."""
        self.child(self.spans_dropped, reason).inc(count)

    def child(self, metric: Histogram | Counter | Gauge, *values: str) -> Any:
        """``metric.labels(*values)``, cached."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def observe(self, metric: Histogram, values: tuple[str, ...], amount: float, exemplar: Exemplar) -> None:
        """``metric.labels(*values).observe(amount, exemplar)``, the exemplar kept only when its
        bucket has had none for ``exemplar_interval`` seconds. ``exemplar`` may be a function that
        makes it (or returns None), called only then."""
        key = (id(metric), values)
        entry = self._observed.get(key)
        if entry is None:  # the child, its bucket bounds, when each bucket last took an exemplar, its values
            bounds = self._bounds[id(metric)]
            child = self.child(metric, *values) if values else metric
            entry = self._observed[key] = (child, bounds, [-math.inf] * (len(bounds) + 1), _values_of(child, bounds))
        child, bounds, exemplar_at, direct = entry
        bucket = bisect.bisect_left(bounds, amount)
        if exemplar is not None:
            now = time.monotonic()
            if now - exemplar_at[bucket] < self.exemplar_interval:
                exemplar = None
            else:
                exemplar_at[bucket] = now
                if callable(exemplar):
                    exemplar = exemplar()
        if direct is not None and exemplar is None and not math.isnan(amount):  # see _values_of
            direct[0].inc(amount)
            direct[1][bucket].inc(1)
        else:
            child.observe(amount, exemplar)


def _values_of(child: Any, bounds: tuple[float, ...]) -> tuple[Any, list[Any]] | None:
    """A histogram child's sum and bucket values, when prometheus-client keeps them as this module
    knows it does (``_sum``, and ``_buckets`` one per bound and +Inf): ``observe`` then adds to them
    itself, which is what the child's own ``observe`` does without an exemplar, less its
    observability check and its loop over the bounds (a third of its cost). A NaN, which that loop
    puts in no bucket, is still left to the child."""
    total, buckets = getattr(child, "_sum", None), getattr(child, "_buckets", None)
    upper = getattr(child, "_upper_bounds", None)
    if total is None or not isinstance(buckets, list) or upper != [*bounds, math.inf] or len(buckets) != len(upper):
        return None
    return total, buckets
