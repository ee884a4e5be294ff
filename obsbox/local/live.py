"""The live terminal summary of the local mode: P95 reply latency, the stage breakdown, SLO burn.

With a local Prometheus the numbers are PromQL over the last minute, the SLO ones from the
generated recording rules. Without one they are computed here, the same way, from two scrapes of
the gateway's ``/metrics`` (bucket deltas, linear interpolation as ``histogram_quantile`` does).
"""

from __future__ import annotations

import math
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from obsbox import conventions as c
from obsbox.dashboards.promapi import Prometheus, PrometheusError
from obsbox.histograms import histogram_quantile

REPLY_THRESHOLD = 0.3  # the seed SLO: ReplyLatency < 300 ms for 95% of replies
OBJECTIVE = 0.95


@dataclass
class Summary:
    p95_reply_seconds: float | None = None
    requests_per_second: float | None = None
    stages_ms: dict[str, float] = field(default_factory=dict)
    burn: dict[str, float] = field(default_factory=dict)  # SLO name → current burn rate
    budget_remaining: dict[str, float] = field(default_factory=dict)
    alerts: list[str] = field(default_factory=list)
    bridge_lines: float | None = None
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
    return summary


def summary_from_prometheus(api: Prometheus) -> Summary:
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
    summary.alerts = sorted(
        f"{s.labels.get('slo')} {s.labels.get('severity')} {s.labels.get('long_window')}/"
        f"{s.labels.get('short_window')} ({s.labels.get('alertstate')})"
        for s in api.query(f'ALERTS{{alertname="{c.SLO_ALERT}"}}')
    )
    summary.bridge_lines = one(f'min(sum by (sink) ({c.BRIDGE_LINES_SHIPPED}{{outcome="delivered"}}))')
    return summary


def render(summary: Summary, elapsed: float) -> str:
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
    if summary.burn:
        lines += ["", "  SLO burn (1.0 spends the budget exactly over the window)"]
        for slo_name, rate in sorted(summary.burn.items()):
            remaining = summary.budget_remaining.get(slo_name)
            left = "" if remaining is None else f", budget left {remaining:6.1%}"
            lines.append(f"    {slo_name:<22} {rate:8.2f}x{left}")
    if summary.alerts:
        lines.append(f"  alerts: {', '.join(summary.alerts)}")
    if summary.bridge_lines is not None:
        lines.append(f"\n  bridge: {summary.bridge_lines:,.0f} log lines delivered to every sink")
    return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:7.0f} ms"


class Live:
    """Collects a Summary from Prometheus if it answers, else from the gateway's /metrics."""

    def __init__(self, gateway_metrics: str, prometheus: str | None) -> None:
        self.gateway_metrics = gateway_metrics
        self.api = Prometheus(prometheus) if prometheus else None
        self.window: list[tuple[float, dict]] = []

    def summary(self, now: float) -> Summary | None:
        if self.api is not None:
            try:
                return summary_from_prometheus(self.api)
            except PrometheusError:
                pass  # not up yet: fall back to scraping
        try:
            self.window.append((now, scrape(self.gateway_metrics)))
        except OSError:
            return None
        self.window = [(t, s) for t, s in self.window if now - t <= 60] or self.window[-1:]
        (t0, first), (t1, last) = self.window[0], self.window[-1]
        return summary_from_scrapes(first, last, t1 - t0) if t1 > t0 else None
