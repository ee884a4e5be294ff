"""A static HTML report of the core panels for a time range, for people without Grafana and for CI.

It runs the catalog's queries (the same ones the dashboards run) against Prometheus, draws each chart
as a PNG with matplotlib (the ``report`` extra), and writes one self-contained HTML file: the PNGs
are embedded as base64, and the numbers behind every chart are embedded as JSON next to them.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from obsbox import conventions as c
from obsbox.dashboards import queries as q
from obsbox.dashboards import slos as slo_names
from obsbox.dashboards.promapi import Prometheus, Series

if TYPE_CHECKING:
    from matplotlib.figure import Figure

POINTS = 240  # samples per series over the range
MIN_RATE_INTERVAL = 60.0
# The LLM serving breakdown the report draws, from the recorded obsbox:llm_* series (`obsbox llm rules`):
# the signal and its legend. Queue, prefill and decode are phases of a request inside the engine; TTFT
# spans the queue, the prefill and the first token.
LLM_PHASES = {"ttft": "TTFT", "queue": "queue", "prefill": "prefill", "decode": "decode"}


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
    exprs: list[str] = field(default_factory=list)  # the queries as run, template variables filled in
    step: float = 0.0  # seconds between the points Prometheus returned
    span: tuple[float, float] | None = None  # the report's range, drawn whole even where there is no data

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

    @property
    def run_queries(self) -> list[str]:
        """The queries as Prometheus ran them; as written until ``collect`` has filled them in."""
        return self.exprs or [query.expr for query in self.queries]

    def data(self) -> dict:
        return {
            "title": self.title,
            "unit": self.unit,
            "queries": self.run_queries,
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
        "source": selection.get("source", "vllm"),
        "__rate_interval": f"{max(rate_interval, 2 * step):.0f}s",
        "__interval": f"{step:.0f}s",
        "__range": f"{max(end - start, step):.0f}s",
    }


def llm_mean(signal: str, legend: str) -> q.Query:
    """A breakdown signal's mean seconds per request over the chosen sources' models, from the recorded
    rates (sum over sum, so a busy model weighs more than an idle one)."""
    selector = 'source=~"$source", model=~"$model"'
    recorded = f"obsbox:llm_{signal}_seconds"
    expr = q.ratio(
        f"sum by (source) ({recorded}_sum:rate5m{{{selector}}})",
        f"sum by (source) ({recorded}_count:rate5m{{{selector}}})",
    )
    return q.Query(expr, f"{legend} ({{{{source}}}})")


def plan(slos: Sequence, reply_threshold: float) -> list[Chart]:
    """The charts: P95 reply latency against the SLO line, the stage breakdown, the LLM serving
    breakdown under the servers' own names (vLLM's, in the demo), each SLO's burn rates."""
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
        Chart(
            "llm_breakdown",
            "Inference server breakdown (its own metrics, obsbox:llm_*), mean seconds per request",
            "s",
            [llm_mean(signal, legend) for signal, legend in LLM_PHASES.items()],
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
        chart.step, chart.span = step, (start, end)
        chart.exprs = [query.fill(values) for query in chart.queries]
        for query, expr in zip(chart.queries, chart.exprs, strict=True):
            found = prometheus.query_range(expr, start, end, step)
            chart.series += sorted(((series.name(query.legend), series) for series in found), key=_in_stage_order)
    return step


def _in_stage_order(pair: tuple[str, Series]) -> tuple[int, str]:
    """Series of one query: stages in the order a request meets them (as the live summary lists
    them), the rest by name; the queries' own order (burn-rate windows, shortest first) stays."""
    stage = pair[1].labels.get("stage", "")
    return (c.STAGES.index(stage) if stage in c.STAGES else len(c.STAGES), pair[0])


UNITS = {"s": "seconds", "x": "x the error budget"}  # a chart's unit, as its axis names it


def figure(chart: Chart) -> Figure:
    """The chart on a matplotlib Figure (the Agg canvas, no display needed): a gap in the data stays a
    gap, and the legend sits below the axes, off the data."""
    from matplotlib import dates  # noqa: PLC0415
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(10, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(chart.title)
    ax.set_ylabel(UNITS.get(chart.unit, chart.unit))
    ax.grid(True, alpha=0.3)
    # x values are datetimes: matplotlib plots them through the unit converter that matplotlib/dates.py
    # registers for datetime.datetime (units.registry); its type stubs list only numbers and arrays
    if chart.stacked and chart.series:
        times, stacks = _stacks(chart)
        labels = [name for name, _ in chart.series]
        ax.stackplot([_dt(t) for t in times], stacks, labels=labels, alpha=0.85)  # type: ignore[arg-type]  # stubs omit datetimes
    else:
        for name, s in chart.series:
            times, values = _gapped(s.times, s.values, chart.step)
            ax.plot([_dt(t) for t in times], values, label=name, linewidth=1.6)  # type: ignore[arg-type]  # stubs omit datetimes
    for line in chart.lines:
        ax.axhline(line.value, linestyle="--", linewidth=1.2, color="red", alpha=0.8, label=line.label)
    if not chart.has_data:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", fontsize=16, alpha=0.6)
    if chart.span:
        ax.set_xlim(_dt(chart.span[0]), _dt(chart.span[1]))  # type: ignore[arg-type]  # stubs omit datetimes
    ax.xaxis.set_major_formatter(dates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
    if chart.series or chart.lines:
        fig.legend(loc="outside lower center", fontsize=7, ncol=min(5, len(chart.series) + len(chart.lines)))
    return fig


def draw(chart: Chart) -> bytes:
    """The chart as a PNG."""
    buf = io.BytesIO()
    figure(chart).savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


def _gapped(times: list[float], values: list[float], step: float) -> tuple[list[float], list[float]]:
    """The points with a NaN between two that are more than a step apart, so no line is drawn across
    a time without data (Prometheus returns no point there). ``step`` 0: the closest spacing."""
    spacing = step or min((b - a for a, b in itertools.pairwise(times)), default=0.0)
    out_t: list[float] = []
    out_v: list[float] = []
    for i, (t, v) in enumerate(zip(times, values, strict=True)):
        if i and spacing and t - times[i - 1] > 1.5 * spacing:
            out_t.append((t + times[i - 1]) / 2)
            out_v.append(math.nan)
        out_t.append(t)
        out_v.append(v)
    return out_t, out_v


def _stacks(chart: Chart) -> tuple[list[float], list[list[float]]]:
    """Every series on one timeline that keeps its gaps: where one series lacks a point it counts
    as 0, where all lack points (the NaN ``_gapped`` puts between them) the whole stack breaks."""
    timeline = _timeline(chart.series)
    times, marks = _gapped(timeline, [0.0] * len(timeline), chart.step)
    return times, [_on(times, marks, s) for _, s in chart.series]


def _timeline(series: list[tuple[str, Series]]) -> list[float]:
    return sorted({t for _, s in series for t in s.times})


def _on(times: list[float], marks: list[float], s: Series) -> list[float]:
    """The series' values on a shared timeline: 0 where it has no point or a NaN, NaN at a gap (a NaN mark)."""
    points = dict(zip(s.times, s.values, strict=True))
    return [
        mark if math.isnan(mark) else v if math.isfinite(v := points.get(t, 0.0)) else 0.0
        for t, mark in zip(times, marks, strict=True)
    ]


def _value(value: float, unit: str) -> str:
    """A table cell with its unit: seconds as milliseconds, a burn rate as a multiple."""
    if unit == "s":
        return f"{value * 1000:,.0f} ms"
    if unit == "x":
        return f"{value:,.2f}x"
    return f"{value:.4g} {unit}"


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
                + "".join(f"<td>{html.escape(_value(r[k], chart.unit))}</td>" for k in ("min", "mean", "max", "last"))
                + "</tr>"
                for r in rows
            ]
            parts.append("</table>")
        else:
            parts.append("<p><strong>No data</strong> for this range.</p>")
        queries = "".join(f"<pre><code>{html.escape(expr)}</code></pre>" for expr in chart.run_queries)
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
