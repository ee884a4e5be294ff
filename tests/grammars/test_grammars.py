"""Every shipped PromQL, LogQL and TraceQL expression parses with the grammar its vendor's UI uses."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.grammars.lezer import Shipped, parse_all
from tests.grammars.shipped import everything, fill_link


@pytest.fixture(scope="module")
def shipped() -> list[Shipped]:
    return everything()


def test_every_shipped_query_parses_without_error_nodes(shipped):
    results = parse_all(shipped)
    bad = [
        f"{q.where} ({q.lang}): {err.show(q.expr)}\n    {q.expr}"
        for q, errors in zip(shipped, results, strict=True)
        for err in errors[:1]
    ]
    assert not bad, "queries the vendors' grammars reject:\n" + "\n".join(bad)


def test_every_source_and_language_is_covered(shipped):
    langs = Counter(q.lang for q in shipped)
    assert set(langs) == {"promql", "logql", "traceql"}
    assert langs["promql"] > 60
    wheres = " ".join(q.where for q in shipped)
    for source in ("dashboard", "data source", "slo.rules.yml", "report chart", "tracesToLogsV2"):
        assert source in wheres, source


# a Grafana variable ($model, ${model}, ${__range}); "$1" and "${1}" are label_replace's group references
TEMPLATE_VARIABLE = re.compile(r"\$(?:\{(?!\d)|[A-Za-z_])")


def test_no_template_variable_reaches_the_parser(shipped):
    leftovers = [q for q in shipped if TEMPLATE_VARIABLE.search(q.expr)]
    assert not leftovers, leftovers


def test_a_group_reference_is_not_taken_for_a_template_variable():
    assert not TEMPLATE_VARIABLE.search('label_replace(x, "model", "$1", "model_name", "(.*)")')
    assert not TEMPLATE_VARIABLE.search('label_replace(x, "model", "${1}", "model_name", "(.*)")')
    assert TEMPLATE_VARIABLE.search('rate(x{model="$model"}[5m])')
    assert TEMPLATE_VARIABLE.search("rate(x[${__range}])")


@pytest.mark.parametrize(
    ("lang", "broken", "offset"),
    [
        ("promql", "sum(rate(x[5m])", 15),
        ("promql", "rate(x{job=~}[5m])", 12),
        ("logql", '{service_name="a"} | detected_level=~', 37),
        ("logql", 'sum by (level) (count_over_time({a="b"} [1m])', 45),
        ("traceql", '{ resource.service.name = "a" && }', 33),
    ],
)
def test_the_parsers_report_an_error_and_its_position(lang, broken, offset):
    (errors,) = parse_all([Shipped("broken", lang, broken)])
    assert errors, f"{lang} accepted {broken!r}"
    assert errors[0].offset == offset
    assert "line 1" in errors[0].show(broken)


def test_a_provisioned_link_with_an_unknown_variable_is_refused():
    with pytest.raises(KeyError, match=r"__span\.kind"):
        fill_link('{a="${__span.kind}"}')
