"""Calendar-aligned SLO periods: the error budget counts from the start of the current day, week,
month, quarter or year, and resets at its end, as OpenSLO's ``isRolling: false`` windows and Nobl9's
calendar-aligned windows do.

Prometheus has no calendar ranges, so the rules record which period an evaluation falls in (an index:
whole periods since ``start``, from PromQL's ``year()``/``month()`` or whole days, on the local time
of ``time_zone``), and the period's error ratio is a subquery over the longest the period can be
that keeps only the steps whose recorded index is the current one (``INDEX @ end()``: the index at
the evaluation). The burn-rate alerts keep their rolling windows, scaled to the period's nominal
length (a month as 30 days), as Nobl9 and the SRE Workbook do; only the budget left resets.

What is exact and what approximates: the period boundaries are exact on the local wall clock
(``start``'s weekday and time for weeks, its day of the month and time for months, quarters and
years); the budget counts whole 5-minute steps of the recorded rates (time slices: whole slices)
since the boundary, so it lags by up to one step and by the evaluation interval at the boundary.
A zone's UTC offsets are written into the rules for ``OFFSET_YEARS`` years from ``start`` (from
Python's tz database); later the rules keep the last offset, so rebuild them before then.
"""

from __future__ import annotations

import calendar as gregorian
import datetime as dt
import functools
import re
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from obsbox.durations import format_duration, parse_duration

UNITS = {"d": "day", "w": "week", "M": "month", "Q": "quarter", "Y": "year"}
NOMINAL_DAYS = {"d": 1, "w": 7, "M": 30, "Q": 90, "Y": 365}  # what the alert windows scale with
LONGEST_DAYS = {"d": 1, "w": 7, "M": 31, "Q": 92, "Y": 366}
MONTHS = {"M": 1, "Q": 3, "Y": 12}
DEFAULT_START = "2024-01-01 00:00:00"  # a Monday: weeks from Monday, months from the 1st, quarters from January
OFFSET_YEARS = 30
LONGEST_PERIOD_DAYS = 366  # a year, as Nobl9's calendar windows allow at most
_PERIOD = re.compile(r"([1-9][0-9]*)([dwMQY])")
DAY = 86400
STEPS = ("5m", "15m", "1h", "1d")
MAX_STEPS = 9000
Problem = tuple[tuple[str | int, ...], str]


def split(window: str) -> tuple[int, str] | None:
    """``"2w"`` → ``(2, "w")``; None when ``window`` is not a calendar period."""
    match = _PERIOD.fullmatch(window)
    return (int(match.group(1)), match.group(2)) if match else None


@dataclass
class Calendar:
    """Where the periods start (a local date and time, each period the window's length after the last)
    and in which IANA time zone."""

    start: Any = DEFAULT_START  # "2024-01-01 00:00:00"; YAML's unquoted dates are taken too
    time_zone: str = "UTC"

    def __post_init__(self) -> None:
        if isinstance(self.start, dt.datetime | dt.date):
            self.start = self.start.isoformat(sep=" ") if isinstance(self.start, dt.datetime) else str(self.start)

    def anchor(self) -> dt.datetime:
        """``start`` as a naive local date and time; ValueError when it is none."""
        return dt.datetime.fromisoformat(str(self.start).replace("T", " "))

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def problems(self, window: str) -> list[Problem]:
        """What is wrong with a calendar period of ``window`` (key paths under the SLO)."""
        out: list[Problem] = []
        parts = split(window)
        if parts is None:
            out.append(
                (("window",), f"{window!r} is not a calendar period: a whole number of d, w, M, Q or Y (1M, 1Q, 2w)")
            )
        elif parts[0] * LONGEST_DAYS[parts[1]] > LONGEST_PERIOD_DAYS:
            out.append((("window",), f"{window!r} is longer than a year, the longest calendar period obsbox builds"))
        try:
            anchor = self.anchor()
        except ValueError:
            return [*out, (("calendar", "start"), f"{self.start!r} is not a date and time (2024-01-01 00:00:00)")]
        if anchor.tzinfo is not None:
            out.append((("calendar", "start"), "give the local time without an offset; time_zone says where"))
        try:
            self.zone()
        except (ZoneInfoNotFoundError, ValueError):
            out.append((("calendar", "time_zone"), f"{self.time_zone!r} is not an IANA time zone (UTC, Europe/Paris)"))
        if parts is not None and parts[1] in MONTHS and anchor.day > 28:
            out.append(
                (
                    ("calendar", "start"),
                    f"day {anchor.day}: periods of months would start on a day some months lack; use a day up to 28",
                )
            )
        return out

    def nominal(self, window: str) -> str:
        """The period's nominal length, which the burn-rate alert windows scale with: 1M → 30d."""
        count, unit = split(window) or (1, "d")
        return format_duration(count * NOMINAL_DAYS[unit] * DAY)

    def longest(self, window: str) -> str:
        """The longest the period can be (a subquery's range): 31 days a month, an hour more for DST."""
        count, unit = split(window) or (1, "d")
        extra = 3600 if self.transitions() else 0
        return format_duration(count * LONGEST_DAYS[unit] * DAY + extra)

    def step(self, window: str) -> str:
        """The subquery step of the period's budget: 5m up to a month, 15m for a quarter, 1h for a year,
        so that a subquery takes at most ``MAX_STEPS`` steps (promtool's tests refuse more samples)."""
        longest = parse_duration(self.longest(window))
        return next(step for step in STEPS if longest / parse_duration(step) <= MAX_STEPS)

    def describe(self, window: str) -> str:
        count, unit = split(window) or (1, "d")
        return f"{count} calendar {UNITS[unit]}{'s' if count > 1 else ''} from {self.start} {self.time_zone}"

    def transitions(self) -> list[tuple[int, int]]:
        """(UTC timestamp, new offset in seconds) of each change of the zone's UTC offset in the
        ``OFFSET_YEARS`` years from ``start``."""
        return list(_transitions(str(self.start), self.time_zone))

    def base_offset(self) -> int:
        return _offset(self.zone(), int(self.anchor().replace(tzinfo=self.zone()).timestamp()))

    def offset_expr(self) -> str | None:
        """PromQL for the zone's UTC offset in seconds at the evaluation (a vector); None when it is
        constant over the years written, and ``index_expr`` adds it as a number."""
        changes = self.transitions()
        if not changes:
            return None
        terms, previous = [], self.base_offset()
        for at, offset in changes:
            terms.append(f"{'+' if offset > previous else '-'} {abs(offset - previous)} * (time() >= bool {at})")
            previous = offset
        return f"vector({self.base_offset()}\n" + "\n".join(terms) + ")"

    def index_expr(self, window: str, offset: str | None, now: str = "time()") -> str:
        """PromQL for the number of whole periods from ``start`` to ``now``; ``offset`` is the recorded
        offset series (when the zone has transitions)."""
        count, unit = split(window) or (1, "d")
        anchor = self.anchor()
        base = self.base_offset()
        local = f"({offset} + {now})" if offset else (f"vector({now})" if not base else f"vector({now} + {base})")
        if unit in MONTHS:
            shift = (anchor.day - 1) * DAY + anchor.hour * 3600 + anchor.minute * 60 + anchor.second
            shifted = f"({local} - {shift})" if shift else local
            months = f"12 * year({shifted}) + month({shifted}) - {12 * anchor.year + anchor.month}"
            per = count * MONTHS[unit]
            return f"floor(({months}) / {per})" if per > 1 else months
        start = gregorian.timegm(anchor.timetuple())  # the local date and time, counted as if it were UTC
        length = count * (7 if unit == "w" else 1) * DAY
        return f"floor(({local} - {start}) / {length})"

    def period_ratio_expr(self, window: str, index: str, rates: tuple[str, str], step: str) -> str:
        """The error ratio since the current period's start: the recorded (errors, events) ``rates`` over
        ``step``, summed over the subquery's steps whose recorded period ``index`` is the evaluation's."""
        current, rng = f"({index} == {index} @ end())", f"[{self.longest(window)}:{step}]"
        errors, events = rates
        return (
            f"sum_over_time(({errors} and on(slo, service) {current}){rng})\n"
            f"/\nsum_over_time(({events} and on(slo, service) {current}){rng})"
        )

    def period_mean_expr(self, window: str, index: str, series: str, step: str) -> str:
        """The mean of ``series`` (the mean of a time-slice SLO's slices over ``step``) since the
        current period's start."""
        current = f"({index} == {index} @ end())"
        return f"avg_over_time(({series} and on(slo, service) {current})[{self.longest(window)}:{step}])"


@functools.lru_cache(maxsize=64)
def _transitions(start: str, time_zone: str) -> tuple[tuple[int, int], ...]:
    """``Calendar.transitions``, worked out once per start and zone: a day-by-day scan of years."""
    zone, anchor = ZoneInfo(time_zone), dt.datetime.fromisoformat(start.replace("T", " "))
    begin = int(anchor.replace(tzinfo=zone).timestamp())
    end = int(anchor.replace(year=anchor.year + OFFSET_YEARS, day=min(anchor.day, 28), tzinfo=zone).timestamp())
    out, last = [], _offset(zone, begin)
    for t in range(begin + DAY, end + DAY, DAY):
        now = _offset(zone, t)
        if now != last:
            low, high = t - DAY, t  # the offset changes in (low, high]
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (mid, high) if _offset(zone, mid) == last else (low, mid)
            out.append((high, now))
            last = now
    return tuple(out)


def _offset(zone: ZoneInfo, timestamp: int) -> int:
    offset = dt.datetime.fromtimestamp(timestamp, zone).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0
