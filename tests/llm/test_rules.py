"""The LLM recording rules under ``promtool test rules``, fed each server's exposition.

Every sample of an exposition becomes an input series: a counter (or histogram part) rising
linearly from 0 to its value over ten minutes, a gauge held at its value. At minute 10 the rates
over 5m are a tenth of a minute's share of the totals, so means, quantiles and ratios equal those of
the exposition. The expected values are computed here from the exposition's text alone.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.parser import text_string_to_metric_families

from obsbox import llm
from obsbox.llm.spec import SIGNALS
from obsbox.slo.selectors import quote
from tests.llm.otlp_names import WITHOUT_SUFFIXES, OtelMetric, label_name, metric_name
from tests.slo.scenarios import promtool, run_rule_tests

EXPOSITIONS = Path(__file__).parent / "expositions"
MINUTES = 10
SECONDS = MINUTES * 60
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# What Prometheus 2.x asks for (scrapeAcceptHeader, scrape/scrape.go)
PROMETHEUS_2_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
FIXTURES = {
    "vllm.prom": "vllm",
    "vllm-v0.prom": "vllm",
    "sglang.prom": "sglang",
    "tgi.prom": "tgi",
    "litellm.prom": "litellm",
    "litellm-proxy-run.prom": "litellm",
    "genai-otlp.prom": "genai",
    "genai-otlp-without-suffixes.prom": "genai",
    "dcgm.prom": "dcgm",
}
NOT_IN_FIXTURE = {
    ("litellm.prom", "requests_running"),  # litellm_in_flight_requests comes from a middleware the fixture leaves out
    ("vllm-v0.prom", "cache_hit"),  # the V0 engine has no prefix-cache counters
    ("vllm-v0.prom", "errors"),  # the V0 engine has no finished_reason="error"
}
# vLLM's renames (loggers.py at 0.10.2 and 0.11.0 expose both names; the old ones are gone by 0.12.0)
VLLM_RENAMES = {
    "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries_total": "vllm:gpu_prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
}
_SAMPLE = re.compile(r"([^{\s]+)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def text(name: str) -> str:
    return (EXPOSITIONS / name).read_text(encoding="utf-8")


def samples(exposition: str) -> list[tuple[str, dict[str, str], float, str]]:
    """(name, labels, value, type of its family) of every sample."""
    types: dict[str, str] = {}
    out = []
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            types[family] = kind
        elif line.strip() and not line.startswith("#"):
            match = _SAMPLE.fullmatch(line.strip())
            assert match, line
            name, body, value = match.groups()
            family = max((f for f in types if name.startswith(f)), key=len)
            out.append((name, dict(_LABEL.findall(body or "")), float(value), types[family]))
    return out


def input_series(exposition: str, instance: str) -> list[dict[str, str]]:
    out = []
    for name, own, value, kind in samples(exposition):
        labels = {"job": "llm", "instance": instance, **own}
        series = name + "{" + ",".join(f"{k}={quote(v)}" for k, v in labels.items()) + "}"
        rising = kind in ("counter", "histogram")
        if rising:
            values = f"0+{value / MINUTES!r}x{MINUTES}"
        elif math.isinf(value):  # LiteLLM's unlimited budgets; "Infx10" would read as a name
            values = " ".join(["+Inf" if value > 0 else "-Inf"] * (MINUTES + 1))
        else:
            values = f"{value!r}x{MINUTES}"
        out.append({"series": series, "values": values})
    return out


def total(exposition: str, name: str, **match: str) -> float:
    return sum(v for n, labels, v, _ in samples(exposition) if n == name and match.items() <= labels.items())


def quantile(exposition: str, metric: str, q: float) -> float:
    """histogram_quantile's answer from the cumulative buckets: linear within the bucket, the lowest from 0."""
    buckets: dict[float, float] = {}
    for name, labels, value, _ in samples(exposition):
        if name == f"{metric}_bucket":
            le = float(labels["le"])
            buckets[le] = buckets.get(le, 0.0) + value
    bounds = sorted(buckets)
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            return lower + (bound - lower) * (rank - below) / (buckets[bound] - below)
        lower, below = bound, buckets[bound]
    raise AssertionError("rank beyond +Inf")


def near(expr: str, value: float, **labels: str) -> dict:
    """A promql_expr_test: ``expr`` has one series, with ``labels``, within 1e-6 (relative) of ``value``."""
    tolerance = f"{abs(value) * 1e-6 + 1e-12:.6g}"
    body = ",".join(f"{k}={quote(v)}" for k, v in sorted(labels.items()))
    return {
        "expr": f"abs(({expr}) - {value!r}) <= bool {tolerance}",
        "eval_time": f"{MINUTES}m",
        "exp_samples": [{"labels": "{" + body + "}", "value": 1}],
    }


def absent(expr: str) -> dict:
    return {"expr": expr, "eval_time": f"{MINUTES}m", "exp_samples": []}


def case(name: str, exposition: str, checks: list[dict]) -> dict:
    return {"name": name, "interval": "1m", "input_series": input_series(exposition, name), "promql_expr_test": checks}


def renamed(exposition: str, keep_new: bool) -> str:
    """vLLM's V1 exposition as 0.10/0.11 print it (old and new names) or as before (old names only)."""
    lines = []
    for line in exposition.splitlines():
        name = line.split()[2] if line.startswith("# ") else re.split(r"[{\s]", line, maxsplit=1)[0]
        new = next((n for n in VLLM_RENAMES if name.startswith(n)), None)
        if new is None:
            lines.append(line)
            continue
        if keep_new:
            lines.append(line)
        lines.append(line.replace(new, VLLM_RENAMES[new]))
    return "\n".join(lines) + "\n"


def genai_counters_only() -> str:
    """GenAI's exposition under UnderscoreEscapingWithoutSuffixes as an instrumentation that sends the
    token counters of semantic-conventions-genai and no token.usage histogram would leave it: the
    counters (no _total in that strategy) hold the histogram's sums, with the model label only."""
    exposition = text("genai-otlp-without-suffixes.prom")
    usage = metric_name(OtelMetric("gen_ai.client.token.usage", "{token}", "histogram"), WITHOUT_SUFFIXES)
    model, kind = (label_name(a, WITHOUT_SUFFIXES) for a in ("gen_ai.request.model", "gen_ai.token.type"))
    lines = [line for line in exposition.splitlines() if usage not in line]
    for token in ("input", "output"):
        counter = OtelMetric(f"gen_ai.client.inference.usage.{token}_tokens", "{token}", "counter")
        name = metric_name(counter, WITHOUT_SUFFIXES)
        lines += [
            f"# TYPE {name} counter",
            f"{name}{{{model}={quote(MODEL)}}} {total(exposition, usage + '_sum', **{kind: token})!r}",
        ]
    return "\n".join(lines) + "\n"


def rules_text() -> str:
    return llm.generate(llm.DEFAULT_SOURCES)


# (fixture, source, model, requests, errors): counted by hand from each exposition's samples
REQUESTS_AND_ERRORS = [
    ("vllm.prom", "vllm", MODEL, 1194, 0),  # finished_reason="error" is 0; abort is the client's
    ("sglang.prom", "sglang", MODEL, 1200, 0),
    ("tgi.prom", "tgi", None, 1205, 2),  # the 3 rejected (err="validation") are the client's
    ("litellm.prom", "litellm", "llama-3.1-8b", 1206, 6),
    ("genai-otlp.prom", "genai", MODEL, 1203, 3),  # the server's requests; 3 with error_type
    ("genai-otlp-without-suffixes.prom", "genai", MODEL, 1203, 3),  # the same, without _seconds
]


def test_every_mapped_signal_is_recorded_for_its_source_only(tmp_path):
    """Each exposition yields a series for each signal its source maps, and none for other sources; the
    requests finished, and those the server failed, per second over 5m and per model, are its own."""
    sources = {s.name: s for s in llm.load()}
    counts = {fixture: rest for fixture, *rest in REQUESTS_AND_ERRORS}
    tests = []
    for fixture, source in FIXTURES.items():
        checks = [absent(f'group by (source) ({{__name__=~"obsbox:llm_.+",source!="{source}"}})')]
        for signal in sources[source].signals:
            if (fixture, signal) not in NOT_IN_FIXTURE:
                checks += [
                    near(f'group by (source) ({r}{{source="{source}"}})', 1, source=source)
                    for r in SIGNALS[signal].records
                ]
        if fixture in counts:
            _, model, requests, errors = counts[fixture]
            labels = {"source": source, **({"model": model} if model else {})}
            checks += [
                near(f'obsbox:llm_requests:rate5m{{source="{source}"}}', requests / SECONDS, **labels),
                near(f'obsbox:llm_request_errors:rate5m{{source="{source}"}}', errors / SECONDS, **labels),
            ]
        tests.append(case(fixture, text(fixture), checks))
    run_rule_tests(tmp_path, rules_text(), tests)


def test_vllm_values(tmp_path):
    """TTFT P95 from vLLM's own buckets, the prefix-cache hit ratio from its counters, means, gauges."""
    v1 = text("vllm.prom")
    model = {"source": "vllm", "model": MODEL}
    checks = [
        near(
            'histogram_quantile(0.95, obsbox:llm_ttft_seconds_bucket:rate5m{source="vllm"})',
            quantile(v1, "vllm:time_to_first_token_seconds", 0.95),
            **model,
        ),
        near('obsbox:llm_cache_hit:ratio{source="vllm"}', 382500 / 1.02e6, **model),
        near(
            'obsbox:llm_queue_seconds:mean5m{source="vllm"}',
            total(v1, "vllm:request_queue_time_seconds_sum") / total(v1, "vllm:request_queue_time_seconds_count"),
            **model,
        ),
        near(
            'obsbox:llm_prompt_tokens:rate5m{source="vllm"}', total(v1, "vllm:prompt_tokens_total") / SECONDS, **model
        ),
        near('obsbox:llm_kv_cache_usage:ratio{source="vllm"}', 0.4375, **model),
        near('obsbox:llm_requests_waiting:sum{source="vllm"}', 3, **model),
    ]
    run_rule_tests(tmp_path, rules_text(), [case("vllm", v1, checks)])


@pytest.mark.parametrize("release", ["0.10-both-names", "0.9-old-names", "v0-engine"])
def test_vllm_renamed_metrics_count_once(tmp_path, release):
    """vLLM 0.10 and 0.11 expose each renamed metric under both names: the rules count it once; the old
    names alone (before 0.10, and the V0 engine's time_per_output_token beside inter_token_latency) work."""
    v1 = text("vllm.prom")
    exposition = {
        "0.10-both-names": renamed(v1, keep_new=True),
        "0.9-old-names": renamed(v1, keep_new=False),
        "v0-engine": text("vllm-v0.prom"),
    }[release]
    itl = "vllm:inter_token_latency_seconds" if release != "0.9-old-names" else "vllm:time_per_output_token_seconds"
    model = {"source": "vllm", "model": MODEL}
    checks = [
        near(
            'obsbox:llm_inter_token_seconds_count:rate5m{source="vllm"}',
            total(exposition, f"{itl}_count") / SECONDS,
            **model,
        ),
        near(
            'histogram_quantile(0.5, obsbox:llm_inter_token_seconds_bucket:rate5m{source="vllm"})',
            quantile(exposition, itl, 0.5),
            **model,
        ),
    ]
    if release != "v0-engine":
        checks += [
            near('obsbox:llm_cache_hit:ratio{source="vllm"}', 0.375, **model),
            near('obsbox:llm_kv_cache_usage:ratio{source="vllm"}', 0.4375, **model),
            near(
                "sum(rate(vllm:prefix_cache_hits_total[5m]) or rate(vllm:gpu_prefix_cache_hits_total[5m]))",
                382500 / SECONDS,
            ),
        ]
    assert total(exposition, f"{itl}_count") == (56400 if release == "v0-engine" else 56118)
    run_rule_tests(tmp_path, rules_text(), [case(release, exposition, checks)])


def test_vllm_as_prometheus_2_stores_it_from_prometheus_client_counts_the_same(tmp_path):
    """vLLM's exposition as prometheus_client itself serves it to Prometheus 2.x, whose Accept header asks
    for OpenMetrics without an escaping parameter: the sample lines read vllm_..., not vllm:...
    (prometheus/client_python#1177). The rules find those names and count them as the colon ones."""
    v1 = text("vllm.prom")

    class Exposition:
        def collect(self):
            return list(text_string_to_metric_families(v1))

    registry = CollectorRegistry()
    registry.register(Exposition())
    encode, content_type = choose_encoder(PROMETHEUS_2_ACCEPT)
    assert "escaping=underscores" in content_type, content_type
    served = encode(registry).decode()
    assert "vllm_time_to_first_token_seconds_bucket{" in served and "\nvllm:" not in served
    # samples() reads each sample's family from # TYPE, which keeps the colon (the bug): read it escaped
    stored = re.sub(r"^(# (?:TYPE|HELP) )vllm:", r"\1vllm_", served, flags=re.M)
    model = {"source": "vllm", "model": MODEL}
    checks = [
        near(
            'histogram_quantile(0.95, obsbox:llm_ttft_seconds_bucket:rate5m{source="vllm"})',
            quantile(v1, "vllm:time_to_first_token_seconds", 0.95),
            **model,
        ),
        near('obsbox:llm_cache_hit:ratio{source="vllm"}', 382500 / 1.02e6, **model),
        near('obsbox:llm_kv_cache_usage:ratio{source="vllm"}', 0.4375, **model),
        near(
            'obsbox:llm_inter_token_seconds_count:rate5m{source="vllm"}',
            total(v1, "vllm:inter_token_latency_seconds_count") / SECONDS,
            **model,
        ),
    ]
    run_rule_tests(tmp_path, rules_text(), [case("prometheus-2-scrape", stored, checks)])


def test_other_sources_values(tmp_path):
    """One value per source, each in seconds or 0..1, each with its model label renamed to model."""
    sg, tgi, lite, genai, dcgm = (
        text(f) for f in ("sglang.prom", "tgi.prom", "litellm.prom", "genai-otlp.prom", "dcgm.prom")
    )
    sglang = {"source": "sglang", "model": MODEL}
    tests = [
        case(
            "sglang",
            sg,
            [
                near('obsbox:llm_cache_hit:ratio{source="sglang"}', total(sg, "sglang:cache_hit_rate"), **sglang),
                near(
                    'obsbox:llm_ttft_seconds:mean5m{source="sglang"}',
                    total(sg, "sglang:time_to_first_token_seconds_sum")
                    / total(sg, "sglang:time_to_first_token_seconds_count"),
                    **sglang,
                ),
                near('obsbox:llm_requests_waiting:sum{source="sglang"}', total(sg, "sglang:num_queue_reqs"), **sglang),
            ],
        ),
        case(
            "tgi",
            tgi,
            [
                absent('obsbox:llm_ttft_seconds_count:rate5m{source="tgi"}'),  # TGI has no TTFT
                near(
                    'obsbox:llm_e2e_seconds:mean5m{source="tgi"}',
                    total(tgi, "tgi_request_duration_sum") / 1200,
                    source="tgi",
                ),
                near('obsbox:llm_prefill_seconds_count:rate5m{source="tgi"}', 410 / SECONDS, source="tgi"),
                near(
                    'obsbox:llm_prompt_tokens:rate5m{source="tgi"}',
                    total(tgi, "tgi_request_input_length_sum") / SECONDS,
                    source="tgi",
                ),
            ],
        ),
        case(
            "litellm",
            lite,
            [
                # seconds, although litellm_overhead_latency_metric's HELP says milliseconds
                near(
                    'obsbox:llm_gateway_overhead_seconds:mean5m{source="litellm"}',
                    7.2 / 1200,
                    source="litellm",
                    model="llama-3.1-8b",
                ),
                near(
                    'obsbox:llm_queue_seconds:mean5m{source="litellm"}',
                    2.4 / 1200,
                    source="litellm",
                    model="llama-3.1-8b",
                ),
                near(
                    'obsbox:llm_generation_tokens:rate5m{source="litellm"}',
                    total(lite, "litellm_output_tokens_metric_total") / SECONDS,
                    source="litellm",
                    model="llama-3.1-8b",
                ),
            ],
        ),
        case(
            "genai",
            genai,
            [
                # the server's TTFT (252 s over 1200), not the client's time to first chunk (192.6 s over 900)
                near('obsbox:llm_ttft_seconds:mean5m{source="genai"}', 252 / 1200, source="genai", model=MODEL),
                near('obsbox:llm_prompt_tokens:rate5m{source="genai"}', 1020000 / SECONDS, source="genai", model=MODEL),
            ],
        ),
        case(
            "genai-counters-only",
            genai_counters_only(),
            [
                # the counters without _total, the only token series left
                near('obsbox:llm_prompt_tokens:rate5m{source="genai"}', 1020000 / SECONDS, source="genai", model=MODEL),
                near(
                    'obsbox:llm_generation_tokens:rate5m{source="genai"}',
                    total(genai, "gen_ai_client_token_usage_sum", gen_ai_token_type="output") / SECONDS,
                    source="genai",
                    model=MODEL,
                ),
            ],
        ),
        case(
            "dcgm",
            dcgm,
            [
                near(
                    'obsbox:llm_gpu_utilization:ratio{source="dcgm"}',
                    total(dcgm, "DCGM_FI_DEV_GPU_UTIL") / 2 / 100,
                    source="dcgm",
                ),
                near(
                    'obsbox:llm_gpu_memory_usage:ratio{source="dcgm"}',
                    total(dcgm, "DCGM_FI_DEV_FB_USED")
                    / sum(total(dcgm, f"DCGM_FI_DEV_FB_{part}") for part in ("USED", "FREE", "RESERVED")),
                    source="dcgm",
                ),
            ],
        ),
    ]
    run_rule_tests(tmp_path, rules_text(), tests)


def test_bucket_layouts_are_the_expositions(tmp_path):
    """Each latency signal's buckets are the le bounds its source printed (the first name it maps)."""
    sources = {s.name: s for s in llm.load()}
    checked = 0
    for fixture, name in FIXTURES.items():
        exposition = text(fixture)
        for signal, mapping in sources[name].signals.items():
            if SIGNALS[signal].kind != "histogram" or mapping.buckets is None:
                continue
            printed = {n for n, _, _, _ in samples(exposition)}
            metric = next((s.metric for s in mapping.selectors("metric") if f"{s.metric}_bucket" in printed), "")
            found = sorted(
                {
                    float(labels["le"])
                    for n, labels, _, _ in samples(exposition)
                    if n == f"{metric}_bucket" and labels["le"] != "+Inf"
                }
            )
            if found:
                assert found == mapping.buckets, (fixture, signal)
                checked += 1
    assert checked >= 15


def test_litellm_proxy_run_values(tmp_path):
    """The scrape of a running LiteLLM proxy (1.108.7): its overhead is in seconds, its TTFT holds the
    upstream's 0.12 s before the first chunk, its queue time is per requested model, and the in-flight
    gauge (no model label) counts the scrape itself."""
    run = text("litellm-proxy-run.prom")
    upstream = {"model_group": "llama-3.1-8b-upstream"}

    def mean(metric: str, **match: str) -> float:
        return total(run, f"{metric}_sum", **match) / total(run, f"{metric}_count", **match)

    overhead = mean("litellm_overhead_latency_metric", **upstream)
    assert 0.001 < overhead < 0.5, overhead  # a few ms of the proxy's own work, in seconds (its HELP says ms)
    ttft = mean("litellm_llm_api_time_to_first_token_metric", **upstream)
    assert ttft >= 0.12, ttft  # the stand-in upstream waits 0.12 s before its first chunk
    model = {"source": "litellm", "model": "llama-3.1-8b-upstream"}
    checks = [
        near('obsbox:llm_gateway_overhead_seconds:mean5m{source="litellm"}', overhead, **model),
        near('obsbox:llm_ttft_seconds:mean5m{source="litellm",model="llama-3.1-8b-upstream"}', ttft, **model),
        near(
            'obsbox:llm_queue_seconds:mean5m{source="litellm",model="llama-3.1-8b"}',
            mean("litellm_request_queue_time_seconds", requested_model="llama-3.1-8b"),
            source="litellm",
            model="llama-3.1-8b",
        ),
        near(
            'obsbox:llm_e2e_seconds_count:rate5m{source="litellm",model="llama-3.1-8b"}',
            6 / SECONDS,  # 3 plain and 3 streamed requests; the failed ones are not observed
            source="litellm",
            model="llama-3.1-8b",
        ),
        near('obsbox:llm_requests_running:sum{source="litellm"}', 1, source="litellm"),
    ]
    run_rule_tests(tmp_path, rules_text(), [case("litellm-proxy-run", run, checks)])


def test_the_committed_rules_file_is_up_to_date_and_passes_promtool(tmp_path):
    assert llm.DEFAULT_RULES.read_text(encoding="utf-8") == rules_text(), (
        "compose/prometheus/rules/llm.rules.yml is out of date: "
        "run obsbox llm rules --out compose/prometheus/rules/llm.rules.yml"
    )
    result = promtool("check", "rules", str(llm.DEFAULT_RULES), cwd=tmp_path)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_cli_check_says_when_the_file_is_stale(tmp_path):
    out = tmp_path / "llm.rules.yml"
    run = [sys.executable, "-m", "obsbox", "llm", "rules", "--out", str(out)]
    assert subprocess.run(run, capture_output=True, text=True, check=False).returncode == 0
    assert out.read_text(encoding="utf-8") == rules_text()
    fresh = subprocess.run([*run, "--check"], capture_output=True, text=True, check=False)
    assert fresh.returncode == 0 and "tgi: queue" in fresh.stdout and "missing: ttft" in fresh.stdout
    out.write_text("groups: []\n", encoding="utf-8")
    stale = subprocess.run([*run, "--check"], capture_output=True, text=True, check=False)
    assert stale.returncode == 1 and "is out of date" in stale.stderr


@pytest.mark.parametrize(
    ("yaml_text", "error"),
    [
        ("sources:\n  x:\n    title: t\n    signals: {ttft: a}\n", "says nothing about queue"),
        ("sources:\n  x:\n    title: t\n    signals: {tft: a}\n", "sources.x.signals.tft: unknown signal"),
        ("sources:\n  x:\n    title: t\n    signals: {ttft: a_bucket}\n", "without _bucket"),
        (
            "sources:\n  x:\n    title: t\n    signals: {ttft: {part: a, whole: b}}\n",
            "a histogram signal takes 'metric' only",
        ),
        ("sources:\n  x:\n    title: t\n    signals: {cache_hit: {part: a}}\n", "'part' with 'whole' or 'rest'"),
        ("sources:\n  x:\n    title: t\n    signals: {ttft: 'a{b=}'}\n", "cannot read the label matcher"),
        ("sources:\n  x:\n    title: t\n    signals: {ttft: {metric: a, buckets: [1, 0.5]}}\n", "increasing"),
        ("sources:\n  x:\n    title: t\n    signals: {requests: {metric: a, buckets: [1]}}\n", "only a histogram"),
    ],
)
def test_bad_sources_files_get_a_located_one_line_error(tmp_path, yaml_text, error):
    path = tmp_path / "sources.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    with pytest.raises(Exception) as raised:
        llm.load(path)
    message = str(raised.value)
    assert error in message and message.startswith(f"{path}:") and "\n" not in message, message
