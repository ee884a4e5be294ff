"""The names Prometheus gives OpenTelemetry metrics and attributes it receives over OTLP, per strategy.

A port of the rules Prometheus v3.14.0 applies (``storage/remote/write_otlp_handler.go`` turns
``otlp.translation_strategy`` into ``AddMetricSuffixes`` and ``AllowUTF8``;
``storage/remote/otlptranslator/prometheusremotewrite/metrics_to_prw.go`` and ``helper.go`` build the
names and add ``_bucket``/``_sum``/``_count``), with the naming of ``github.com/prometheus/otlptranslator``
v1.0.0, the release it vendors (``strategy.go``, ``metric_namer.go``, ``unit_namer.go``,
``label_namer.go``, ``strconv.go``). Only what the GenAI metrics meet is ported: the units ``s`` and
``{token}`` (the whole ``unitMap`` would be copied, not checked), histograms and monotonic counters, no
namespace, and the label sanitisation defaults (no ``key_`` prefix, runs of underscores collapsed).
The tests derive the tables in ``tests/llm/expositions/README.md`` from it, so they are written once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["histogram", "counter"]

# strategy: (add suffixes, escape to legacy names), strategy.go ShouldAddSuffixes / ShouldEscape
STRATEGIES = {
    "UnderscoreEscapingWithSuffixes": (True, True),
    "UnderscoreEscapingWithoutSuffixes": (False, True),
    "NoUTF8EscapingWithSuffixes": (True, False),
    "NoTranslation": (False, False),
}
WITHOUT_SUFFIXES = "UnderscoreEscapingWithoutSuffixes"
UNITS = {"s": "seconds"}  # the part of unitMap the GenAI metrics use; '{token}' is an annotation: no suffix
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")  # helper.go bucketStr, sumStr, countStr
LEGACY_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class OtelMetric:
    """One metric of the conventions: its name, UCUM unit and instrument."""

    name: str
    unit: str
    kind: Kind


# The GenAI metrics obsbox/llm/sources.yaml maps: semantic-conventions v1.41.1 model/gen-ai/metrics.yaml,
# and the token counters of semantic-conventions-genai (docs/gen-ai/gen-ai-token-metrics.md, unreleased).
GENAI_METRICS = (
    OtelMetric("gen_ai.client.operation.duration", "s", "histogram"),
    OtelMetric("gen_ai.client.token.usage", "{token}", "histogram"),
    OtelMetric("gen_ai.client.operation.time_to_first_chunk", "s", "histogram"),
    OtelMetric("gen_ai.client.operation.time_per_output_chunk", "s", "histogram"),
    OtelMetric("gen_ai.server.request.duration", "s", "histogram"),
    OtelMetric("gen_ai.server.time_to_first_token", "s", "histogram"),
    OtelMetric("gen_ai.server.time_per_output_token", "s", "histogram"),
    OtelMetric("gen_ai.client.inference.usage.input_tokens", "{token}", "counter"),
    OtelMetric("gen_ai.client.inference.usage.output_tokens", "{token}", "counter"),
)
# The attributes the GenAI metrics carry (metrics.yaml's attribute groups), and the resource's job/instance.
GENAI_ATTRIBUTES = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.token.type",
    "error.type",
    "server.address",
    "server.port",
)


def _unit_suffix(unit: str) -> str:
    """buildUnitSuffixes' main unit (GenAI units have no '/'): mapped, or none when it holds '{' or '}'."""
    unit = unit.strip()
    if not unit or "{" in unit or "}" in unit:
        return ""
    return UNITS.get(unit, unit)


def metric_name(metric: OtelMetric, strategy: str) -> str:
    """The metric family's name (MetricNamer.Build); a histogram's series add HISTOGRAM_PARTS to it."""
    suffixes, escape = STRATEGIES[strategy]
    unit = _unit_suffix(metric.unit)
    if escape and suffixes:  # normalizeName: tokens of [a-zA-Z0-9:], unit token unless present, then total
        tokens = [t for t in re.split(r"[^a-zA-Z0-9:]+", metric.name) if t]
        if unit and unit not in tokens:
            tokens.append(unit)
        if metric.kind == "counter":
            tokens = [t for t in tokens if t != "total"] + ["total"]
        return "_".join(tokens)
    if escape:  # buildCompliantMetricName without suffixes: runs of other characters (not '_') become '_'
        return "_".join(t for t in re.split(r"[^a-zA-Z0-9:_]+", metric.name) if t)
    name = metric.name  # buildMetricName: the name as sent, suffixes appended unless already there
    if suffixes:
        total = metric.kind == "counter"
        if total and name.endswith("total") and len(name) > len("total") + 1:
            name = name[: -len("total") - 1]
        if unit and not name.endswith(unit):
            name += "_" + unit
        if total:
            name += "_total"
    return name


def series_names(metric: OtelMetric, strategy: str) -> tuple[str, ...]:
    """The ``__name__`` values of the metric's series in Prometheus."""
    family = metric_name(metric, strategy)
    return tuple(family + part for part in HISTOGRAM_PARTS) if metric.kind == "histogram" else (family,)


def label_name(attribute: str, strategy: str) -> str:
    """LabelNamer.Build with Prometheus' defaults: as sent when UTF-8 is allowed, else each run of
    characters outside [a-zA-Z0-9] one '_' (sanitizeLabelName), 'key_' before a leading digit."""
    _, escape = STRATEGIES[strategy]
    if not escape:
        return attribute
    name = re.sub(r"[^a-zA-Z0-9]+", "_", attribute)
    return "key_" + name if name[:1].isdigit() else name


def legacy(strategy: str) -> bool:
    """Whether every GenAI name under ``strategy`` is a valid Prometheus 2 metric and label name."""
    return all(LEGACY_METRIC.fullmatch(metric_name(m, strategy)) for m in GENAI_METRICS) and all(
        LEGACY_LABEL.fullmatch(label_name(a, strategy)) for a in GENAI_ATTRIBUTES
    )
