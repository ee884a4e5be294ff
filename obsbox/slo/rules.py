"""Prometheus rules from SLOs, from the log_metrics rules' alerts, and for the GPU autoscaling signals.

One rule group per SLO, so that each evaluation sees the ratios it has just recorded (rules in a group
run in order, at one timestamp): the SLI error ratios over every window, the objective, the error
budget, the burn rates, the budget remaining, then the SRE Workbook's multi-window multi-burn-rate
alerts (``conventions.BURN_THRESHOLDS``; each condition is its own alert, labelled with its windows),
and ``SLONoData`` when the SLI's events have had no series for ``NO_DATA_FOR``: a scrape that stopped,
a renamed metric or a filter that selects nothing leaves every ratio empty, and the burn alerts silent.

Long windows. Windows up to 6h are computed from the raw counters, exactly, as the page alerts need
them fresh. From 1d up (1d, 3d and the 30d period) a ratio would read days of every raw series at
every evaluation, so instead two per-SLO series are recorded first, the error rate and the event rate
over 5m, and a long window is ``sum_over_time(errors) / sum_over_time(events)``: a ratio of sums,
weighted by traffic like the raw ratio, that reads one pre-aggregated series. Sloth averages the 5m
ratio over time, which weighs a quiet night's few requests as much as a busy hour's; Pyrra reads the
raw counters over the whole period. Recording is one series per SLO, whatever the label cardinality.
The period windows need Prometheus to keep that much history (``--storage.tsdb.retention.time``).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from obsbox import conventions
from obsbox.config import ConfigError
from obsbox.durations import format_duration as duration
from obsbox.durations import parse_duration as seconds
from obsbox.logrules import Rule, load_rules
from obsbox.slo import policies
from obsbox.slo.budgets import OVERSPEND_ANNOTATION, SPEND_WINDOW, overspend_text, stage_rules
from obsbox.slo.burnalerts import BurnAlert
from obsbox.slo.policies import PolicyStep
from obsbox.slo.selectors import num
from obsbox.slo.spec import SLO, check

ERROR_EVENTS_RATE = "slo:sli_error_events:rate5m"  # {slo, service}: errors per second over 5m
EVENTS_RATE = "slo:sli_events:rate5m"  # {slo, service}: events per second over 5m
SLICE_ERROR = "slo:sli_slice_error:ratio"  # {slo, service}: the last time slice: 1 bad, 0 good (or its error ratio)
UTC_OFFSET = "slo:calendar_utc_offset:seconds"  # {slo, service}: the calendar's time zone's offset now
PERIOD_INDEX = "slo:calendar_period:index"  # {slo, service}: whole calendar periods since calendar.start, 5m ago
RATE_OVER = "slo:sli_{kind}:rate{window}"  # a calendar period's step, when longer than 5m: the mean 5m rate
NO_DATA_FOR = "10m"  # how long the SLI's events may have no series before SLONoData fires
RECORDED_FROM_SECONDS = 86400  # windows this long or longer are computed from the two series above
ALWAYS_RECORDED = ("5m", "1h")  # whatever the period: the current burn rate and the burn dashboard read them
GPU_MEMORY = "gateway:gpu_memory_utilization:avg"
DECODE_QPS = "gateway:decode_qps:rate1m"
GPU_SCALE_UP_ALERT = "GPUScaleUp"
GPU_SCALE_DOWN_ALERT = "GPUScaleDown"
LOG_ALERT_GROUP = "obsbox-log-metrics-alerts"
GPU_GROUP = "obsbox-gpu-autoscaling"


def slo_windows(slo: SLO) -> list[str]:
    """Every window the SLO's rules record, shortest first; for a 30-day SLO, ``conventions.SLO_WINDOWS``."""
    windows = {w for c in slo.burn_conditions() for w in (c.long_window, c.short_window)}
    windows |= {*ALWAYS_RECORDED, *(duration(seconds(alert.window)) for alert in slo.alerts)}
    if slo.calendar is not None and slo.timeslices is not None:
        windows.add(slo.calendar.step(slo.window))  # the period's mean reads the slices' mean over its step
    return [*sorted(windows, key=seconds), slo.window] if slo.calendar else sorted({*windows, slo.window}, key=seconds)


def rules(slos: Sequence[SLO], log_rules: Sequence[Rule] | None = None) -> dict[str, Any]:
    """The Prometheus rules-file structure: one group per SLO, then the log and GPU alert groups.

    ``log_rules`` are log_metrics ``Rule`` objects; None means the shipped defaults.
    """
    if log_rules is None:
        log_rules = load_rules()
    check(slos, log_rules)
    return {"groups": [*(slo_group(slo) for slo in slos), log_alert_group(log_rules), gpu_group()]}


def slo_group(slo: SLO) -> dict[str, Any]:
    labels = {"slo": slo.name, "service": slo.service}
    budget = num(slo.error_budget)
    filters = slo.matchers

    def record(name: str, expr: str) -> dict[str, Any]:
        return {"record": name, "expr": expr, "labels": dict(labels)}

    def ratio(window: str) -> str:
        return slo.recorded(conventions.SLI_ERROR_RATIO.format(window=window))

    out = [
        record(ERROR_EVENTS_RATE, slo.sli.error_rate_expr("5m", filters)),
        record(EVENTS_RATE, slo.sli.total_rate_expr("5m", filters)),
    ]
    if slo.timeslices is not None:
        length = slo.timeslices.window
        errors, events = slo.sli.error_rate_expr(length, filters), slo.sli.total_rate_expr(length, filters)
        out.append(record(SLICE_ERROR, slo.timeslices.slice_expr(errors, events)))
    if slo.calendar is not None:
        offset = slo.calendar.offset_expr()
        if offset is not None:
            out.append(record(UTC_OFFSET, offset))
        # the period the 5m rates just recorded began in: a sample belongs to the period its window starts in
        index = slo.calendar.index_expr(slo.window, slo.recorded(UTC_OFFSET) if offset else None, "time() - 299")
        out.append(record(PERIOD_INDEX, index))
        step = slo.calendar.step(slo.window)
        if step != "5m" and slo.timeslices is None:
            out += [
                record(RATE_OVER.format(kind=kind, window=step), f"avg_over_time({slo.recorded(five)}[{step}])")
                for kind, five in (("error_events", ERROR_EVENTS_RATE), ("events", EVENTS_RATE))
            ]
    out += [
        record(conventions.SLI_ERROR_RATIO.format(window=window), window_ratio_expr(slo, window))
        for window in slo_windows(slo)
    ]
    out += [
        record(conventions.SLO_OBJECTIVE, f"vector({num(slo.objective)})"),
        record(conventions.SLO_ERROR_BUDGET, f"vector({budget})"),
        record(conventions.SLO_CURRENT_BURN_RATE, f"{ratio('5m')} / {budget}"),
        record(conventions.SLO_PERIOD_BURN_RATE, f"{ratio(slo.window)} / {budget}"),
        record(conventions.SLO_BUDGET_REMAINING, f"1 - {slo.recorded(conventions.SLO_PERIOD_BURN_RATE)}"),
    ]
    overspend = {}
    if slo.budgets is not None:
        named = {"slo": slo.name, "service": str(slo.service)}
        out += stage_rules(slo.budgets, named)
        overspend = {OVERSPEND_ANNOTATION: overspend_text(named)}
    estimate = slo.sli.estimate()
    for condition in slo.burn_conditions():
        factor = num(condition.factor)
        exhausted = duration(seconds(slo.nominal_window) / condition.factor)
        out.append(
            {
                "alert": conventions.SLO_ALERT,
                "expr": f"({ratio(condition.long_window)} / {budget}) >= {factor}\n"
                f"and\n({ratio(condition.short_window)} / {budget}) >= {factor}",
                "labels": {
                    "severity": condition.severity,
                    **labels,
                    "long_window": condition.long_window,
                    "short_window": condition.short_window,
                    **slo.labels,
                },
                "annotations": _annotations(
                    f"{slo.name} ({slo.service}) is burning its error budget {factor}x too fast",
                    f"{slo.description.strip()} Over the last {condition.long_window} and the last "
                    f"{condition.short_window}, the error ratio is at least {factor}x the error budget of "
                    f"{num(slo.error_budget * 100)}% ({num(slo.objective * 100)}% over {slo.period_text}); "
                    f"at this rate the whole budget is spent in {exhausted}."
                    + (f" The SLI is an estimate: {estimate}." if estimate else "")
                    + "".join(
                        f" Stages, mean per request over the last {SPEND_WINDOW}: {text}" for text in overspend.values()
                    ),
                    slo.runbook,
                    slo.runbook_url,
                    policies.dashboard_link(slo, condition.long_window),
                )
                | overspend,
            }
        )
    out += [burn_rate_alert(slo, alert) for alert in slo.alerts]
    out.append(no_data_alert(slo))
    out += [policy_alert(slo, step) for step in slo.policy or ()]
    group: dict[str, Any] = {"name": f"obsbox-slo-{slo.name}"}
    if slo.timeslices is not None:
        group["interval"] = slo.timeslices.window  # one evaluation per slice
    return {**group, "rules": out}


def window_ratio_expr(slo: SLO, window: str) -> str:
    """The SLI's error ratio over ``window``: since the calendar period's start for a calendar SLO's
    period; the mean of the slices for a time-slice SLO; else from the raw counters up to 1d, and from
    the recorded 5m rates for longer windows."""
    slices = slo.recorded(SLICE_ERROR)
    if slo.calendar is not None and window == slo.window:
        index, step = slo.recorded(PERIOD_INDEX), slo.calendar.step(window)
        if slo.timeslices is not None:  # the mean of the step's slices, recorded as a window's ratio
            means = slo.recorded(conventions.SLI_ERROR_RATIO.format(window=step))
            return slo.calendar.period_mean_expr(window, index, means, step)
        rates = [slo.recorded(RATE_OVER.format(kind=kind, window=step)) for kind in ("error_events", "events")]
        return slo.calendar.period_ratio_expr(window, index, (rates[0], rates[1]), step)
    if slo.timeslices is not None:
        return f"avg_over_time({slices}[{window}])"
    if seconds(window) < RECORDED_FROM_SECONDS:
        return slo.error_ratio_expr(window)
    return (
        f"sum_over_time({slo.recorded(ERROR_EVENTS_RATE)}[{window}])\n"
        f"/\nsum_over_time({slo.recorded(EVENTS_RATE)}[{window}])"
    )


def burn_rate_alert(slo: SLO, alert: BurnAlert) -> dict[str, Any]:
    """``SLOBurnRate``: one of the SLO's own single-window burn-rate conditions (obsbox.slo.burnalerts)."""
    window = duration(seconds(alert.window))
    rule: dict[str, Any] = {
        "alert": conventions.SLO_BURN_RATE_ALERT,
        "expr": alert.expr(slo.recorded(conventions.SLI_ERROR_RATIO.format(window=window)), num(slo.error_budget)),
    }
    if alert.hold:
        rule["for"] = alert.hold
    rule["labels"] = {
        "severity": alert.severity,
        "slo": slo.name,
        "service": slo.service or "",
        "window": window,
        "condition": alert.label,
        **slo.labels,
    }
    rule["annotations"] = _annotations(
        f"{slo.name} ({slo.service}): {alert.describe()}",
        f"{slo.description.strip()} The condition {alert.label} holds: the error ratio over the last {window}, "
        f"over the error budget of {num(slo.error_budget * 100)}% ({num(slo.objective * 100)}% over "
        f"{slo.period_text}), is {alert.describe()}.",
        slo.runbook,
        slo.runbook_url,
        policies.dashboard_link(slo, window),
    )
    return rule


def no_data_alert(slo: SLO) -> dict[str, Any]:
    """``SLONoData``: the SLO's recorded event rate is absent, so its burn-rate alerts cannot fire."""
    total = slo.sli.events_source(slo.matchers)
    return {
        "alert": conventions.SLO_NO_DATA_ALERT,
        "expr": f"absent({slo.recorded(EVENTS_RATE)})",
        "for": NO_DATA_FOR,
        "labels": {"severity": "ticket", "slo": slo.name, "service": slo.service or "", **slo.labels},
        "annotations": _annotations(
            f"{slo.name} ({slo.service}) has no data: its burn-rate alerts cannot fire",
            f"No series of {total} (the SLI's events) for {NO_DATA_FOR}.",
            f"Query {total} in Prometheus: no series means the target is not scraped (check its up series) or "
            "the metric was renamed (list the old name under sli.older_names, or fix the spec's name and "
            "filters); series without increase mean no traffic.",
        ),
    }


def policy_alert(slo: SLO, step: PolicyStep) -> dict[str, Any]:
    """A step of the SLO's error-budget policy: an alert on the budget remaining over its period."""
    return {
        "alert": step.name,
        "expr": f"{slo.recorded(conventions.SLO_BUDGET_REMAINING)} {step.comparison}",
        "labels": {"severity": step.severity, "slo": slo.name, "service": slo.service, **slo.labels, **step.labels},
        "annotations": _annotations(
            policies.summary(slo, step),
            policies.description(slo, step),
            slo.runbook,
            slo.runbook_url,
            policies.dashboard_link(slo, slo.nominal_window),
        ),
    }


def log_alert_group(log_rules: Sequence[Rule]) -> dict[str, Any]:
    """An alert per log_metrics rule with an ``alert``: ``rate(series[window]) > threshold`` for ``for``."""
    out = []
    for rule in log_rules:
        spec = rule.alert
        if spec is None:
            continue
        if not rule.action.strip():
            raise ConfigError("a rule with an alert needs an action (the alert's runbook)", key=f"rules.{rule.name}")
        expr = f"rate({rule.series}[{spec.window}]) > {num(spec.threshold)}"
        if spec.threshold <= 0:
            # A labelled counter appears at its first increment, at 1, where rate() sees no increase yet.
            expr = f"{expr}\nor\n({rule.series} > 0 unless {rule.series} offset {spec.window})"
        alert: dict[str, Any] = {
            "alert": "Log" + "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", rule.name)),
            "expr": expr,
        }
        try:
            hold = seconds(spec.for_)
        except ValueError as exc:
            raise ConfigError(str(exc), key=f"rules.{rule.name}.alert.for") from None
        if hold:
            alert["for"] = duration(hold)
        rate = f"above {num(spec.threshold)}/s" if spec.threshold > 0 else "above zero"
        alert["labels"] = {"severity": spec.severity, "log_rule": rule.name}
        alert["annotations"] = _annotations(
            f"Log rule {rule.name}: {rate} over {spec.window}",
            f"{rule.help or rule.metric} The bridge counts {rule.series} from log lines matching "
            f"{rule.regex!r}; its rate over {spec.window} has been {rate}"
            + (f" for {duration(hold)}." if hold else "."),
            rule.action,
        )
        out.append(alert)
    return {"name": LOG_ALERT_GROUP, "rules": out}


def gpu_group() -> dict[str, Any]:
    """The autoscaling signals: fire when both GPU memory and decode QPS stay past their limits."""
    up, down = conventions.GPU_SCALE_UP, conventions.GPU_SCALE_DOWN
    hold = duration(conventions.GPU_SCALE_HOLD_SECONDS)
    decode = f'{conventions.STAGE_DURATION}_count{{stage="decode"}}'

    def signal(name: str, direction: str, op: str, limits: dict[str, float], action: str) -> dict[str, Any]:
        memory, qps = num(limits["gpu_memory_utilization"]), num(limits["decode_qps"])
        return {
            "alert": name,
            "expr": f"{GPU_MEMORY} {op} {memory}\nand\n{DECODE_QPS} {op} {qps}",
            "for": hold,
            "labels": {"severity": "info", "autoscale": direction},
            "annotations": _annotations(
                f"Scale the GPU pool {direction}",
                f"Mean GPU memory utilization {op} {memory} and decode QPS {op} {qps}, both for {hold}.",
                action,
            ),
        }

    return {
        "name": GPU_GROUP,
        "rules": [
            {"record": GPU_MEMORY, "expr": f"avg({conventions.GPU_MEMORY_UTILIZATION})"},
            {"record": DECODE_QPS, "expr": f"sum(rate({decode}[1m]))"},
            signal(GPU_SCALE_UP_ALERT, "up", ">", up, "Add a GPU replica; decode is memory-bound and busy."),
            signal(GPU_SCALE_DOWN_ALERT, "down", "<", down, "Remove a GPU replica; the pool is idle."),
        ],
    }


def _annotations(
    summary: str, description: str, runbook: str, url: str | None = None, dashboard: str | None = None
) -> dict[str, str]:
    out = {"summary": summary, "description": f"{description.strip()} Runbook: {runbook.strip()}"}
    out["runbook"] = runbook.strip()
    if url:
        out["runbook_url"] = url
    if dashboard:
        out["dashboard"] = dashboard
    return out


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(document: dict[str, Any], source: str, slos: Sequence[SLO] = ()) -> str:
    """The rules file's text: a header naming the spec (and the bound of every estimated SLI), then the
    groups, byte-identical run after run."""
    header = f"# Generated by `obsbox slo build` from {source}. Edit that file and rebuild; do not edit this one.\n"
    header += "".join(f"# {line}\n" for line in estimates(slos))
    return header + dump(document)


def estimates(slos: Sequence[SLO]) -> list[str]:
    """One line per SLO whose SLI is an estimate (a threshold off the histogram's buckets), with its bound."""
    return [f"SLO {slo.name} ({slo.service}): {note}." for slo in slos if (note := slo.sli.estimate())]


def dump(document: dict[str, Any]) -> str:
    """A rules document as YAML: keys in order, multi-line expressions as blocks, byte-identical run after run."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=1_000_000, allow_unicode=True)


def up_to_date(path: Path, text: str, rebuild: str) -> bool:
    """Whether the file at ``path`` holds ``text``; says so, or the command (``rebuild``) that fixes it."""
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if current != text:
        print(f"{path} is out of date: run {rebuild}", file=sys.stderr)
        return False
    print(f"{path} is up to date")
    return True


def emit(path: Path | None, text: str) -> int:
    """Write ``text`` to ``path`` (saying so on standard error), or to standard output; exit status 0."""
    if path is None:
        sys.stdout.write(text)
    else:
        write(path, text)
        print(f"wrote {path}", file=sys.stderr)
    return 0


def write(path: str | Path, text: str) -> None:
    """Replace ``path`` atomically: a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
