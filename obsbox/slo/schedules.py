"""What a generated test's schedule of traffic burns over a window, as the rules would read it.

A schedule is a run of segments, each ``minutes`` of traffic burning the error budget at ``burn`` (or
no series at all). The burn over a window is worked out from the schedule alone, never from the rules
under test, in every way Prometheus may cut the window (a range's first sample, the 5m rates a long
window sums); a comparison the cuts disagree on, or that lands within ``MARGIN`` of its threshold, is
not checked (None).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from obsbox.durations import parse_duration as seconds
from obsbox.slo import slicetests
from obsbox.slo.rules import RECORDED_FROM_SECONDS
from obsbox.slo.selectors import num
from obsbox.slo.spec import SLO

PER_MINUTE = slicetests.PER_MINUTE  # events per minute
STEP = 5  # minutes between rule evaluations, and between the minutes checked
MARGIN = 0.01  # a window this close to a threshold is not checked
OPS = {
    "gt": lambda a, b: a > b,
    "gte": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "lte": lambda a, b: a <= b,
}


class UntestableError(Exception):
    """An SLO whose SLI the generated series cannot express; the message says why."""


@dataclass(frozen=True)
class Segment:
    """``minutes`` of traffic burning the error budget at ``burn``; no series at all when not ``present``."""

    minutes: int
    burn: float = 0.0
    present: bool = True


def slice_minutes(slo: SLO) -> int:
    """A time-slice SLO's slice in minutes (its rules' evaluation interval); 0 for other SLOs."""
    return int(seconds(slo.timeslices.window) // 60) if slo.timeslices is not None else 0


def per_minute(schedule: Sequence[Segment], budget: float, slices: int = 0) -> tuple[list[float], list[float]]:
    """(errors, events) in each minute the series exist; ``slices``: the minutes of a time-slice SLO's
    slices (obsbox.slo.slicetests)."""
    for segment in schedule:
        if segment.present and not 0 <= segment.burn * budget <= 1:
            raise UntestableError(f"a burn of {num(segment.burn)} needs an error ratio of {num(segment.burn * budget)}")
    if slices:
        return slicetests.per_minute(schedule, budget, slices)
    errors: list[float] = []
    events: list[float] = []
    for segment in schedule:
        if segment.present:
            ratio = segment.burn * budget
            errors += [PER_MINUTE * ratio] * segment.minutes
            events += [PER_MINUTE] * segment.minutes
    return errors, events


def burn_over(minutes: tuple[list[float], list[float]], budget: float, end: int, window: int) -> float | None:
    """The traffic-weighted burn rate over the minutes (end - window, end] of ``per_minute``'s (errors,
    events); None without traffic there."""
    errors, events = minutes
    start = max(0, end - window)
    total = sum(events[start:end])
    return sum(errors[start:end]) / total / budget if total else None


def window_burns(slo: SLO, schedule: Sequence[Segment], at: int, window: str) -> list[float | None]:
    """The burn over ``window`` at minute ``at``, each way the rules may cut it.

    A window is read as it is and one minute shorter (a range's first sample starts it) and, when it is
    summed from the recorded 5m rates, one step longer; a time-slice SLO's, as the mean of its slices
    with and without the one at the window's start."""
    budget, length = slo.error_budget, slice_minutes(slo)
    width = int(seconds(window) // 60)
    if length:
        values = slicetests.slice_values(schedule, budget, length, at)
        return [slicetests.burn_over(values, budget, at, width, closed) for closed in (True, False)]
    minutes = per_minute(schedule, budget)
    widths = {width, width - 1} | ({width + STEP} if seconds(window) >= RECORDED_FROM_SECONDS else set())
    return [burn_over(minutes, budget, at, w) for w in sorted(widths)]


def compare(burns: Sequence[float | None], op: str, threshold: float) -> bool | None:
    """Whether every cut of the window compares with ``threshold`` as ``op`` says (no data: never);
    None when the cuts disagree or one lies within ``MARGIN`` of the threshold."""
    seen = {b is not None and OPS[op](b, threshold) for b in burns}
    near = any(b is not None and abs(b - threshold) <= MARGIN * max(threshold, 1) for b in burns)
    return None if len(seen) > 1 or near else seen.pop()


def period_burns(slo: SLO, schedule: Sequence[Segment], at: int) -> list[float]:
    """The burn over the SLO's period at minute ``at``, each way the rules may cut it; none without data.

    Every case is shorter than the period and within one calendar period, so the period is the whole
    schedule so far. A calendar time-slice SLO's period is the mean of its slices' means over each
    step of the period (obsbox.slo.periods.period_mean_expr), each mean over one step of slices."""
    if slo.calendar is None or slo.timeslices is None:
        return [b for b in window_burns(slo, schedule, at, slo.nominal_window) if b is not None]
    budget, length = slo.error_budget, slice_minutes(slo)
    step = int(seconds(slo.calendar.step(slo.window)) // 60)
    values = slicetests.slice_values(schedule, budget, length, at)
    out = []
    for closed in (True, False):
        means = [slicetests.burn_over(values, budget, t, step, closed) for t in range(step, at + 1, step)]
        known = [m for m in means if m is not None]
        if known:
            out.append(sum(known) / len(known))
    return out
