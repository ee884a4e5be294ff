"""Time-slice budgeting: the SLO counts slices of time, not events, as OpenSLO's ``Timeslices`` and
``RatioTimeslices`` budgeting methods (and Nobl9's, Datadog's time-slice SLOs) do.

The SLO's rule group is evaluated once per slice (its ``interval`` is the slice's length), and each
evaluation records the slice that just ended: with a ``target`` (Timeslices), 1 when its share of
good events is under the target (``op: gt``: at or under it) and 0 otherwise; without one
(RatioTimeslices), its error ratio. A slice without events records nothing and counts neither way.
Every window's error ratio is then the mean of the slices in it (``avg_over_time``): the share of bad
slices, or the mean slice error ratio. The burn rate of a slice SLO is that mean over the error
budget (1 - objective), and it alerts on the same windows and factors as an event-counting SLO of the
same period: a 14.4x page over 1h and 5m is 2% of the period's bad slices spent within the hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obsbox.durations import parse_duration
from obsbox.slo.selectors import num

SLICE_RANGE = ("1m", "5m")  # a slice is never longer than the shortest alert window
Problem = tuple[tuple[str | int, ...], str]


@dataclass
class Timeslices:
    """A slice's length, and the share of its events that must be good for it to be good (none: the
    period's SLI is the mean of the slices' good ratios)."""

    window: str = "1m"
    target: float | None = None
    op: Literal["gte", "gt"] = "gte"  # a good slice's good share is >= (gte) or > (gt) the target

    @property
    def method(self) -> str:
        """The OpenSLO budgeting method: Timeslices or RatioTimeslices."""
        return "RatioTimeslices" if self.target is None else "Timeslices"

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        low, high = (parse_duration(bound) for bound in SLICE_RANGE)
        try:
            length = parse_duration(self.window)
        except ValueError as exc:
            return [(("window",), str(exc))]
        if not low <= length <= high or length % 60:
            out.append(
                (
                    ("window",),
                    f"{self.window!r}: a slice is a whole number of minutes from {SLICE_RANGE[0]} to "
                    f"{SLICE_RANGE[1]}: the rules are evaluated once per slice, and the shortest alert window is 5m",
                )
            )
        if self.target is not None and not 0 < self.target <= 1:
            out.append((("target",), f"{self.target:g} is not a share in (0, 1]"))
        if self.target is None and self.op != "gte":
            out.append((("op",), "compares a slice's good share with its target; give the target"))
        return out

    def slice_expr(self, errors: str, events: str) -> str:
        """The value recorded for the slice that just ended, from its error and event rates."""
        ratio = f"({errors})\n/\n({events} > 0)"
        if self.target is None:
            return ratio
        under = "<" if self.op == "gte" else "<="
        return f"1 - {ratio} {under} bool {num(self.target)}"

    def describe(self) -> str:
        if self.target is None:
            return f"the mean error ratio of its {self.window} slices"
        share = "at most" if self.op == "gt" else "less than"
        return f"the share of its {self.window} slices with {share} {num(self.target * 100)}% good events"
