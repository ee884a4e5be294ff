"""PromQL parses with promtool (Prometheus's own parser); LogQL keeps Loki's selector rule; TraceQL names
known attributes.

The vendors' grammars (Lezer: PromQL, LogQL, TraceQL) parse every shipped query in
tests/grammars/test_grammars.py, and the LogQL labels are checked against what the compose path
writes into Loki in tests/stack/test_links.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from obsbox.dashboards import queries as q
from tests.dashboards.catalog import FILLED, burn_dashboards, of, queries

PROMTOOL = shutil.which("promtool")
# TraceQL: OTel semantic-convention attributes the exporters set, and Tempo's intrinsics.
TRACEQL_NAMES = {
    "resource.service.name",
    "span.http.route",
    "span.http.request.method",
    "span.http.response.status_code",
    "span.gen_ai.request.model",
    "duration",
    "status",
    "name",
    "kind",
}
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|`[^`]*`')


def test_there_are_queries_of_every_kind():
    kinds = {found.datasource for found in queries()}
    assert kinds == {"prometheus", "loki", "tempo"}
    assert len(of("prometheus")) > 40


def test_every_promql_expression_parses_with_promtool(tmp_path):
    """promtool check rules parses each expression (template variables filled in) as a recording rule:
    the shipped dashboards', and the SLO burn dashboard's as built from other specs (a calendar SLO's
    among them)."""
    assert PROMTOOL, "promtool is missing: apt-get install prometheus (Debian's package ships it)"
    others = [f for f in queries(burn_dashboards()) if f.datasource == "prometheus"]
    assert {f.panel for f in others} >= {"SLI data", "Alerts", "Error-budget policy", "Burn rate"}
    found = of("prometheus") + others
    rules = [{"record": f"obsbox_check:q{i}", "expr": f.promql()} for i, f in enumerate(found)]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, sort_keys=False))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        bad = [f"{f.dashboard} / {f.panel}: {f.promql()}" for f in found if f.promql() in result.stderr]
        pytest.fail(f"promtool rejected an expression:\n{result.stderr}\n" + "\n".join(bad))
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_promtool_rejects_a_broken_expression(tmp_path):
    """The check above can fail: a bracket missing is caught."""
    assert PROMTOOL
    broken = q.REPLY_P95.fill(FILLED)[:-1]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "x:y", "expr": broken}]}]}))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode != 0


@pytest.mark.parametrize("found", of("loki"), ids=lambda f: f"{f.dashboard}/{f.panel}")
def test_every_logql_selector_has_a_matcher_that_does_not_match_the_empty_string(found):
    """Loki refuses a selector whose matchers all match the empty string ("queries require at least one
    regexp or equality matcher that does not have an empty-compatible value")."""
    selectors = re.findall(r"\{([^{}]*)\}", found.filled())
    assert selectors, f"no stream selector in {found.filled()}"
    for selector in selectors:
        matchers = re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', selector)
        assert any(op in ("=", "=~") and not re.fullmatch(v, "") for _, op, v in matchers), selector


@pytest.mark.parametrize("found", of("tempo"), ids=lambda f: f"{f.dashboard}/{f.panel}")
def test_traceql_is_balanced_and_uses_known_attributes(found):
    text = found.filled()
    assert text.startswith("{") and text.endswith("}")
    names = set(re.findall(r"([\w.]+)\s*(?:=~|!~|!=|>=|<=|=|>|<)", QUOTED.sub('""', text)))
    assert names and names <= TRACEQL_NAMES, f"unknown attribute(s) {names - TRACEQL_NAMES} in {text}"


def test_fill_replaces_every_variable_and_refuses_a_missing_one():
    text = q.REQUEST_QUANTILE[0.95].fill(FILLED)
    assert "$" not in text and 'job=~".+"' in text and "[15s]" in text
    with pytest.raises(KeyError, match="route"):
        q.REQUEST_QUANTILE[0.95].fill({"service": "x", "model": "y", "__rate_interval": "1m"})
    assert q.LOKI_LOGS.variables == {"service", "trace_id"}
