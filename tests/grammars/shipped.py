"""Every query the project ships, with template variables replaced by plausible values.

Sources: the dashboards (panels and variables, through the query catalog), Grafana's provisioned data
sources (trace-to-logs and trace-to-metrics queries), the SLO rules Prometheus loads, and the report.
"""

from __future__ import annotations

import re
from pathlib import Path

from obsbox.dashboards import report, slos
from tests.dashboards.catalog import FILLED, queries
from tests.grammars.lezer import Shipped
from tests.stack.conftest import COMPOSE_DIR, load_yaml
from tests.stack.grafana_env import expand

LANG_OF = {"prometheus": "promql", "loki": "logql", "tempo": "traceql"}
DATASOURCES = COMPOSE_DIR / "grafana" / "provisioning" / "datasources" / "datasources.yaml"
RULES = COMPOSE_DIR / "prometheus" / "rules"

# Grafana's link variables, as it fills them for a span of the demo gateway.
LINK_VALUES = {
    '${__span.tags["service.name"]}': "gateway",
    "${__span.tags.service.name}": "gateway",
    "${__trace.traceId}": "4bf92f3577b34da6a3ce929d0e0e4736",
    "${__span.spanId}": "00f067aa0ba902b7",
    "${__span.name}": "POST /v1/chat",
    "${__value.raw}": "4bf92f3577b34da6a3ce929d0e0e4736",
}
# tracesToMetrics: Grafana replaces $__tags with the span's tags mapped by `tags` (service.name -> service,
# obsbox.span.source -> obsbox_span_source: the collector sets it on every span).
TAGS = 'service="gateway", obsbox_span_source="sdk"'
LINK_VARIABLE = re.compile(r"\$\{__[^}]*\}|\$__\w+")


def fill_link(expr: str) -> str:
    """A provisioned link query with Grafana's variables filled; an unknown variable is an error."""
    for name, value in LINK_VALUES.items():
        expr = expr.replace(name, value)
    expr = expr.replace("$__tags", TAGS)
    left = LINK_VARIABLE.findall(expr)
    if left:
        raise KeyError(f"no plausible value for {left} in {expr!r}")
    return expr


def dashboards() -> list[Shipped]:
    return [
        Shipped(f"dashboard {f.dashboard!r}, panel {f.panel!r}", LANG_OF[f.datasource], f.promql()) for f in queries()
    ]


def provisioning() -> list[Shipped]:
    out = []
    for ds in expand(load_yaml(DATASOURCES), {})["datasources"]:
        data = ds.get("jsonData") or {}
        logs = data.get("tracesToLogsV2") or {}
        if logs.get("customQuery"):
            out.append(Shipped(f"data source {ds['name']}: tracesToLogsV2", "logql", fill_link(logs["query"])))
        out.extend(
            Shipped(f"data source {ds['name']}: tracesToMetrics {m['name']!r}", "promql", fill_link(m["query"]))
            for m in (data.get("tracesToMetrics") or {}).get("queries", [])
        )
    return out


def rules(folder: Path = RULES) -> list[Shipped]:
    out = []
    for path in sorted(folder.glob("*.yml")):
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                name = rule.get("record") or rule.get("alert")
                out.append(Shipped(f"{path.name}, group {group['name']!r}, rule {name!r}", "promql", rule["expr"]))
    return out


def reports() -> list[Shipped]:
    out = []
    for chart in report.plan(slos.load(), slos.reply_latency_threshold()):
        out.extend(Shipped(f"report chart {chart.key!r}", "promql", query.fill(FILLED)) for query in chart.queries)
    return out


def everything() -> list[Shipped]:
    return [*dashboards(), *provisioning(), *rules(), *reports()]
