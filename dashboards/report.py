"""A static HTML report of the core panels for a time range, for people without Grafana and for CI.

It runs the catalog's queries (the same ones the dashboards run) against Prometheus, draws each chart
as a PNG with matplotlib (the ``report`` extra), and writes one self-contained HTML file: the PNGs
are embedded as base64, and the numbers behind every chart are embedded as JSON next to them.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from obsbox.dashboards import queries as q
from obsbox.dashboards import slos as slo_names
from obsbox.dashboards.promapi import Prometheus, Series

POINTS = 240  # samples per series over the range
MIN_RATE_INTERVAL = 60.0


@dataclass
class Line:
    """A horizontal reference line (an SLO threshold, a burn-rate alert factor)."""

    value: float
    label: str


@dataclass
class Chart:
    key: str
    title: str
    unit: str
    queries: list[q.Query]
    series: list[tuple[str, Series]] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    stacked: bool = False
    png: bytes = b""

    @property
    def has_data(self) -> bool:
        return any(s.finite for _, s in self.series)

    def crossings(self, line: Line) -> int:
        """Points of the plotted series at or above ``line``."""
        return sum(1 for _, s in self.series for v in s.finite if v >= line.value)

    def summary(self) -> list[dict]:
        out = []
        for name, s in self.series:
            values = s.finite
            if values:
                out.append(
                    {
                        "series": name,
                        "min": min(values),
                        "mean": sum(values) / len(values),
                        "max": max(values),
                        "last": values[-1],
                        "points": len(values),
                    }
                )
        return out

    def data(self) -> dict:
        return {
            "title": self.title,
            "unit": self.unit,
            "queries": [query.expr for query in self.queries],
            "lines": [{"value": line.value, "label": line.label} for line in self.lines],
            "series": [{"name": name, "labels": s.labels, "t": s.times, "v": s.values} for name, s in self.series],
        }


@dataclass
class Report:
    prometheus: str
    start: float
    end: float
    step: float
    scenario: str | None
    charts: list[Chart]

    def chart(self, key: str) -> Chart:
        for chart in self.charts:
            if chart.key == key:
                return chart
        raise KeyError(key)


def variables(start: float, end: float, step: float, rate_interval: float, selection: dict[str, str]) -> dict:
    """Values for the dashboards' template variables, as Grafana would set them for this range."""
    return {
        "service": selection.get("service", ".+"),
        "route": selection.get("route", ".*"),
        "model": selection.get("model", ".*"),
        "__rate_interval": f"{max(rate_interval, 2 * step):.0f}s",
        "__interval": f"{step:.0f}s",
        "__range": f"{max(end - start, step):.0f}s",
    }


def plan(slos: Sequence, reply_threshold: float) -> list[Chart]:
    """The charts: P95 reply latency against the SLO line, the stage breakdown, each SLO's burn rates."""
    charts = [
        Chart(
            "reply_p95",
            "Reply latency (time to first byte), P95",
            "s",
            [q.REPLY_P95],
            lines=[Line(reply_threshold, f"SLO threshold {reply_threshold * 1000:.0f} ms")],
        ),
        Chart(
            "stage_breakdown", "Stage breakdown, mean seconds per request (stacked)", "s", [q.STAGE_MEAN], stacked=True
        ),
    ]
    for slo in slos:
        selector = slo_names.selector(slo)
        charts.append(
            Chart(
                f"burn_rate:{slo.name}",
                f"Burn rate of {slo.name} (error ratio / error budget)",
                "x",
                [q.burn_rate(selector, window) for window in slo_names.burn_windows(slo)],
                lines=[
                    Line(cond.factor, f"{cond.severity} {cond.factor:g}x ({cond.long_window}/{cond.short_window})")
                    for cond in slo.burn_conditions()
                ],
            )
        )
    return charts


def collect(
    prometheus: Prometheus,
    charts: list[Chart],
    start: float,
    end: float,
    *,
    rate_interval: float = MIN_RATE_INTERVAL,
    selection: dict[str, str] | None = None,
) -> float:
    """Fill every chart's series from Prometheus; returns the step used."""
    step = max(1.0, math.ceil((end - start) / POINTS))
    values = variables(start, end, step, rate_interval, selection or {})
    for chart in charts:
        for query in chart.queries:
            for series in prometheus.query_range(query.fill(values), start, end, step):
                chart.series.append((series.name(query.legend), series))
        chart.series.sort(key=lambda pair: pair[0])
    return step


def draw(chart: Chart) -> bytes:
    """The chart as a PNG (matplotlib's Agg canvas, no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(10, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(chart.title)
    ax.set_ylabel(chart.unit)
    ax.grid(True, alpha=0.3)
    # x values are datetimes: matplotlib plots them through the unit converter that matplotlib/dates.py
    # registers for datetime.datetime (units.registry); its type stubs list only numbers and arrays
    if chart.stacked and chart.series:
        times = _timeline(chart.series)
        stacks = [_on(times, s) for _, s in chart.series]
        x = [_dt(t) for t in times]
        labels = [name for name, _ in chart.series]
        ax.stackplot(x, stacks, labels=labels, alpha=0.85)  # type: ignore[arg-type]  # stubs omit datetimes
    else:
        for name, s in chart.series:
            ax.plot([_dt(t) for t in s.times], s.values, label=name, linewidth=1.6)  # type: ignore[arg-type]  # stubs omit datetimes
    for line in chart.lines:
        ax.axhline(line.value, linestyle="--", linewidth=1.2, color="red", alpha=0.8, label=line.label)
    if not chart.has_data:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", fontsize=16, alpha=0.6)
    if chart.series or chart.lines:
        ax.legend(loc="upper left", fontsize=7, ncol=2, framealpha=0.7)
    fig.autofmt_xdate()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


def _timeline(series: list[tuple[str, Series]]) -> list[float]:
    return sorted({t for _, s in series for t in s.times})


def _on(times: list[float], s: Series) -> list[float]:
    """The series' values on a shared timeline; gaps and NaN count as 0 in a stack."""
    points = dict(zip(s.times, s.values, strict=True))
    return [v if math.isfinite(v := points.get(t, 0.0)) else 0.0 for t in times]


def render_html(report: Report) -> str:
    start, end = (_dt(t).strftime("%Y-%m-%d %H:%M:%S UTC") for t in (report.start, report.end))
    title = "obsbox report" + (f": {report.scenario}" if report.scenario else "")
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}code{font-size:.85em}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Prometheus <code>{html.escape(report.prometheus)}</code>, {start} to {end}, "
        f"one point every {report.step:g} s.</p>",
    ]
    for chart in report.charts:
        png = base64.b64encode(chart.png).decode("ascii")
        parts += [
            f'<section id="{html.escape(chart.key)}"><h2>{html.escape(chart.title)}</h2>',
            f'<img alt="{html.escape(chart.title)}" src="data:image/png;base64,{png}">',
        ]
        for line in chart.lines:
            parts.append(f"<p>{html.escape(line.label)}: {chart.crossings(line)} points at or above it.</p>")
        rows = chart.summary()
        if rows:
            parts.append("<table><tr><th>series</th><th>min</th><th>mean</th><th>max</th><th>last</th></tr>")
            parts += [
                f"<tr><td>{html.escape(r['series'])}</td>"
                + "".join(f"<td>{r[k]:.4g}</td>" for k in ("min", "mean", "max", "last"))
                + "</tr>"
                for r in rows
            ]
            parts.append("</table>")
        else:
            parts.append("<p><strong>No data</strong> for this range.</p>")
        queries = "".join(f"<pre><code>{html.escape(query.expr)}</code></pre>" for query in chart.queries)
        parts.append(f"<details><summary>queries</summary>{queries}</details>")
        data = json.dumps(chart.data(), sort_keys=True).replace("</", "<\\/")
        parts.append(f'<script type="application/json" class="chart-data">{data}</script></section>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def build_report(
    prometheus_url: str,
    start: float,
    end: float,
    *,
    slos: Sequence,
    reply_threshold: float,
    scenario: str | None = None,
    rate_interval: float = MIN_RATE_INTERVAL,
    selection: dict[str, str] | None = None,
) -> Report:
    charts = plan(slos, reply_threshold)
    step = collect(Prometheus(prometheus_url), charts, start, end, rate_interval=rate_interval, selection=selection)
    for chart in charts:
        chart.png = draw(chart)
    return Report(prometheus_url, start, end, step, scenario, charts)
