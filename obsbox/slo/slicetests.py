"""What the generated promtool tests feed a time-slice SLO, and what its rules must then say.

A case's segment at ``burn`` becomes slices that are either wholly good (no failed event) or wholly
bad (every event fails), a share ``burn * error budget`` of them bad, spread evenly; a Timeslices
SLO then counts the bad slices and a RatioTimeslices SLO averages error ratios of 0 and 1, so both
burn at ``burn``. Slices are ``length`` minutes, evaluated at every multiple of it, as promtool
evaluates the SLO's group at the test file's ``evaluation_interval``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Segment(Protocol):
    """A case's stretch of traffic (``obsbox.slo.testgen.Segment``)."""

    @property
    def minutes(self) -> int: ...

    @property
    def burn(self) -> float: ...

    @property
    def present(self) -> bool: ...


PER_MINUTE = 6000.0


def bad_slices(schedule: Sequence[Segment], budget: float, length: int) -> list[bool]:
    """Whether each minute's slice is bad, for the minutes the series exist."""
    out: list[bool] = []
    for segment in schedule:
        if not segment.present:
            continue
        share, start = segment.burn * budget, len(out)
        for minute in range(start, start + segment.minutes):
            n = minute // length - start // length  # the slice's number within the segment
            out.append(int((n + 1) * share + 0.5) > int(n * share + 0.5))
    return out


def per_minute(schedule: Sequence[Segment], budget: float, length: int) -> tuple[list[float], list[float]]:
    """(errors, events) in each minute the series exist: all or none of a minute's events fail."""
    bad = bad_slices(schedule, budget, length)
    return [PER_MINUTE * b for b in bad], [PER_MINUTE] * len(bad)


def slice_values(schedule: Sequence[Segment], budget: float, length: int, until: int) -> dict[int, float]:
    """The recorded slice value at each evaluation up to minute ``until``: 1 for a bad slice, 0 for a
    good one; none where the slice's range holds fewer than two samples (rate() needs two)."""
    bad = bad_slices(schedule, budget, length)
    last = len(bad)  # raw samples at minutes 0..last
    out = {}
    for at in range(length, until + 1, length):
        if len([m for m in range(at - length, at + 1) if m <= last]) >= 2:
            out[at] = 1.0 if bad[min(at, last) - 1] else 0.0
    return out


def burn_over(values: dict[int, float], budget: float, end: int, window: int, closed: bool) -> float | None:
    """The mean slice value over the ``window`` minutes to ``end`` (``closed``: the sample at the
    window's start counts too) over the budget; None without a slice there."""
    seen = [v for at, v in values.items() if (end - window <= at if closed else end - window < at) and at <= end]
    return sum(seen) / len(seen) / budget if seen else None
