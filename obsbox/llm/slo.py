"""Ready SLO specs for the LLM sources: TTFT, inter-token latency, end-to-end latency and errors.

A template is an ``obsbox slo build`` spec a user edits. Its SLIs read each server's own metrics,
not the ``obsbox:llm_*`` series: the windows under a day stay exact (a ratio of recorded 5m rates
reaches 5m further back and delays the page alert), a native histogram has no recorded form, and the
spec works without the LLM rules file. Renamed metrics keep working through ``sli.older_names``,
the names the sources file lists after the first (the first one a target exposes wins).

Thresholds are those of chat serving in MLPerf Inference v5.0's interactive LLM scenario (Llama 2
70B: time to first token 450 ms, time per output token 40 ms, at the 99th percentile; MLCommons,
"LLM inference v5.0", April 2025), and 20 s end to end (450 ms plus 40 ms for each of 500 output
tokens, a long chat answer). A threshold between two bucket bounds is interpolated inside its bucket,
and the build says the bound of that estimate.

The TTFT SLOs split their 450 ms into stage budgets: queue 100 ms and prefill 300 ms (TTFT is the
queue, then prefill up to the first token), and the rest as slack (tokenization, scheduling, the
first detokenized chunk). The stages are read from the series ``obsbox llm rules`` records for the
source (``obsbox:llm_<stage>_seconds``), so these budgets need its rules file loaded too. A stage the
source does not time (SGLang and the LiteLLM proxy have a queue but no prefill histogram) leaves its
budget to the slack; a source with neither gets no budgets. The other SLOs get none: end to end is
mostly decode, which grows with the answer's length rather than with a fault, and inter-token latency
is one stage already.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from obsbox.llm.spec import Mapping, Source
from obsbox.slo.selectors import num

OBJECTIVE = 0.99
ERRORS_OBJECTIVE = 0.999


@dataclass(frozen=True)
class Target:
    """A latency SLO of the template: which signal, its threshold, and what it promises."""

    signal: str
    slug: str
    threshold: float
    promise: str
    runbook: str


LATENCY = (
    Target(
        "ttft",
        "ttft",
        0.45,
        "get their first token within 450 ms",
        "Read the queue and prefill panels of the LLM dashboard for this source: a grown queue means "
        "scaling out (requests waiting, KV cache full); a grown prefill means longer prompts or a cold "
        "prefix cache.",
    ),
    Target(
        "inter_token",
        "inter-token",
        0.04,
        "stream their tokens no more than 40 ms apart",
        "Decode is slow: check the batch size and KV-cache usage of this source (too many requests "
        "running at once), preemptions, and the GPU's utilisation (dcgm source).",
    ),
    Target(
        "e2e",
        "e2e",
        20.0,
        "finish within 20 s",
        "Split the time with the breakdown panels (queue, prefill, decode); long answers (generation "
        "tokens per request) lengthen it without a fault.",
    ),
)
TTFT_STAGES = {"queue": 0.1, "prefill": 0.3}  # budgets in seconds; the rest of the threshold is slack
ERRORS_RUNBOOK = (
    "Read the server's logs for the failed requests (Loki, by the trace of one of them); out-of-memory "
    "and engine restarts point at the GPU, timeouts at an overloaded queue. Roll back the last deploy "
    "if the errors started with it."
)
# Sources whose SLOs live elsewhere: the demo's are the seed spec (compose/slo.yaml).
LEFT_OUT = {"demo": "the demo's SLOs are the seed spec, compose/slo.yaml", "dcgm": "a GPU exporter: no requests"}


def template(sources: Sequence[Source], origin: str = "obsbox/llm/sources.yaml") -> str:
    """The spec text for ``sources``: every latency SLO each one can have, and its error SLO."""
    lines = [
        f"# SLOs for LLM serving, written by `obsbox llm slo` from {origin}; edit them to your service.",
        "# Thresholds: MLPerf Inference v5.0's interactive chat scenario (time to first token 450 ms, time",
        "# per output token 40 ms, at the 99th percentile), and 20 s end to end (450 ms + 500 tokens x 40 ms).",
        "# A threshold between two bucket bounds is interpolated inside its bucket (off_bucket: interpolate);",
        "# `obsbox slo build` states the bound of that estimate. Set off_bucket: refuse to allow only",
        "# bounds, nearest to round to one, or histogram: native where the source sends native histograms.",
        "# Each SLI reads the server's own metrics; older_names are the names before a rename, the names",
        "# with colons as underscores, as a Prometheus 2 stores them from prometheus_client's OpenMetrics,",
        "# and GenAI's names under OTLP translation_strategy UnderscoreEscapingWithoutSuffixes.",
        "# TTFT SLOs split their threshold into stage budgets (queue, prefill, the rest as slack), each",
        "# held to its mean over 5m from the series `obsbox llm rules` records: load its rules file too.",
        "slos:",
    ]
    for source in sources:
        lines += _source(source)
    return "\n".join(lines) + "\n"


def _source(source: Source) -> list[str]:
    if source.name in LEFT_OUT:
        return [f"  # {source.name}: none ({LEFT_OUT[source.name]})"]
    out: list[str] = []
    model = f'{source.model_label}="..."' if source.model_label else None
    filters = f"    # filters: ['{model}']  # one model only" if model else None
    for target in LATENCY:
        mapping = source.signals.get(target.signal)
        if mapping is None:
            why = source.missing.get(target.signal, "not mapped")
            out.append(f"  # {source.name}: no {target.slug} SLO ({' '.join(why.split())})")
            continue
        out += _latency(source, target, mapping)
        out += [filters] if filters else []
    errors, requests = source.signals.get("errors"), source.signals.get("requests")
    if errors is None or requests is None:
        why = source.missing.get("errors") or source.missing.get("requests") or "not mapped"
        return [*out, f"  # {source.name}: no error SLO ({' '.join(why.split())})"]
    counted = [s.metric for key in (errors, requests) for s in key.selectors("metric")[:1]]
    unsuffixed = [_yaml(m) for m in counted if not m.endswith(("_total", "_count", "_bucket"))]
    out += [
        "",
        f"  - name: {source.name}-errors",
        f"    service: {source.name}",
        f"    description: {num(ERRORS_OBJECTIVE * 100)}% of requests end without a server-side error.",
        f"    objective: {num(ERRORS_OBJECTIVE)}",
        "    sli:",
        "      kind: availability",
        f"      bad: {_yaml(errors.metric[0])}",
        f"      total: {_yaml(requests.metric[0])}",
        *([f"      counters: [{', '.join(unsuffixed)}]"] if unsuffixed else []),
        *_folded("runbook", ERRORS_RUNBOOK),
    ]
    return out + ([filters] if filters else [])


def _latency(source: Source, target: Target, mapping: Mapping) -> list[str]:
    names = [s.metric for s in mapping.selectors("metric")]
    if mapping.buckets is None:
        raise ValueError(f"sources.{source.name}.signals.{target.signal}: list its buckets to template an SLO")
    shared = _same_layout(source.name, names)
    matchers = [str(m) for s in mapping.selectors("metric")[:1] for m in s.matchers]
    lines = [
        "",
        f"  - name: {source.name}-{target.slug}",
        f"    service: {source.name}",
        f"    description: {num(OBJECTIVE * 100)}% of requests {target.promise}.",
        f"    objective: {num(OBJECTIVE)}",
        "    sli:",
        "      kind: latency",
        f"      metric: {_yaml(names[0])}",
    ]
    if shared[1:]:
        lines.append(f"      older_names: [{', '.join(_yaml(n) for n in shared[1:])}]")
    lines += [
        f"      threshold: {_duration(target.threshold)}",
        f"      buckets: [{', '.join(_exact(b) for b in mapping.buckets)}]",
        "      off_bucket: interpolate",
    ]
    if matchers:
        lines.append(f"    filters: [{', '.join(_yaml(m) for m in matchers)}]")
    if target.signal == "ttft":
        lines += _budgets(source, target.threshold)
    return [*lines, *_folded("runbook", target.runbook)]


def _budgets(source: Source, threshold: float) -> list[str]:
    """The TTFT's stage budgets, for the stages the source times; the rest of the threshold is slack."""
    timed = {stage: budget for stage, budget in TTFT_STAGES.items() if stage in source.signals}
    if not timed:
        return [f"    # no stage budgets: {source.name} times neither {' nor '.join(TTFT_STAGES)}"]
    stages = ", ".join(f"{stage}: {_duration(budget)}" for stage, budget in timed.items())
    untimed = [stage for stage in TTFT_STAGES if stage not in timed]
    why = f"  # {', '.join(untimed)} not timed by {source.name}: its budget is here" if untimed else ""
    return [
        "    budgets:",
        f"      source: {source.name}",
        f"      stages: {{{stages}}}",
        f"      slack: {_duration(threshold - sum(timed.values()))}{why}",
    ]


def _same_layout(source: str, names: list[str]) -> list[str]:
    """The names that share the first one's buckets. GenAI's SLOs are the server's: the client's time to
    first chunk and per output chunk have other buckets (a gateway's spec names its client metrics)."""
    if source == "genai":
        return [n for n in names if n.startswith("gen_ai_server_")] or names[:1]
    return names


def _folded(key: str, text: str) -> list[str]:
    """``key: >-`` and ``text`` wrapped under it, as the seed spec writes its runbooks."""
    wrapped = textwrap.wrap(text, 100, initial_indent=" " * 6, subsequent_indent=" " * 6, break_on_hyphens=False)
    return [f"    {key}: >-", *wrapped]


def _exact(bound: float) -> str:
    """A bucket bound as the server writes it (TGI's 0.0001 * 1.5^k keep every digit), 1 for 1.0."""
    return str(int(bound)) if bound.is_integer() else repr(bound)


def _duration(value: float) -> str:
    return f"{num(value)}s" if value >= 1 else f"{num(value * 1000)}ms"


def _yaml(text: str) -> str:
    """A plain scalar where YAML reads it back unchanged, else single-quoted."""
    plain = text.replace("_", "").replace(":", "").isalnum() and not text[0].isdigit()
    return text if plain else "'" + text.replace("'", "''") + "'"
