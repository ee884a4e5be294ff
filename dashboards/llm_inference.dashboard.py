"""LLM serving: the latency breakdown, caches, tokens, load and GPUs of every serving stack, then the demo's own.

Every panel above the last row reads only the series `obsbox llm rules` records (obsbox:llm_*, labelled
source and model), so it shows vLLM, SGLang, TGI, LiteLLM, GenAI-over-OTLP, DCGM and the demo alike;
its description, generated from obsbox/llm/sources.yaml, says which sources lack its signal and why.
"""

from grafanalib import core as g

from obsbox import conventions as c
from obsbox.dashboards import llm_sources as s
from obsbox.dashboards import panels as p
from obsbox.dashboards import queries as q
from obsbox.llm import SIGNALS

LATENCY = {  # signal: (title, width), in the order a request meets them
    "ttft": ("Time to first token", 12),
    "e2e": ("End-to-end latency", 12),
    "queue": ("Queue wait", 8),
    "prefill": ("Prefill", 8),
    "decode": ("Decode", 8),
    "inter_token": ("Inter-token latency", 12),
    "gateway_overhead": ("Gateway overhead", 12),
}
SCALE_UP, SCALE_DOWN = c.GPU_SCALE_UP["gpu_memory_utilization"], c.GPU_SCALE_DOWN["gpu_memory_utilization"]


def recorded(title: str, lead: str, signals: dict[str, str], selector: str = q.LLM, **options) -> g.TimeSeries:
    """A panel of counter, gauge or ratio signals, each labelled in the legend (none for a single one);
    the description adds, per signal, the sources that record it and those that lack it."""
    one = len(signals) == 1
    about = " ".join(s.about(name, "" if one else label.capitalize()) for name, label in signals.items())
    queries = [q.llm_value(SIGNALS[name], "" if one else label, selector) for name, label in signals.items()]
    return p.timeseries(title, f"{lead} {about}", queries, **options)


grid = p.Grid()
grid.row("Latency breakdown, per source and model")
for signal, (title, width) in LATENCY.items():
    grid.add(
        p.timeseries(
            title,
            f"{SIGNALS[signal].help.capitalize()}: P50 and P95 from the recorded bucket rates (5m), and the mean. "
            + s.about(signal),
            q.LLM_LATENCY[signal],
            unit="s",
            thresholds=p.steps(),
        ),
        w=width,
    )

grid.row("Cache and tokens")
grid.add(
    recorded(
        "Cache hit ratio",
        "Share of the prefix (KV) cache lookups that hit, over 5m. A drop means prefill recomputes more of "
        "the context, and time to first token climbs.",
        {"cache_hit": "hit"},
        unit="percentunit",
        thresholds=p.steps(),
        bounds=(0, 1),
    ),
    w=8,
)
grid.add(
    recorded(
        "Token throughput",
        "Prompt (input) and generated (output) tokens per second, over 5m.",
        {"prompt_tokens": "prompt", "generation_tokens": "generated"},
        unit="short",
        thresholds=p.steps(),
    ),
    w=16,
)

grid.row("Load")
grid.add(
    recorded(
        "Requests and server errors",
        "Requests finished per second, and those that failed on the server's side (what the error SLOs "
        "count), over 5m.",
        {"requests": "finished", "errors": "failed"},
        unit="reqps",
        thresholds=p.steps(),
    ),
    w=8,
)
grid.add(
    recorded(
        "Requests running and waiting",
        "Requests being served, and requests queued before they run (the queue depth autoscaling reads).",
        {"requests_running": "running", "requests_waiting": "waiting"},
        unit="short",
        thresholds=p.steps(),
    ),
    w=8,
)
grid.add(
    recorded(
        "KV-cache usage",
        "Share of the KV cache in use. Near 1, new requests wait or running ones are preempted.",
        {"kv_cache_usage": "used"},
        unit="percentunit",
        thresholds=p.steps((0.9, "red")),
        lines=True,
        bounds=(0, 1),
    ),
    w=8,
)

grid.row("GPUs")
grid.add(
    recorded(
        "GPU utilisation",
        "Mean utilisation of the GPUs, per source (GPUs serve whichever model: the model variable does not "
        "filter this panel).",
        {"gpu_utilization": "utilisation"},
        q.LLM_SOURCE,
        unit="percentunit",
        thresholds=p.steps(),
        bounds=(0, 1),
    ),
)
grid.add(
    recorded(
        "GPU memory in use",
        f"Share of GPU memory in use, per source (not filtered by model). Lines at the autoscale thresholds: up "
        f"at {SCALE_UP:.0%}, down at {SCALE_DOWN:.0%}.",
        {"gpu_memory_usage": "memory"},
        q.LLM_SOURCE,
        unit="percentunit",
        thresholds=p.steps((SCALE_DOWN, "green"), (SCALE_UP, "red"), base="blue"),
        lines=True,
        bounds=(0, 1),
    ),
)

grid.row("Demo gateway only (its own gateway_* metrics, by service)")
grid.add(
    p.timeseries(
        "Prompt and intent-fingerprint cache hit rates",
        "The demo gateway's own caches: share of lookups that hit, per cache: the prompt LRU (exact prompt "
        "prefixes) and the intent fingerprint cache (semantically equal requests). A cold cache after a "
        "deploy shows here first.",
        [q.CACHE_HIT_RATIO],
        unit="percentunit",
        thresholds=p.steps((0.5, "yellow"), (0.8, "green"), base="red"),
        bounds=(0, 1),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Decoder warmup (first tokens)",
        "The demo gateway's latency of the first tokens of a reply, which decode slower than the rest while "
        "the batch warms up. P50 and P95.",
        list(q.DECODE_WARMUP_QUANTILE.values()),
        unit="s",
        thresholds=p.steps((0.25, "yellow"), (0.5, "red")),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Embedding batch stalls",
        "The demo gateway's embedding batches held back per second because the sequence lengths in the batch "
        "vary too much (padding waste). Sustained stalls mean the batcher should bucket by length.",
        [q.EMBEDDING_STALLS],
        unit="ops",
        thresholds=p.steps((0.5, "yellow"), (2.0, "red")),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Decode speed (P50 tokens per second)",
        "The demo gateway's median decode speed per request, by model. A drop with a flat request rate points "
        "at GPU contention.",
        [q.DECODE_TPS_P50],
        unit="short",
        thresholds=p.steps(),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Decode QPS",
        f"The demo gateway's decode operations per second, the seed's autoscale signal. Scale up above "
        f"{c.GPU_SCALE_UP['decode_qps']:g} (with GPU memory above {SCALE_UP:.0%}), scale down below "
        f"{c.GPU_SCALE_DOWN['decode_qps']:g} (with GPU memory below {SCALE_DOWN:.0%}), each held for "
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
        "Requests in flight per worker pool",
        "The demo gateway's requests being served right now, per worker pool (the X-Worker-Pool header).",
        [q.IN_FLIGHT],
        unit="short",
        thresholds=p.steps(),
    ),
    w=8,
)

dashboard = p.dashboard(
    uid="obsbox-llm-inference",
    title="obsbox / LLM serving",
    description="Every serving stack's latency breakdown, cache hits, tokens, requests, KV cache and GPUs from the "
    "obsbox:llm_* recorded series, with source and model variables; then the demo gateway's own caches, "
    "batching and autoscale signals.",
    grid=grid,
    variables=p.llm_variables(f"{c.REQUEST_DURATION}_count"),
    tags=["llm", "gateway"],
)
