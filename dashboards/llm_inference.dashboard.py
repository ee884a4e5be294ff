"""LLM inference: caches, prefill against decode, decoder warmup, batching stalls, and the GPU autoscale signals."""

from obsbox import conventions as c
from obsbox.dashboards import panels as p
from obsbox.dashboards import queries as q

KV_HIT_TARGET = 0.98  # a healthy KV cache
KV_HIT_FLOOR = 0.85  # below this, prefill dominates and latency climbs

grid = p.Grid()
grid.row("Caches")
grid.add(
    p.timeseries(
        "KV-cache hit rate",
        f"Share of KV-cache lookups that hit. Lines at {KV_HIT_TARGET:.0%} (healthy) and {KV_HIT_FLOOR:.0%} "
        "(below it, prefill recomputes most of the context and reply latency climbs).",
        [q.KV_HIT_RATIO],
        unit="percentunit",
        thresholds=p.steps((KV_HIT_FLOOR, "yellow"), (KV_HIT_TARGET, "green"), base="red"),
        lines=True,
        bounds=(0, 1),
    )
)
grid.add(
    p.timeseries(
        "Prompt and intent-fingerprint cache hit rates",
        "Share of lookups that hit, per cache: the prompt LRU (exact prompt prefixes) and the intent "
        "fingerprint cache (semantically equal requests). A cold cache after a deploy shows here first.",
        [q.CACHE_HIT_RATIO],
        unit="percentunit",
        thresholds=p.steps((0.5, "yellow"), (0.8, "green"), base="red"),
        bounds=(0, 1),
    )
)
grid.row("Prefill, decode and batching")
grid.add(
    p.timeseries(
        "Prefill against decode latency (P95)",
        "P95 of the prefill stage (reading the prompt into the KV cache) and of the decode stage "
        "(generating the reply), from the stage histogram. Prefill grows with context size and cache misses.",
        [q.PREFILL_DECODE_P95],
        unit="s",
        thresholds=p.steps((1.0, "yellow"), (2.5, "red")),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Decoder warmup (first tokens)",
        "Latency of the first tokens of a reply, which decode slower than the rest while the batch warms "
        "up. P50 and P95.",
        list(q.DECODE_WARMUP_QUANTILE.values()),
        unit="s",
        thresholds=p.steps((0.25, "yellow"), (0.5, "red")),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Embedding batch stalls",
        "Embedding batches held back per second because the sequence lengths in the batch vary too much "
        "(padding waste). Sustained stalls mean the batcher should bucket by length.",
        [q.EMBEDDING_STALLS],
        unit="ops",
        thresholds=p.steps((0.5, "yellow"), (2.0, "red")),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Token throughput",
        "Prefill and decode tokens per second, by model.",
        [q.PREFILL_TOKENS_RATE, q.DECODE_TOKENS_RATE],
        unit="short",
        thresholds=p.steps(),
    ),
    w=12,
)
grid.add(
    p.timeseries(
        "Decode speed (P50 tokens per second)",
        "Median decode speed per request, by model. A drop with a flat request rate points at GPU contention.",
        [q.DECODE_TPS_P50],
        unit="short",
        thresholds=p.steps(),
    ),
    w=12,
)
grid.row("Autoscaling signals")
grid.add(
    p.timeseries(
        "Decode QPS",
        f"Decode operations per second. Scale up above {c.GPU_SCALE_UP['decode_qps']:g} (with GPU memory above "
        f"{c.GPU_SCALE_UP['gpu_memory_utilization']:.0%}), scale down below {c.GPU_SCALE_DOWN['decode_qps']:g} "
        f"(with GPU memory below {c.GPU_SCALE_DOWN['gpu_memory_utilization']:.0%}), each held for "
        f"{c.GPU_SCALE_HOLD_SECONDS} s.",
        [q.DECODE_QPS],
        unit="reqps",
        thresholds=p.steps(
            (c.GPU_SCALE_DOWN["decode_qps"], "green"), (c.GPU_SCALE_UP["decode_qps"], "red"), base="blue"
        ),
        lines=True,
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "GPU memory utilization",
        f"Memory used per GPU. Lines at the autoscale thresholds: up at "
        f"{c.GPU_SCALE_UP['gpu_memory_utilization']:.0%}, down at {c.GPU_SCALE_DOWN['gpu_memory_utilization']:.0%}.",
        [q.GPU_MEMORY],
        unit="percentunit",
        thresholds=p.steps(
            (c.GPU_SCALE_DOWN["gpu_memory_utilization"], "green"),
            (c.GPU_SCALE_UP["gpu_memory_utilization"], "red"),
            base="blue",
        ),
        lines=True,
        bounds=(0, 1),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Requests in flight",
        "Requests being served right now, per worker pool (the X-Worker-Pool header).",
        [q.IN_FLIGHT],
        unit="short",
        thresholds=p.steps(),
    ),
    w=8,
)

dashboard = p.dashboard(
    uid="obsbox-llm-inference",
    title="obsbox / LLM inference",
    description="KV and prompt caches, prefill against decode, decoder warmup, batch stalls, GPU autoscale signals.",
    grid=grid,
    variables=p.standard_variables(f"{c.REQUEST_DURATION}_count"),
    tags=["llm", "gateway"],
)
