"""The live terminal summary of the local mode: P95 reply latency, the stage breakdown, the inference
backend's own breakdown (from vLLM's names, through the LLM recording rules), SLO burn.

With a local Prometheus the numbers are PromQL over the last minute, the SLO ones from the
generated recording rules. Without one they are computed here, the same way, from two scrapes of
the gateway's ``/metrics`` (bucket deltas, linear interpolation as ``histogram_quantile`` does).

A window holding less data than its length reads only the minutes it has: in the first minutes a
5m burn rate is a 2-minute one, and a 30-day budget "left" extrapolates those minutes to 30 days
(-1850%). So, as Sloth's and Pyrra's users would expect, a burn rate is marked "(warming up: N of 5
minutes)" until its window is full, the period's budget is how long it lasts at the rate so far
until the period holds that much data, and a firing alert says which of its windows is not full yet.
"""

from __future__ import annotations

import math
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from obsbox import conventions as c
from obsbox.dashboards.promapi import Prometheus, PrometheusError
from obsbox.durations import format_duration, parse_duration
from obsbox.histograms import histogram_quantile
from obsbox.slo.budgets import OVERSPEND_ANNOTATION
from obsbox.slo.rules import EVENTS_RATE, NO_DATA_FOR

BACKEND = "vllm"  # the LLM source the demo's simulated inference backend is (obsbox llm rules)
BACKEND_PHASES = ("ttft", "queue", "prefill", "decode")
REPLY_THRESHOLD = 0.3  # the seed SLO: ReplyLatency < 300 ms for 95% of replies
OBJECTIVE = 0.95
CURRENT_WINDOW = 300.0  # the window of SLO_CURRENT_BURN_RATE (its rule divides the 5m error ratio)
SCRAPE_WINDOW = 60.0  # without Prometheus: how far back the two scrapes compared reach


@dataclass
class Alert:
    slo: str
    severity: str
    long_window: str
    short_window: str
    state: str


@dataclass
class Summary:
    p95_reply_seconds: float | None = None
    requests_per_second: float | None = None
    stages_ms: dict[str, float] = field(default_factory=dict)
    burn: dict[str, float] = field(default_factory=dict)  # SLO name → current burn rate
    burn_window: float = CURRENT_WINDOW  # seconds the current burn rate reaches back
    budget_remaining: dict[str, float] = field(default_factory=dict)
    held: dict[tuple[str, float], float] = field(default_factory=dict)  # (SLO, window) → seconds of data in it
    periods: dict[str, float] = field(default_factory=dict)  # SLO name → its period (window) in seconds
    alerts: list[Alert] = field(default_factory=list)
    no_data: dict[str, str] = field(default_factory=dict)  # SLO name → SLONoData's state (pending, firing)
    overspend: dict[str, str] = field(default_factory=dict)  # SLO name → its alerts' stages over budget
    bridge_lines: float | None = None
    backend_ms: dict[str, float] = field(default_factory=dict)  # LLM signal → mean ms, from vLLM's names
    backend_cache_hit: float | None = None  # the backend's prefix-cache hit ratio
    source: str = ""


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=3) as resp:
        text = resp.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def summary_from_scrapes(before: dict, after: dict, seconds: float) -> Summary:
    """What Prometheus would say, from two scrapes ``seconds`` apart."""
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    buckets: dict[float, float] = {}
    for (name, labels), value in delta.items():
        if name == f"{c.REPLY_LATENCY}_bucket":
            bound = float(dict(labels)["le"])
            buckets[bound] = buckets.get(bound, 0.0) + value
    total = buckets.get(math.inf, 0.0)
    summary = Summary(source="gateway /metrics")
    p95 = histogram_quantile(0.95, list(buckets.items()))
    summary.p95_reply_seconds = None if math.isnan(p95) else p95
    summary.requests_per_second = sum(v for (n, _), v in delta.items() if n == f"{c.REQUEST_DURATION}_count") / seconds
    sums: dict[str, list[float]] = {}
    for (name, labels), value in delta.items():
        stage = dict(labels).get("stage")
        if stage and name.startswith(c.STAGE_DURATION) and name.endswith(("_sum", "_count")):
            pair = sums.setdefault(stage, [0.0, 0.0])
            pair[0 if name.endswith("_sum") else 1] += value
    summary.stages_ms = {stage: 1000 * s / n for stage, (s, n) in sums.items() if n}
    if total:
        errors = 1 - buckets.get(REPLY_THRESHOLD, 0.0) / total
        summary.burn["ReplyLatency"] = errors / (1 - OBJECTIVE)
        summary.burn_window = SCRAPE_WINDOW
        summary.held["ReplyLatency", SCRAPE_WINDOW] = seconds
    return summary


def summary_from_prometheus(api: Prometheus, interval: float, periods: dict[str, float]) -> Summary:
    """The summary from the recording rules; ``interval`` is their evaluation interval in seconds,
    ``periods`` each SLO's period, so that a window's data can be told from its length."""

    def one(expr: str) -> float | None:
        values = [v for s in api.query(expr) for v in s.finite]
        return values[-1] if values else None

    def by(expr: str, label: str) -> dict[str, float]:
        return {s.labels.get(label, ""): s.finite[-1] for s in api.query(expr) if s.finite}

    summary = Summary(source="Prometheus")
    summary.p95_reply_seconds = one(f"histogram_quantile(0.95, sum by (le) (rate({c.REPLY_LATENCY}_bucket[1m])))")
    summary.requests_per_second = one(f"sum(rate({c.REQUEST_DURATION}_count[1m]))")
    summary.stages_ms = {
        k: v * 1000
        for k, v in by(
            f"sum by (stage) (rate({c.STAGE_DURATION}_sum[1m])) / sum by (stage) (rate({c.STAGE_DURATION}_count[1m]))",
            "stage",
        ).items()
    }
    summary.burn = by(c.SLO_CURRENT_BURN_RATE, "slo")
    summary.budget_remaining = by(c.SLO_BUDGET_REMAINING, "slo")
    summary.periods = periods
    labels = ("slo", "severity", "long_window", "short_window", "alertstate")
    summary.alerts = sorted(
        (Alert(*(s.labels.get(k, "") for k in labels)) for s in api.query(f'ALERTS{{alertname="{c.SLO_ALERT}"}}')),
        key=lambda a: (a.slo, a.severity, parse_duration(a.long_window or "0s")),
    )
    summary.no_data = {
        s.labels.get("slo", ""): s.labels.get("alertstate", "")
        for s in api.query(f'ALERTS{{alertname="{c.SLO_NO_DATA_ALERT}"}}')
    }
    summary.overspend = {
        alert["labels"].get("slo", ""): text
        for alert in api.alerts()
        if alert["labels"].get("alertname") == c.SLO_ALERT and (text := alert["annotations"].get(OVERSPEND_ANNOTATION))
    }
    # the rules record the 5m event rate once per evaluation from the gateway's second scrape on, so
    # its samples in a window, times the interval, are the data the window holds (earlier runs count)
    windows = {CURRENT_WINDOW, *periods.values(), *(parse_duration(a.long_window) for a in summary.alerts)}
    for window in windows:
        for name, count in by(f"count_over_time({EVENTS_RATE}[{format_duration(window)}])", "slo").items():
            summary.held[name, window] = count * interval
    summary.bridge_lines = one(f'min(sum by (sink) ({c.BRIDGE_LINES_SHIPPED}{{outcome="delivered"}}))')
    for phase in BACKEND_PHASES:
        recorded = f'obsbox:llm_{phase}_seconds_%s:rate5m{{source="{BACKEND}"}}'
        mean = one(f"sum({recorded % 'sum'}) / sum({recorded % 'count'})")
        if mean is not None:
            summary.backend_ms[phase] = mean * 1000
    summary.backend_cache_hit = one(f'avg(obsbox:llm_cache_hit:ratio{{source="{BACKEND}"}})')
    return summary


def render(summary: Summary, elapsed: float, footer: list[str] | None = None) -> str:
    p95 = summary.p95_reply_seconds
    verdict = "" if p95 is None else ("  over the 300 ms SLO" if p95 > REPLY_THRESHOLD else "  within the 300 ms SLO")
    lines = [f"obsbox local mode, {elapsed:5.0f} s  (numbers over the last minute, from {summary.source})", ""]
    lines.append(f"  P95 reply latency   {_ms(p95)}{verdict}")
    rps = summary.requests_per_second
    lines.append(f"  requests            {'-' if rps is None else f'{rps:.1f}/s'}")
    if summary.stages_ms:
        lines += ["", "  stage breakdown (mean ms per request)"]
        total = sum(summary.stages_ms.values()) or 1.0
        for stage in sorted(summary.stages_ms, key=lambda s: c.STAGES.index(s) if s in c.STAGES else 99):
            ms = summary.stages_ms[stage]
            lines.append(f"    {stage:<22} {ms:8.1f}  {'#' * round(30 * ms / total)}")
    if summary.backend_ms:
        lines += [
            "",
            f'  inference backend, from its own vLLM metrics (obsbox:llm_*{{source="{BACKEND}"}}, mean ms over 5m)',
        ]
        phases = "  ".join(f"{phase} {ms:.1f}" for phase, ms in summary.backend_ms.items())
        hits = "" if summary.backend_cache_hit is None else f"  prefix-cache hits {summary.backend_cache_hit:.0%}"
        lines.append(f"    {phases}{hits}")
    if summary.burn:
        window = format_duration(summary.burn_window)
        lines += ["", f"  SLO burn over {window} (1.0x spends the budget exactly over the SLO's period)"]
        for slo_name, rate in sorted(summary.burn.items()):
            data = summary.held.get((slo_name, summary.burn_window), 0.0)
            young = "" if data >= summary.burn_window else f"  ({warming(data, summary.burn_window)})"
            lines += [f"    {slo_name:<22} {rate:8.2f}x{young}", *_budget(summary, slo_name)]
    if summary.alerts or summary.no_data:
        lines += ["", "  alerts (a burn alert fires when both its windows burn faster than its factor)"]
        lines += [
            f"    {slo_name} {c.SLO_NO_DATA_ALERT} ({state}): its SLI has no series for {NO_DATA_FOR}, "
            "so its burn alerts cannot fire"
            for slo_name, state in sorted(summary.no_data.items())
        ]
        for alert in summary.alerts:
            long = parse_duration(alert.long_window or "0s")
            data = summary.held.get((alert.slo, long), 0.0)
            note = "" if data >= long else f"; the {alert.long_window} window is {warming(data, long)}"
            lines.append(
                f"    {alert.slo} {alert.severity} {alert.long_window}/{alert.short_window} ({alert.state}{note})"
            )
        lines += [f"    {slo_name} stage budgets: {text}" for slo_name, text in sorted(summary.overspend.items())]
    if summary.bridge_lines is not None:
        lines.append(f"\n  bridge: {summary.bridge_lines:,.0f} log lines delivered to every sink")
    if footer:
        lines += ["", *footer]
    return "\n".join(lines)


def warming(data: float, window: float) -> str:
    """How much of its length a window holds: "warming up: 2 of 5 minutes", "12 minutes of 30 days"."""
    (have, have_unit), (want, want_unit) = _amount(data), _amount(window)
    shown = round(have)  # the number printed decides the plural: "1 minute", not "1 minutes" for 1.4
    if have_unit == want_unit:
        return f"warming up: {shown} of {want:g} {_plural(want_unit, want)}"
    return f"warming up: {shown} {_plural(have_unit, shown)} of {want:g} {_plural(want_unit, want)}"


def _amount(seconds: float) -> tuple[float, str]:
    """Seconds in the largest unit that leaves at least two: minutes, hours or days."""
    for unit, name in ((86400, "day"), (3600, "hour")):
        if seconds >= 2 * unit:
            return seconds / unit, name
    return seconds / 60, "minute"


def _plural(unit: str, count: float) -> str:
    return unit if round(count, 1) == 1 else f"{unit}s"


def _budget(summary: Summary, slo_name: str) -> list[str]:
    """The period's budget left once the period holds that much data; until then, how long it lasts."""
    remaining = summary.budget_remaining.get(slo_name)
    period = summary.periods.get(slo_name)
    if remaining is None or period is None:
        return []
    data = summary.held.get((slo_name, period), 0.0)
    name = format_duration(period)
    if data >= period:
        return [f"      budget left over {name}: {remaining:.1%}"]
    spent = 1 - remaining  # the period burn rate: the budget the rate so far would spend over the period
    amount, unit = _amount(period / spent) if spent > 0 else (0.0, "")
    lasts = f"lasts {amount:.1f} {_plural(unit, amount)}" if spent > 0 else "is not being spent"
    return [f"      {name} budget: {warming(data, period)}; at the rate so far it {lasts}"]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:7.0f} ms"


class Live:
    """Collects a Summary from Prometheus if it answers, else from the gateway's /metrics."""

    def __init__(
        self,
        gateway_metrics: str,
        prometheus: str | None,
        interval: float = 5.0,
        periods: dict[str, float] | None = None,
    ) -> None:
        self.gateway_metrics = gateway_metrics
        self.api = Prometheus(prometheus) if prometheus else None
        self.interval = interval
        self.periods = periods or {}
        self.window: list[tuple[float, dict]] = []

    def summary(self, now: float) -> Summary | None:
        if self.api is not None:
            try:
                return summary_from_prometheus(self.api, self.interval, self.periods)
            except PrometheusError:
                pass  # not up yet: fall back to scraping
        try:
            self.window.append((now, scrape(self.gateway_metrics)))
        except OSError:
            return None
        self.window = [(t, s) for t, s in self.window if now - t <= SCRAPE_WINDOW] or self.window[-1:]
        (t0, first), (t1, last) = self.window[0], self.window[-1]
        return summary_from_scrapes(first, last, t1 - t0) if t1 > t0 else None
