"""What an SLO's own alerts must do in the generated tests: its single-window ``SLOBurnRate`` conditions
(obsbox.slo.burnalerts) and the steps of its error-budget policy (obsbox.slo.policies).

Both are worked out from the case's schedule (obsbox.slo.schedules), never from the rules under test.
A burn-rate condition fires once it has held at every evaluation for its ``for`` (Prometheus's
``activeAt + for <= now``); a policy step fires at the evaluation where the budget left is under it.
A policy alert renders the budget left (``$value | humanizePercentage``: Go's ``%.4g``) into its
description, and promtool compares annotations exactly, so the value is computed too, and a minute
where the last digit could round either way is not checked.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from obsbox import conventions
from obsbox.durations import parse_duration as seconds
from obsbox.slo.burnalerts import BurnAlert
from obsbox.slo.policies import VALUE_PERCENT
from obsbox.slo.schedules import MARGIN, STEP, Segment, UntestableError, compare, period_burns, window_burns
from obsbox.slo.selectors import num
from obsbox.slo.spec import SLO

LONGEST = 360  # minutes: a case for one alert lasts at most this long
BUDGET_LONGEST = 120  # minutes: the budget-spent case, at most
CLEAR = 0.05  # how far a steady burn keeps from an alert's threshold (and its budget left from a step's)


@dataclass(frozen=True)
class Firing:
    """A rule expected to fire at a check; ``value``: its ``$value``, for a policy step's description."""

    alert: str
    key: str  # the condition's label, or the policy step's index
    value: float | None = None


def holds(slo: SLO, schedule: Sequence[Segment], alert: BurnAlert, at: int) -> bool | None:
    """Whether the condition's comparison is true at the evaluation at minute ``at`` (None: too close)."""
    return compare(window_burns(slo, schedule, at, alert.window), alert.op, alert.threshold)


def fires(slo: SLO, schedule: Sequence[Segment], alert: BurnAlert, at: int, step: int) -> bool | None:
    """Whether the condition fires at minute ``at``: it has held at every evaluation (every ``step``
    minutes) for ``alertAfter``; None when an evaluation that decides it is too close to call."""
    now = holds(slo, schedule, alert, at)
    hold, since = seconds(alert.after) / 60, at
    while now and at - since < hold:
        if since - step < 0:
            return False  # the first evaluation is at minute 0
        before = holds(slo, schedule, alert, since - step)
        if not before:
            return before
        since -= step
    return now


def burn_alerts_firing(slo: SLO, schedule: Sequence[Segment], at: int, step: int) -> list[Firing] | None:
    """The SLO's own conditions firing at minute ``at``; None when one is too close to call."""
    states = [fires(slo, schedule, alert, at, step) for alert in slo.alerts]
    if None in states:
        return None
    return [
        Firing(conventions.SLO_BURN_RATE_ALERT, a.label) for a, state in zip(slo.alerts, states, strict=True) if state
    ]


def budget_left(slo: SLO, schedule: Sequence[Segment], at: int) -> list[float]:
    """The error budget left over the period at minute ``at``, each way the rules may cut the period;
    none without data."""
    return [1 - burn for burn in period_burns(slo, schedule, at)]


def steps_firing(slo: SLO, left: Sequence[float]) -> dict[str, list[Firing]] | None:
    """The policy's alerts by name with ``left`` of the budget (each cut's: none without data); None when
    the cuts disagree, or a step's threshold or the rendered value is too close to call."""
    out: dict[str, list[Firing]] = {step.name: [] for step in slo.policy or ()}
    if not left:
        return out
    value = left[0]
    if max(left) - min(left) > 1e-9 or not renders_exactly(value):
        return None
    for i, step in enumerate(slo.policy or ()):
        if abs(value - step.threshold) <= MARGIN:
            return None
        if value <= 0 if step.exhausted else value < step.threshold:
            out[step.name].append(Firing(step.name, str(i), value))
    return out


def humanize_percentage(value: float) -> str:
    """What Prometheus's ``humanizePercentage`` prints: ``fmt.Sprintf("%.4g%%", v*100)``."""
    return f"{value * 100:.4g}%"


def renders_exactly(value: float) -> bool:
    """Whether ``value`` prints the same a hair either side: Prometheus's float may differ in the last bit."""
    return len({humanize_percentage(value * (1 + e) + e) for e in (-1e-9, 0, 1e-9)}) == 1


def render(text: str, value: float | None) -> str:
    return text if value is None else text.replace(VALUE_PERCENT, humanize_percentage(value))


def steady_burn(slo: SLO, preferred: float) -> float:
    """A burn for the steady case: ``preferred`` unless an own alert's threshold, or the budget left
    (1 - burn) a policy step's, lies within ``CLEAR`` of it."""
    near = [a.threshold for a in slo.alerts] + [1 - step.threshold for step in slo.policy or ()]
    for burn in (preferred, 0.4, 0.3, 0.6, 0.2, 0.7, 0.1):
        if all(abs(burn - t) > CLEAR * max(t, 1) for t in near):
            return burn
    raise UntestableError(f"no steady burn under 1 is clear of the thresholds {', '.join(map(num, near))}")


def burn_alert_schedules(slo: SLO, alert: BurnAlert, step: int) -> Iterator[tuple[tuple[Segment, ...], str]]:
    """Schedules on which ``alert`` starts clear of its condition, then holds it until it fires at the
    last minute, with each one's intent: a few burns either side of the threshold, for one whose
    evaluations all keep clear of it. UntestableError when no burn the SLI can reach fires it."""
    top = 1 / slo.error_budget  # every event failing
    threshold = alert.threshold
    highs = [h if h <= top else (threshold + top) / 2 for h in (max(2 * threshold, threshold + 1), 3 * threshold + 1)]
    if max(highs) <= threshold * (1 + 2 * MARGIN):
        raise UntestableError(f"{alert.label}: no burn above {num(threshold)} (all events failing is {num(top)})")
    rising = alert.op in ("gt", "gte")
    for high, low, lead in itertools.product(highs, (threshold / 2, threshold / 4), (2 * STEP, 3 * STEP)):
        before, after = (low, high) if rising else (high, low)
        for minutes in range(STEP, LONGEST + 1, STEP):
            schedule = (Segment(lead, before), Segment(minutes, after))
            if fires(slo, schedule, alert, lead + minutes, step):
                yield (
                    schedule,
                    (
                        f"{num(round(before, 3))}x for {lead}m then {num(round(after, 3))}x: {alert.label} "
                        f"({alert.describe()}) fires after {lead + minutes}m, not before"
                    ),
                )
                break


def budget_schedule(slo: SLO) -> tuple[tuple[Segment, ...], str]:
    """A schedule on which the budget left falls through every step of the policy and ends below the
    lowest: of a few, the one where each step first fires at a check of its own, with the most checks
    it can call on the way (a step at the wrong share of the budget then shows); and its intent."""
    lowest = min(-MARGIN * 5 if step.exhausted else step.threshold - MARGIN * 5 for step in slo.policy or ())
    tried = [
        _falls(slo, lead, burn, lowest)
        for burn in (1.2, 1.5, 2.0, 3.0, 4.0, 10.0, 25.0)
        for lead in (STEP, 2 * STEP, 3 * STEP)
        if burn * slo.error_budget <= 1
    ]
    found = [t for t in tried if t is not None]
    if not found:
        raise UntestableError("no schedule takes the budget left through every step of the policy")
    schedule, _ = max(found, key=lambda t: t[1])
    lead, burn = schedule[0].minutes, schedule[1].burn
    return schedule, f"no errors for {lead}m, then {num(burn)}x: the budget left falls through each step"


def _falls(slo: SLO, lead: int, burn: float, lowest: float) -> tuple[tuple[Segment, ...], tuple[bool, int]] | None:
    """The schedule of ``lead`` minutes without errors then ``burn`` until the budget left is under
    ``lowest``, and its score: whether each step first fires at a check of its own, and how many checks
    can be called (one too close is not made); None when it does not get there within ``BUDGET_LONGEST``."""
    crossed: list[int] = []
    for minutes in range(STEP, BUDGET_LONGEST + 1, STEP):
        schedule = (Segment(lead, 0.0), Segment(minutes, burn))
        left = budget_left(slo, schedule, lead + minutes)
        firing = steps_firing(slo, left)
        if not left:
            return None
        if firing is not None:
            crossed.append(sum(len(f) for f in firing.values()))
        if max(left) < lowest and firing is not None:
            changes = [n for i, n in enumerate(crossed) if i == 0 or n != crossed[i - 1]]
            return schedule, (len(changes) == len(slo.policy or ()) + 1, len(crossed))
    return None
