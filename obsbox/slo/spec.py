"""The SLO spec: the YAML model, its loader and its validation.

A spec file lists SLOs; each names its service, objective, period (``window``), runbook and SLI::

    service: gateway                  # default for every SLO below
    dashboard_url: http://localhost:3000  # Grafana, for the alerts' links to the SLO burn dashboard
    policy:                           # the error-budget policy of every SLO below (obsbox.slo.policies)
      - {below: 10%, severity: page, labels: {action: freeze-deploys}}
    slos:
      - name: ReplyLatency
        objective: 0.95               # a ratio in (0, 1)
        window: 30d                   # the rolling period, 1d to 90d; 30d by default
        # window: 1M                  # with calendar: a calendar period (1d, 1w, 1M, 1Q, 1Y; obsbox.slo.periods)
        # calendar: {start: "2024-01-01 00:00:00", time_zone: UTC}
        # timeslices: {window: 1m, target: 0.95}  # count bad minutes, not events (obsbox.slo.timeslices)
        sli:
          kind: latency               # good = _bucket{le=THRESHOLD}, total = _count
          metric: gateway_reply_latency_seconds
          threshold: 300ms            # a bucket boundary, unless off_bucket or histogram say otherwise
          # off_bucket: interpolate   # refuse (default) | nearest | interpolate: an estimate, bound stated
          # histogram: native         # histogram_fraction(0, threshold, ...): exact at any threshold
          # older_names: [old_name]   # the histogram's names before a rename
        filters: ['route="/v1/chat"'] # label matchers applied to every SLI series
        runbook: What to do when it burns.
        budgets:                      # optional: the threshold split among stages (obsbox.slo.budgets)
          metric: gateway_stage_duration_seconds
          stages: {network: 20ms, context_serialization: 100ms, prefill: 170ms}
          slack: 10ms                 # with the stages, adds up to the threshold
        # policy: []                  # this SLO's own policy, replacing the one above ([]: none)
        # alerts: [{severity: ticket, op: gt, threshold: 2, window: 1d, after: 30m}]  # obsbox.slo.burnalerts
        # objective_of: Reply         # one of several objectives on one SLI (an OpenSLO SLO's): these
        #                             # SLOs may count the same series, each alerting on its own objective
      - name: Availability
        objective: 0.99
        sli:
          kind: availability          # bad/total or good/total counters
          bad: gateway_request_duration_seconds_count{status_code=~"5.."}
          total: gateway_request_duration_seconds_count
        runbook: ...

Every problem is reported as ``file:line: key: what is wrong``.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

from prometheus_client.utils import floatToGoString

from obsbox import conventions
from obsbox.config import ConfigError, Document, KeyPath, build, load_yaml, parse_yaml
from obsbox.durations import format_duration, parse_duration
from obsbox.logrules import STAGE_BUCKETS, Rule, load_rules
from obsbox.slo import policies
from obsbox.slo.budgets import Budgets
from obsbox.slo.burnalerts import BurnAlert
from obsbox.slo.matching import common_series
from obsbox.slo.periods import Calendar
from obsbox.slo.policies import DEFAULT_DASHBOARD_URL, PolicyStep
from obsbox.slo.selectors import (
    LABEL_NAME,
    METRIC_NAME,
    Matcher,
    Selector,
    first_present,
    num,
    parse_matcher,
    parse_selector,
)
from obsbox.slo.timeslices import Timeslices


def _shipped(name: str) -> Path:
    """A data file of this package, as a path (what ``load`` and the commands' --slo option take)."""
    resource = resources.files("obsbox.slo").joinpath(name)
    if not isinstance(resource, Path):  # a zip import: its data files have no path
        raise ImportError(f"obsbox.slo/{name} is not a file on disk; install obsbox unzipped (pip install obsbox)")
    return resource


# The seed spec ships as package data, so an installed obsbox finds it without a checkout;
# compose/slo.yaml is the copy compose mounts, and tests/packaging keeps the two identical.
DEFAULT_SPEC = _shipped("slo.yaml")
# The rules built from it that compose provisions: in a source checkout only; nothing reads it at run
# time (the tests compare it with a fresh build).
DEFAULT_RULES = Path(__file__).resolve().parents[2] / "compose" / "prometheus" / "rules" / "slo.rules.yml"

BASE_PERIOD = "30d"  # conventions.BURN_THRESHOLDS are the SRE Workbook's windows and factors for 30 days
WORKBOOK_PERIODS = ("28d", BASE_PERIOD)  # these keep the workbook's windows (Sloth's google-28d/-30d windows)
PERIOD_RANGE = ("1d", "90d")  # the rolling periods obsbox builds alerts for
SHORTEST_WINDOW = "5m"  # the rate obsbox records; a scaled alert window is never shorter
RESERVED_LABELS = {"slo", "service", "severity", "long_window", "short_window", "window", "condition"}
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
COUNTER_SUFFIXES = ("_total", "_count", "_bucket")  # what a counter's name ends in
RAW_WINDOW = "{{.window}}"  # where a raw ratio expression takes each window (as Sloth's raw SLI queries do)
Problem = tuple[KeyPath, str]


def go_float(value: float) -> str:
    """A float as Prometheus clients write ``le``: floatToGoString, typed."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


def known_histograms(log_rules: Sequence[Rule] | None = None) -> dict[str, tuple[float, ...]]:
    """Histograms obsbox emits, with their bucket boundaries: the gateway's and the bridge's."""
    known = {
        conventions.REQUEST_DURATION: tuple(conventions.REQUEST_BUCKETS),
        conventions.REPLY_LATENCY: tuple(conventions.REPLY_BUCKETS),
        conventions.LOG_STAGE_DURATION: tuple(STAGE_BUCKETS),
    }
    for rule in load_rules() if log_rules is None else log_rules:
        if rule.type == "histogram":
            known[rule.metric] = tuple(rule.buckets)
    return known


@dataclass(frozen=True)
class BurnCondition:
    """Alert when the error ratio is at least ``factor`` times the budget over both windows."""

    severity: str
    factor: float
    long_window: str
    short_window: str


def period_problem(window: str) -> str | None:
    """Why ``window`` is not a rolling period obsbox builds alerts for, or None."""
    if window[-1:] in ("M", "Q", "Y"):
        return (
            f"{window}: a rolling period of months, quarters or years varies in length; write days for a "
            "rolling period (30d, 90d), or make it a calendar period (calendar:, OpenSLO's isRolling: false)"
        )
    low, high = (parse_duration(bound) for bound in PERIOD_RANGE)
    try:
        period = parse_duration(window)
    except ValueError as exc:
        return str(exc)
    if not low <= period <= high or period % 60 or "." in window:  # PromQL ranges take whole numbers
        return (
            f"{window!r} is not an SLO period obsbox supports: a rolling period from {PERIOD_RANGE[0]} to "
            f"{PERIOD_RANGE[1]} in whole minutes, hours, days or weeks (7d, 2w, 36h), since the burn-rate "
            "alert windows scale with it"
        )
    return None


def burn_conditions(window: str) -> list[BurnCondition]:
    """The SRE Workbook's multi-window multi-burn-rate conditions, scaled to the period ``window``.

    Each condition alerts when a share of the budget (2%, 5%, 10%, 10%: the workbook's factors times their
    long windows over 30 days) is spent within its long window, so the factor is that share over the long
    window's share of the period, as Sloth derives its factors (``getBurnRateFactor`` in its
    internal/alert/window.go). 28d and 30d keep the workbook's windows (28d: 13.44x over 1h, Sloth's
    google-28d windows); other periods scale the long windows by period / 30d, rounded to whole minutes, as Pyrra scales
    its windows by period / 28d (``Windows`` in its slo/rules.go); the short window is a twelfth of the long,
    and no window is shorter than the recorded 5m rate (a 1d SLO pages on 2% of its budget within 5m).
    """
    period = parse_duration(window)
    base = parse_duration(BASE_PERIOD)
    keep = any(parse_duration(p) == period for p in WORKBOOK_PERIODS)
    scale = 1.0 if keep else period / base
    shortest = parse_duration(SHORTEST_WINDOW)
    out = []
    for severity, conditions in conventions.BURN_THRESHOLDS.items():
        for factor, long, _short in conditions:  # the workbook's short windows are a twelfth too
            share = factor * parse_duration(long) / base
            long_seconds = max(shortest, round(parse_duration(long) * scale / 60) * 60)
            short_seconds = max(shortest, round(long_seconds / 12 / 60) * 60)
            out.append(
                BurnCondition(
                    severity,
                    round(share * period / long_seconds, 9),
                    format_duration(long_seconds),
                    format_duration(short_seconds),
                )
            )
    return out


@dataclass
class SLI:
    """What counts as an error.

    ``latency``: a request is good when it lands in the histogram bucket ``le=threshold``.
    ``availability``: good/total or bad/total counters, each a series selector.
    """

    kind: Literal["latency", "availability"]
    metric: str | None = None
    threshold: float | None = None
    buckets: list[float] | None = None
    histogram: Literal["classic", "native"] = "classic"
    off_bucket: Literal["refuse", "nearest", "interpolate"] = "refuse"
    older_names: list[str] = field(default_factory=list)
    counters: list[str] = field(default_factory=list)  # counters named without _total (TGI's exporter)
    # good/bad/total are gauges (OpenSLO's counter: false): each window reads their mean (avg_over_time)
    gauges: bool = False
    good: str | None = None
    bad: str | None = None
    total: str | None = None
    # a precomputed ratio (OpenSLO's ratioMetric raw): a series selector, each window its mean
    # (avg_over_time), or a PromQL expression with {{.window}} where each window goes (Sloth's raw SLI)
    raw: str | None = None
    raw_type: Literal["success", "failure"] = "failure"  # whether the raw ratio is of good or bad events

    def problems(self, histograms: Mapping[str, Sequence[float]]) -> list[Problem]:
        if self.kind == "latency":
            return self._latency_problems(histograms)
        return self._availability_problems()

    def _latency_problems(self, histograms: Mapping[str, Sequence[float]]) -> list[Problem]:
        out: list[Problem] = [
            ((key,), "belongs to an availability SLI, not a latency one")
            for key in ("good", "bad", "total")
            if getattr(self, key) is not None
        ]
        if self.gauges:
            out.append((("gauges",), "belongs to an availability SLI: a latency SLI reads a histogram's counters"))
        if self.metric is None:
            return [*out, ((), "a latency SLI needs 'metric' (the histogram's name, without _bucket)")]
        if self.threshold is None:
            return [*out, ((), "a latency SLI needs 'threshold' (seconds, e.g. 300ms)")]
        named: list[tuple[KeyPath, str]] = [(("metric",), self.metric)]
        named += [(("older_names", i), name) for i, name in enumerate(self.older_names)]
        for where, name in named:
            if not METRIC_NAME.fullmatch(name) or name.endswith(("_bucket", "_count", "_sum")):
                out.append((where, f"{name!r}: give the histogram's base name, without _bucket/_count/_sum"))
        if self.threshold <= 0:
            out.append((("threshold",), f"{self.threshold:g} is not a positive duration"))
        if self.histogram == "native":
            return out  # histogram_fraction gives the share under any threshold: no buckets to check
        known = histograms.get(self.metric)
        if known is not None and self.buckets is not None and not _same_buckets(known, self.buckets):
            out.append((("buckets",), f"{self.metric} has the buckets {_list(known)}, not {_list(self.buckets)}"))
        buckets = known if known is not None else self.buckets
        if buckets is None:
            out.append(
                (
                    ("metric",),
                    f"obsbox does not know the buckets of {self.metric}; list them under sli.buckets "
                    "so the threshold can be checked against them",
                )
            )
        elif self.le(buckets) is None:
            lower, upper = self.bucket_around(buckets)
            nearest = f"{lower:g} and {upper:g}" if upper is not None else f"{lower:g} (the last finite one)"
            if self.off_bucket == "refuse":
                out.append(
                    (
                        ("threshold",),
                        f"{self.threshold:g} is not a bucket boundary of {self.metric} (nearest: {nearest}); "
                        "use one of them, or set sli.off_bucket to nearest or interpolate (an estimate), "
                        "or sli.histogram: native if the source sends native histograms",
                    )
                )
            elif upper is None and self.off_bucket == "interpolate":
                out.append(
                    (
                        ("threshold",),
                        f"{self.threshold:g} is above the last finite bucket boundary of {self.metric} "
                        f"({lower:g}): nothing to interpolate towards; use off_bucket: nearest",
                    )
                )
        return out

    def bucket_around(self, buckets: Sequence[float]) -> tuple[float, float | None]:
        """The bucket ``(lower, upper]`` holding the threshold: 0 below the first bound, None past the last."""
        assert self.threshold is not None
        lower = 0.0
        for bound in sorted(buckets):
            if bound >= self.threshold:
                return lower, bound
            lower = bound
        return lower, None

    def estimate(self) -> str | None:
        """What an off-bucket SLI estimates and the bound of its error; None when it counts exactly."""
        buckets = self.buckets
        if self.kind != "latency" or self.histogram == "native" or buckets is None or self.le(buckets) is not None:
            return None
        lower, upper = self.bucket_around(buckets)
        bucket = f"({lower:g}, {upper:g}]" if upper is not None else f"({lower:g}, +Inf)"
        if self.off_bucket == "nearest":
            how = f"counts the requests under {go_float(self._nearest(buckets))} s instead"
        else:
            how = "interpolates linearly inside it"
        return (
            f"{self.threshold:g} s lies inside the bucket {bucket} of {self.metric}: the SLI {how}, so it can "
            f"count wrong at most the requests of that bucket; the error of the good ratio is at most their "
            f"share of all requests"
        )

    def resolve(self, histograms: Mapping[str, Sequence[float]]) -> None:
        """Take the buckets of a histogram obsbox knows, when the spec lists none."""
        if self.kind == "latency" and self.buckets is None and self.metric is not None and self.metric in histograms:
            self.buckets = list(histograms[self.metric])

    def _nearest(self, buckets: Sequence[float]) -> float:
        lower, upper = self.bucket_around(buckets)
        threshold = self.threshold or 0.0
        if upper is None or (lower > 0 and threshold - lower <= upper - threshold):
            return lower
        return upper

    def _availability_problems(self) -> list[Problem]:
        latency_only = {"histogram": "classic", "off_bucket": "refuse", "older_names": []}
        out: list[Problem] = [
            ((key,), "belongs to a latency SLI, not an availability one")
            for key in ("metric", "threshold", "buckets")
            if getattr(self, key) is not None
        ]
        out += [
            ((key,), "belongs to a latency SLI, not an availability one")
            for key, default in latency_only.items()
            if getattr(self, key) != default
        ]
        out += [
            (("counters", i), f"{name!r} is not a metric name")
            for i, name in enumerate(self.counters)
            if not METRIC_NAME.fullmatch(name)
        ]
        if self.raw is not None:
            return out + self._raw_problems()
        if self.raw_type != "failure":
            out.append((("raw_type",), "belongs to a raw ratio (sli.raw)"))
        if self.total is None:
            out.append(((), "an availability SLI needs 'total' (the counter of all events)"))
        if (self.good is None) == (self.bad is None):
            out.append(((), "an availability SLI needs exactly one of 'good' or 'bad' (besides 'total')"))
        for key in ("good", "bad", "total"):
            text = getattr(self, key)
            if text is None:
                continue
            error = _error(parse_selector, text)
            metric = parse_selector(text).metric if error is None else ""
            counter = metric.endswith(COUNTER_SUFFIXES) or metric in self.counters
            if error is None and not self.gauges and not counter:
                error = (
                    f"{metric} is not a counter (counters end in _total, _count or _bucket; "
                    "list a counter named otherwise under sli.counters, or say sli.gauges: true)"
                )
            if error:
                out.append(((key,), error))
        return out

    def _raw_problems(self) -> list[Problem]:
        out: list[Problem] = [
            ((key,), "a raw ratio stands alone: no good, bad, total, gauges or counters beside it")
            for key in ("good", "bad", "total", "gauges", "counters")
            if getattr(self, key)
        ]
        if self.raw_type not in ("success", "failure"):
            out.append((("raw_type",), f"{self.raw_type!r}: success (good / total) or failure (bad / total)"))
        if not self.raw_template and (error := _error(parse_selector, str(self.raw))):
            out.append((("raw",), f"{error}; or a PromQL expression with {RAW_WINDOW} where each window goes"))
        return out

    @property
    def raw_template(self) -> bool:
        """Whether ``raw`` is an expression with ``{{.window}}``, not a series selector."""
        return self.raw is not None and RAW_WINDOW in self.raw

    def _raw_ratio(self, window: str, filters: Sequence[Matcher]) -> str:
        """The raw ratio over ``window``: the template with the window, or the mean of the selector's series."""
        if self.raw_template:
            return "(" + str(self.raw).strip().replace(RAW_WINDOW, window) + ")"
        return f"avg(avg_over_time({parse_selector(str(self.raw)).where(*filters)}[{window}]))"

    def le(self, buckets: Sequence[float]) -> str | None:
        """The ``le`` label value of the threshold's bucket, as the Prometheus clients write it."""
        for bound in buckets:
            if self.threshold is not None and math.isclose(bound, self.threshold, rel_tol=1e-9):
                return go_float(bound)
        return None

    def le_matcher(self, bound: float | None = None) -> Matcher:
        """The threshold's bucket (or ``bound``'s): ``le="0.3"``; a whole number matches both "1" (Go
        clients, Prometheus 2) and "1.0" (the Python client, and Prometheus 3, which normalizes ``le``)."""
        le = go_float(float(f"{self.threshold:.12g}") if bound is None else bound)
        if le.endswith(".0"):
            return Matcher("le", "=~", f"{le[:-2]}|{le}")
        return Matcher("le", "=", le)

    def _sum_rate(self, suffix: str, window: str, matchers: Sequence[Matcher]) -> str:
        """``sum(rate(METRIC_suffix{matchers}[window]))``; with older names, the first each target exposes."""
        names = [self.metric or "", *self.older_names]
        rates = [f"rate({Selector(name + suffix, tuple(matchers))}[{window}])" for name in names]
        return f"sum({rates[0] if len(rates) == 1 else first_present(rates)})"

    def _good_rate(self, window: str, filters: Sequence[Matcher]) -> str:
        """Requests per second under the threshold (classic histograms: exact, nearest or interpolated)."""
        buckets = self.buckets
        if buckets is None or self.le(buckets) is not None:
            return f"{self._sum_rate('_bucket', window, (*filters, self.le_matcher()))} or vector(0)"
        if self.off_bucket == "nearest":
            near = self.le_matcher(self._nearest(buckets))
            return f"{self._sum_rate('_bucket', window, (*filters, near))} or vector(0)"
        lower, upper = self.bucket_around(buckets)
        assert upper is not None and self.threshold is not None
        share = num((self.threshold - lower) / (upper - lower))
        above = f"{share} * ({self._sum_rate('_bucket', window, (*filters, self.le_matcher(upper)))} or vector(0))"
        if lower == 0:
            return above
        below = f"({self._sum_rate('_bucket', window, (*filters, self.le_matcher(lower)))} or vector(0))"
        return f"{num(1 - float(share))} * {below}\n+ {above}"

    def selectors(self, filters: Sequence[Matcher] = ()) -> tuple[Selector, Selector, bool]:
        """``(events, total, events_are_errors)``: the SLI's two counters, with ``filters`` applied."""
        if self.kind == "latency":
            good = Selector(f"{self.metric}_bucket", (*filters, self.le_matcher()))
            return good, Selector(f"{self.metric}_count", tuple(filters)), False
        if self.raw is not None and not self.raw_template:
            ratio = parse_selector(self.raw).where(*filters)
            return ratio, ratio, self.raw_type == "failure"
        counted = self.bad if self.bad is not None else self.good
        if counted is None or self.total is None:
            raise ValueError("a ratio SLI needs good or bad, and total")
        events = parse_selector(counted).where(*filters)
        return events, parse_selector(self.total).where(*filters), self.bad is not None

    def named_selectors(self, filters: Sequence[Matcher] = ()) -> list[tuple[Selector, Selector, bool]]:
        """``selectors`` under the histogram's name and under each of its ``older_names``: every series
        the SLI may read."""
        if self.raw_template:
            return []  # an expression: no series to compare with another SLI's
        current = self.selectors(filters)
        if self.kind != "latency":
            return [current]
        older = [
            (Selector(f"{name}_bucket", current[0].matchers), Selector(f"{name}_count", current[1].matchers), False)
            for name in self.older_names
        ]
        return [current, *older]

    def error_rate_expr(self, window: str, filters: Sequence[Matcher] = ()) -> str:
        """Errors per second over ``window``, summed over every matching series."""
        total = self.total_rate_expr(window, filters)
        if self.kind == "latency" and self.histogram == "native":
            whole = self._sum_rate("", window, filters)
            good = f"{total} * histogram_fraction(0, {num(self.threshold or 0)}, {whole}) >= 0"
            return f"{total} - ({good} or vector(0))"
        if self.kind == "latency":
            return f"{total} - ({self._good_rate(window, filters)})"
        if self.raw is not None:  # a ratio: its errors per event, of one event per second
            ratio = self._raw_ratio(window, filters)
            return ratio if self.raw_type == "failure" else f"1 - {ratio}"
        events, _, are_errors = self.selectors(filters)
        counted = f"sum({self._over_time}({events}[{window}])) or vector(0)"
        return counted if are_errors else f"{total} - ({counted})"

    def total_rate_expr(self, window: str, filters: Sequence[Matcher] = ()) -> str:
        """Events per second over ``window``."""
        if self.kind == "latency" and self.histogram == "native":
            return f"histogram_count({self._sum_rate('', window, filters)})"
        if self.kind == "latency":
            return self._sum_rate("_count", window, filters)
        if self.raw is not None:  # 1 while the ratio has a value: each window's error ratio is the ratio's
            return f"({self._raw_ratio(window, filters)} * 0 + 1)"
        return f"sum({self._over_time}({self.selectors(filters)[1]}[{window}]))"

    @property
    def _over_time(self) -> str:
        """How a ratio SLI's series are read over a window: counters' per-second rate, or gauges' mean
        (their ratio over a window is then the ratio of the means, as OpenSLO's counter: false reads)."""
        return "avg_over_time" if self.gauges else "rate"

    def events_source(self, filters: Sequence[Matcher] = ()) -> str:
        """What the SLI's events are read from, in words for an alert: the total's selector, or the raw query."""
        return (
            f"the raw ratio {self.raw.strip()}"
            if self.raw is not None and self.raw_template
            else str(self.selectors(filters)[1])
        )

    def error_ratio_expr(self, window: str, filters: Sequence[Matcher] = ()) -> str:
        """The share of events over ``window`` that are errors (NaN when there were none)."""
        return f"({self.error_rate_expr(window, filters)})\n/\n{self.total_rate_expr(window, filters)}"


@dataclass
class SLO:
    name: str
    sli: SLI
    objective: float
    runbook: str
    service: str | None = None
    window: str = "30d"
    description: str = ""
    runbook_url: str | None = None
    filters: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    budgets: Budgets | None = None  # a latency SLO's threshold split among its stages (budgets.py)
    policy: list[PolicyStep] | None = None  # None: the spec's (obsbox.slo.policies)
    dashboard_url: str | None = None  # Grafana's base URL for the alerts' dashboard links
    calendar: Calendar | None = None  # the window is a calendar period (1M, 1Q, 1w) from calendar.start
    timeslices: Timeslices | None = None  # budget slices of time, not events (obsbox.slo.timeslices)
    # one of several objectives on one SLI (an OpenSLO SLO's objectives, each its own obsbox SLO with its
    # own alerts, as Nobl9 alerts per objective): SLOs of one objective_of may count the same series
    objective_of: str | None = None
    alerts: list[BurnAlert] = field(default_factory=list)  # single-window conditions (obsbox.slo.burnalerts)

    def inherit(self, spec: SpecFile) -> None:
        """Take the spec-wide settings this SLO does not set itself."""
        if self.service is None:
            self.service = spec.service
        if self.policy is None:
            self.policy = copy.deepcopy(spec.policy)
        if self.dashboard_url is None:
            self.dashboard_url = spec.dashboard_url

    @property
    def error_budget(self) -> float:
        return 1.0 - self.objective

    @property
    def matchers(self) -> tuple[Matcher, ...]:
        return tuple(parse_matcher(text) for text in self.filters)

    def error_ratio_expr(self, window: str) -> str:
        """The PromQL error ratio over ``window``, computed from the raw series (filters applied)."""
        return self.sli.error_ratio_expr(window, self.matchers)

    def recorded(self, metric: str) -> str:
        """A recorded SLO series of this SLO: ``metric{service="...",slo="..."}``."""
        return str(Selector(metric, self.identity))

    @property
    def identity(self) -> tuple[Matcher, ...]:
        return (Matcher("service", "=", self.service or ""), Matcher("slo", "=", self.name))

    @property
    def nominal_window(self) -> str:
        """The rolling length the alert windows scale with: the window, or a calendar period's nominal
        length (1M: 30d)."""
        return self.window if self.calendar is None else self.calendar.nominal(self.window)

    @property
    def period_text(self) -> str:
        """The period in words: 30d, or 1 calendar month from 2024-01-01 00:00:00 UTC."""
        return self.window if self.calendar is None else self.calendar.describe(self.window)

    def burn_conditions(self) -> list[BurnCondition]:
        """The SRE Workbook's four conditions for this SLO's period (:func:`burn_conditions`)."""
        return burn_conditions(self.nominal_window)

    def shared_series(self, other: SLO) -> Selector | None:
        """A series this SLO's SLI and ``other``'s both count, and count alike (both as errors, or both as
        good events), for the same service: the two would alert twice on one fault. None when there is none."""
        if self.service != other.service or self.sli.kind != other.sli.kind:
            return None
        if self.objective_of is not None and self.objective_of == other.objective_of:
            return None  # objectives of one SLO: one SLI by design
        for mine in self.sli.named_selectors(self.matchers):
            for theirs in other.sli.named_selectors(other.matchers):
                if mine[2] != theirs[2]:
                    continue
                events, total = common_series(mine[0], theirs[0]), common_series(mine[1], theirs[1])
                if events is not None and total is not None:
                    return events
        return None

    def overlap_problem(self, others: Sequence[tuple[str, SLO]]) -> str | None:
        """Why this SLO may not sit beside ``others`` (each with where it is), or None."""
        for where, other in others:
            if (series := self.shared_series(other)) is not None:
                return (
                    f"counts the same series as {where}, such as {series}: "
                    "two SLOs on one SLI alert twice; give them filters that select different series, or keep one"
                )
        return None

    def problems(self, histograms: Mapping[str, Sequence[float]]) -> list[Problem]:
        """Everything wrong with this SLO, as (key path, message) pairs."""
        out: list[Problem] = []
        if not _NAME.fullmatch(self.name):
            out.append((("name",), f"{self.name!r}: use letters, digits, '_' and '-', starting with a letter"))
        if self.service is None:
            out.append(((), "missing required key 'service' (or set 'service' at the top of the file)"))
        if self.calendar is not None:
            period = self.calendar.problems(self.window)
        elif (error := period_problem(self.window)) is not None:
            period = [(("window",), error)]
        else:
            period = []
        out += period
        if self.timeslices is not None:
            out += [(("timeslices", *key), message) for key, message in self.timeslices.problems()]
        if not period:
            out += self._objective_problems()  # the fastest alert's factor depends on the period
        if not self.runbook.strip():
            out.append((("runbook",), "must say what to do when the SLO burns"))
        out += [
            (("filters", i), error) for i, text in enumerate(self.filters) if (error := _error(parse_matcher, text))
        ]
        if self.filters and self.sli.raw_template:
            out.append((("filters",), "a raw ratio expression takes no filters: write the matchers into sli.raw"))
        out += [
            (("labels", label), f"{label!r} is reserved or not a label name")
            for label in self.labels
            if label in RESERVED_LABELS or not LABEL_NAME.fullmatch(label)
        ]
        if self.budgets is not None:
            out += [
                (("budgets", *key), message)
                for key, message in self.budgets.problems(self.sli.kind, self.sli.threshold)
            ]
        out += policies.problems(self.policy or [], RESERVED_LABELS) + policies.url_problems(self.dashboard_url)
        if not period:
            out += [
                (("alerts", i, *key), message)
                for i, alert in enumerate(self.alerts)
                for key, message in alert.problems(self.nominal_window)
            ]
        return out + [(("sli", *key), message) for key, message in self.sli.problems(histograms)]

    def _objective_problems(self) -> list[Problem]:
        if not 0.0 < self.objective < 1.0:
            return [(("objective",), f"{self.objective:g} is not a ratio in (0, 1); write 0.95 for 95%")]
        fastest = max(c.factor for c in self.burn_conditions())
        if fastest * self.error_budget <= 1:
            return []
        least = math.ceil((1 - 1 / fastest) * 1e4) / 1e4
        return [
            (
                ("objective",),
                f"at {self.objective:g} the fastest burn-rate alert ({fastest:g}x the error budget) would need "
                f"more errors than events, so it could never fire; use an objective of at least {least:g}",
            )
        ]


@dataclass
class SpecFile:
    slos: list[SLO]
    service: str | None = None
    policy: list[PolicyStep] = field(default_factory=list)  # every SLO's that has none of its own
    dashboard_url: str = DEFAULT_DASHBOARD_URL


def load(path: str | Path, log_rules: Sequence[Rule] | None = None) -> list[SLO]:
    """The SLOs of a spec file, validated; a located ConfigError on the first problem."""
    return _load(load_yaml(path), log_rules)


def loads(text: str, source: str = "<slo spec>", log_rules: Sequence[Rule] | None = None) -> list[SLO]:
    """As ``load``, from YAML text."""
    return _load(parse_yaml(text, source=source), log_rules)


def _load(doc: Document, log_rules: Sequence[Rule] | None) -> list[SLO]:
    spec = build(SpecFile, doc.data, doc)
    histograms = known_histograms(log_rules)
    seen: dict[str, int] = {}
    for key, message in policies.problems(spec.policy, RESERVED_LABELS) + policies.url_problems(spec.dashboard_url):
        raise doc.error(key, message)
    for i, slo in enumerate(spec.slos):
        slo.inherit(spec)
        slo.sli.resolve(histograms)
        for key, message in slo.problems(histograms):
            raise doc.error(("slos", i, *key), message)
        if slo.name in seen:
            raise doc.error(("slos", i, "name"), f"{slo.name!r} is already the name of slos[{seen[slo.name]}]")
        if overlap := slo.overlap_problem([(f"slos[{j}] ({name})", spec.slos[j]) for name, j in seen.items()]):
            raise doc.error(("slos", i, "sli"), overlap)
        seen[slo.name] = i
    if not spec.slos:
        raise doc.error(("slos",), "lists no SLOs")
    return spec.slos


def check(slos: Sequence[SLO], log_rules: Sequence[Rule] | None = None) -> None:
    """Validate SLOs built in Python (``load`` already does this); ConfigError naming the SLO and key."""
    histograms = known_histograms(log_rules)
    names = [slo.name for slo in slos]
    for slo in slos:
        slo.sli.resolve(histograms)
        for key, message in slo.problems(histograms):
            raise ConfigError(message, source=f"SLO {slo.name}", key=".".join(map(str, key)) or None)
        if names.count(slo.name) > 1:
            raise ConfigError("two SLOs have this name", source=f"SLO {slo.name}", key="name")
    for i, slo in enumerate(slos):
        if overlap := slo.overlap_problem([(f"SLO {other.name}", other) for other in slos[:i]]):
            raise ConfigError(overlap, source=f"SLO {slo.name}", key="sli")


def _error(parse: Callable[[str], object], text: str) -> str | None:
    """What ``parse`` finds wrong with ``text``, or None."""
    try:
        parse(text)
    except ValueError as exc:
        return str(exc)
    return None


def _same_buckets(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-9) for x, y in zip(a, b, strict=True))


def _list(values: Sequence[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)
