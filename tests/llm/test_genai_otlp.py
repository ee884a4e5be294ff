"""The GenAI names in Prometheus 3, per OTLP translation strategy, derived once (``otlp_names``) and
compared with everything that states them: the README's tables, the GenAI expositions and the
``genai`` source of ``obsbox/llm/sources.yaml``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from obsbox import llm
from tests.llm.otlp_names import (
    GENAI_ATTRIBUTES,
    GENAI_METRICS,
    STRATEGIES,
    WITHOUT_SUFFIXES,
    OtelMetric,
    label_name,
    legacy,
    metric_name,
    series_names,
)
from tests.llm.test_rules import samples, text

README = Path(__file__).parent / "expositions" / "README.md"
DEFAULT = "UnderscoreEscapingWithSuffixes"
EXPOSITIONS = {"genai-otlp.prom": DEFAULT, "genai-otlp-without-suffixes.prom": WITHOUT_SUFFIXES}
RESOURCE_LABELS = {"job", "instance", "le"}  # service.name, service.instance.id, and the bucket bound


def readme_rows(metrics: bool) -> dict[str, list[str]]:
    """The README's rows of the metrics table (their first cell adds "(instrument, unit)") or of the
    attributes table: {the OpenTelemetry name: the names in each strategy's column}."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 1 + len(STRATEGIES) and ("(" in cells[0]) == metrics:
            rows[cells[0].split("`")[1]] = [c.strip("`") for c in cells[1:]]
    return rows


@pytest.mark.parametrize(
    ("metric", "strategy", "name"),
    [
        # otlptranslator v1.0.0 metric_namer_test.go (its gauges name like histograms: no unit "1" here)
        (OtelMetric("requests", "", "counter"), DEFAULT, "requests_total"),
        (OtelMetric("custom_metric", "{custom}", "histogram"), DEFAULT, "custom_metric"),
        (OtelMetric("metric@with#special$chars", "", "histogram"), WITHOUT_SUFFIXES, "metric_with_special_chars"),
        (OtelMetric("cpu_seconds_total", "s", "counter"), "NoUTF8EscapingWithSuffixes", "cpu_seconds_total"),
        (OtelMetric("@#$%", "", "counter"), "NoUTF8EscapingWithSuffixes", "@#$%_total"),
    ],
)
def test_the_port_names_as_otlptranslators_own_tests(metric, strategy, name):
    assert metric_name(metric, strategy) == name
    assert label_name("label.with.dots", DEFAULT) == "label_with_dots"  # label_namer_test.go


def test_the_readme_tables_are_the_translation_rules():
    assert readme_rows(metrics=True) == {m.name: [metric_name(m, s) for s in STRATEGIES] for m in GENAI_METRICS}
    assert readme_rows(metrics=False) == {a: [label_name(a, s) for s in STRATEGIES] for a in GENAI_ATTRIBUTES}


@pytest.mark.parametrize(("fixture", "strategy"), EXPOSITIONS.items())
def test_each_exposition_holds_its_strategys_names(fixture, strategy):
    exposition = text(fixture)
    names = {n for m in GENAI_METRICS for n in series_names(m, strategy)}
    labels = {label_name(a, strategy) for a in GENAI_ATTRIBUTES} | RESOURCE_LABELS
    found = samples(exposition)
    assert {n for n, *_ in found} <= names, sorted({n for n, *_ in found} - names)
    assert {k for _, own, *_ in found for k in own} <= labels
    families = set(re.findall(r"^# TYPE (\S+) ", exposition, flags=re.M))
    assert families <= {metric_name(m, strategy) for m in GENAI_METRICS}, families
    assert len(families) >= 6


def test_the_without_suffixes_exposition_holds_the_defaults_observations():
    back = {
        metric_name(m, WITHOUT_SUFFIXES) + part: metric_name(m, DEFAULT) + part
        for m in GENAI_METRICS
        for part in ("", "_bucket", "_sum", "_count")
    }
    renamed = [(back[n], labels, v) for n, labels, v, _ in samples(text("genai-otlp-without-suffixes.prom"))]
    assert renamed == [(n, labels, v) for n, labels, v, _ in samples(text("genai-otlp.prom"))]


def test_the_genai_source_reads_the_legacy_strategies_names_default_first():
    """Every name and label the genai source maps is one Prometheus gives a GenAI metric under a strategy
    whose names are legacy ones; each signal lists the default's names before the without-suffixes ones,
    and each mapped metric under both."""
    (genai,) = (s for s in llm.load() if s.name == "genai")
    strategies = [s for s in STRATEGIES if legacy(s)]
    assert strategies == [DEFAULT, WITHOUT_SUFFIXES]
    # a name both strategies give (gen_ai_client_token_usage) counts as the default's
    named = {
        n: (s, m) for s in reversed(strategies) for m in GENAI_METRICS for n in (metric_name(m, s), *series_names(m, s))
    }
    labels = {label_name(a, s) for s in strategies for a in GENAI_ATTRIBUTES}
    assert genai.model_label == label_name("gen_ai.request.model", DEFAULT)
    for signal, mapping in genai.signals.items():
        read = [named[s.metric] for s in mapping.selectors("metric")]
        order = [strategies.index(strategy) for strategy, _ in read]
        assert order == sorted(order), (signal, order)
        defaults = {m for strategy, m in read if strategy == DEFAULT}
        assert defaults <= {m for strategy, m in read if strategy == WITHOUT_SUFFIXES} | {
            m for m in defaults if metric_name(m, DEFAULT) == metric_name(m, WITHOUT_SUFFIXES)
        }, signal
        assert {m.label for s in mapping.selectors("metric") for m in s.matchers} <= labels


def test_the_utf8_strategies_keep_the_dots_only_prometheus_3_reads():
    """Why the genai source does not map them: no name of theirs is a Prometheus 2 name."""
    for strategy in ("NoUTF8EscapingWithSuffixes", "NoTranslation"):
        assert not legacy(strategy)
        assert {label_name(a, strategy) for a in GENAI_ATTRIBUTES} == set(GENAI_ATTRIBUTES)
        assert all("." in metric_name(m, strategy) for m in GENAI_METRICS)
