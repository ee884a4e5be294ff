"""What the dashboard tests inspect: every built dashboard, and every query in it with where it sits."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from obsbox.dashboards import build, slos
from obsbox.dashboards.queries import Query
from obsbox.slo.policies import BURN_DASHBOARD

# Template variables as Grafana fills them with "All" selected; windows for a 1 s scrape interval.
FILLED = {
    "service": ".+",
    "route": ".*",
    "model": ".*",
    "source": ".*",
    "slo": ".*",
    "trace_id": "",
    "__rate_interval": "15s",
    "__interval": "15s",
    "__range": "5m",
}
# Specs the SLO burn dashboard is also built from: calendar periods and time slices, gauges and their
# own burn-rate conditions, a policy of one SLO's own.
SLO_SPECS = tuple(
    Path(__file__).parents[1] / "slo" / "testdata" / f"{n}.slo.yaml" for n in ("calendar", "gauges", "features")
)
LABEL_VALUES = re.compile(r"label_values\((.*),\s*(\w+)\)$", re.DOTALL)


@dataclass(frozen=True)
class Found:
    dashboard: str
    panel: str
    datasource: str
    expr: str

    def filled(self) -> str:
        return Query(self.expr).fill(FILLED)

    def promql(self) -> str:
        """A variable's ``label_values(selector, label)`` becomes the PromQL it runs."""
        text = self.filled()
        found = LABEL_VALUES.match(text)
        return f"count by ({found.group(2)}) ({found.group(1)})" if found else text


@cache
def dashboards() -> tuple[build.Built, ...]:
    return tuple(build.build_all())


@cache
def burn_dashboards() -> tuple[build.Built, ...]:
    """The SLO burn dashboard built from each of ``SLO_SPECS``."""
    source = next(b.source for b in dashboards() if b.uid == BURN_DASHBOARD)
    out = []
    for path in SLO_SPECS:
        with slos.using(path):
            out.append(build.build_one(source))
    return tuple(out)


def queries(boards: tuple[build.Built, ...] | None = None) -> list[Found]:
    """Every query of ``boards`` (by default the shipped dashboards), with where it sits."""
    out = []
    for board in dashboards() if boards is None else boards:
        title = board.title
        out.extend(
            Found(title, f"variable ${v['name']}", v["datasource"]["type"], v["query"])
            for v in board.model["templating"]["list"]
            if v["type"] == "query"
        )
        for panel in board.model["panels"]:
            for target in panel.get("targets", []):
                kind = target["datasource"]["type"]
                out.append(Found(title, panel["title"], kind, target["query"] if kind == "tempo" else target["expr"]))
    return out


def of(kind: str) -> list[Found]:
    return [found for found in queries() if found.datasource == kind]
