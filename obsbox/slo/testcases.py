"""The timelines ``obsbox slo test`` feeds an SLO's rules, and what must fire at each checked minute.

Per SLO: a steady good period (no alert) after which the series stop (``SLONoData`` fires once they
have been gone for its ``for``), a fast burn (a page fires once its windows burn), a slow burn (a
ticket fires, no page); per single-window condition of its own (``alerts:``), a case where it starts
clear and then holds until it fires, not before; with an error-budget policy, a case where the budget
left falls through every step. Every case checks every alert the SLO has at each minute it can call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from obsbox import conventions
from obsbox.durations import parse_duration as seconds
from obsbox.slo import alertchecks
from obsbox.slo.alertchecks import Firing, burn_alert_schedules
from obsbox.slo.rules import NO_DATA_FOR
from obsbox.slo.schedules import STEP, Segment, UntestableError, compare, slice_minutes, window_burns
from obsbox.slo.selectors import num
from obsbox.slo.spec import SLO, BurnCondition


@dataclass(frozen=True)
class Check:
    """What must fire at ``minute``; None where a window is too close to call (that alert is not checked)."""

    minute: int
    burning: list[BurnCondition] | None  # the SLOErrorBudgetBurn conditions firing
    no_data: bool  # whether SLONoData fires
    own: list[Firing] | None  # the SLO's own SLOBurnRate conditions firing
    policy: dict[str, list[Firing]] | None  # the policy's alerts firing, by alert name
    holding: frozenset[str]  # the own conditions true now, firing or still pending

    def state(self) -> tuple[object, ...]:
        """What changes between checks: the minutes on either side of a change are the ones kept."""
        burning = None if self.burning is None else tuple(c.long_window for c in self.burning)
        own = None if self.own is None else tuple(f.key for f in self.own)
        policy = None if self.policy is None else tuple(f.key for fs in self.policy.values() for f in fs)
        return burning, self.no_data, own, policy, self.holding


@dataclass(frozen=True)
class Case:
    """A schedule, what it must show (``expect``, over the checks), and its checks every STEP minutes."""

    name: str
    schedule: tuple[Segment, ...]
    expect: Callable[[list[Check]], bool]
    intent: str
    every_minute: bool = False  # check every STEP minutes, not only around the changes (obsbox.slo.testgen)


def firing(slo: SLO, schedule: Sequence[Segment], at: int) -> list[BurnCondition] | None:
    """The burn conditions that fire at minute ``at``; None when a window is too close to call: both
    windows of a condition must burn at its factor or more, every way the rules may cut them."""
    out = []
    for condition in slo.burn_conditions():
        states = [
            compare(window_burns(slo, schedule, at, window), "gte", condition.factor)
            for window in (condition.long_window, condition.short_window)
        ]
        if None in states:
            return None
        if all(states):
            out.append(condition)
    return out


def no_data(schedule: Sequence[Segment], at: int, step: int = STEP, needs: int = 2) -> bool:
    """Whether ``SLONoData`` fires at minute ``at``: the 5m event rate (``needs`` samples in 5m: two for a
    counter's rate, one for a gauge's mean) has been absent at every evaluation (every ``step`` minutes)
    since ``NO_DATA_FOR`` ago."""
    last = sum(s.minutes for s in schedule if s.present)  # samples at minutes 0..last

    def absent(t: int) -> bool:
        first = t - 4 if needs > 1 else t - 5  # a 5m range includes its start: a gauge's last sample counts 5m on
        return len([m for m in range(first, t + 1) if 0 <= m <= last]) < needs

    hold = int(seconds(NO_DATA_FOR) // 60)
    since = at
    while since - step >= 0 and absent(since - step):
        since -= step
    return absent(at) and at - since >= hold


def checks(slo: SLO, case: Case) -> list[Check]:
    """What must fire at every STEP minutes of the case."""
    end = sum(s.minutes for s in case.schedule)
    step = slice_minutes(slo) or STEP  # the group's evaluation interval
    out = []
    for at in range(STEP, end + 1, STEP):
        own = alertchecks.burn_alerts_firing(slo, case.schedule, at, step)
        left = alertchecks.budget_left(slo, case.schedule, at) if slo.policy else []
        holding = {a.label for a in slo.alerts if alertchecks.holds(slo, case.schedule, a, at)}
        gone = no_data(case.schedule, at, step, 1 if slo.sli.gauges or slo.sli.raw else 2)  # a gauge's mean: one sample
        policy = alertchecks.steps_firing(slo, left)
        out.append(Check(at, firing(slo, case.schedule, at), gone, own, policy, frozenset(holding)))
    return out


def cases(slo: SLO) -> list[Case]:
    """The timelines, their burn rates placed between the SLO's factors and clear of its own thresholds."""
    factors = {
        severity: [c.factor for c in slo.burn_conditions() if c.severity == severity] for severity in ("page", "ticket")
    }
    good = alertchecks.steady_burn(slo, min(factors["ticket"]) / 2)
    # Halfway between the fastest page and every request failing: the 1h window reaches its factor
    # sooner the higher the objective, and the case lasts that long and 10m more.
    fast = (max(factors["page"]) + 1 / slo.error_budget) / 2
    fast_minutes = STEP * math.ceil((60 * max(factors["page"]) / fast + 10) / STEP)
    slow = (max(factors["ticket"]) * min(factors["page"])) ** 0.5

    def pages(conditions: list[BurnCondition]) -> bool:
        return any(c.severity == "page" for c in conditions)

    def known(checks: list[Check]) -> list[Check]:
        return [c for c in checks if c.burning is not None]

    def quiet_until(checks: list[Check], minute: int) -> bool:
        return all(not c.burning and not c.no_data for c in known(checks) if c.minute <= minute)

    def steady(checks: list[Check]) -> bool:
        return quiet_until(checks, 15) and not any(c.burning for c in known(checks)) and checks[-1].no_data

    def fast_burn(checks: list[Check]) -> bool:
        return quiet_until(checks, 5) and pages(known(checks)[-1].burning or [])

    def slow_burn(checks: list[Check]) -> bool:
        burning = [c.burning or [] for c in known(checks)]
        return quiet_until(checks, 5) and not any(pages(b) for b in burning) and bool(burning[-1])

    out = [
        Case(
            "steady good, then no data",
            (Segment(15, good), Segment(20, present=False)),
            steady,
            f"{num(round(good, 3))}x the budget for 15m: no alert; then no series: "
            f"{conventions.SLO_NO_DATA_ALERT} fires {NO_DATA_FOR} after",
        ),
        Case(
            "fast burn",
            (Segment(5, good), Segment(fast_minutes, fast)),
            fast_burn,
            f"{num(round(fast, 3))}x after 5m at {num(round(good, 3))}x: a page fires once its windows burn",
        ),
        Case(
            "slow burn",
            (Segment(5, good), Segment(20, slow)),
            slow_burn,
            f"{num(round(slow, 3))}x after 5m at {num(round(good, 3))}x: a ticket fires, no page",
        ),
    ]
    step = slice_minutes(slo) or STEP
    for alert in slo.alerts:
        expect = _fires_after_holding(alert.label, alert.hold)
        tried = (
            Case(f"{alert.label} fires", sched, expect, why) for sched, why in burn_alert_schedules(slo, alert, step)
        )
        shown = next((case for case in tried if expect(checks(slo, case))), None)
        if shown is None:
            raise UntestableError(
                f"no schedule shows {alert.label} ({alert.describe()}) fire after holding, not before"
            )
        out.append(shown)
    if slo.policy:
        schedule, intent = alertchecks.budget_schedule(slo)
        # every check: the budget left falls past a step between two changes of what fires
        out.append(Case("budget spent", schedule, _every_step_fires(slo), intent, every_minute=True))
    return out


def _fires_after_holding(label: str, hold: str | None) -> Callable[[list[Check]], bool]:
    """The condition fires at the last check, not at the one before; held there, when it has a ``for``."""

    def expect(checks: list[Check]) -> bool:
        known = [c for c in checks if c.own is not None]
        if len(known) < 2:
            return False
        last, before = ({f.key for f in c.own or ()} for c in known[-2:][::-1])
        return label in last and label not in before and (hold is None or label in known[-2].holding)

    return expect


def _every_step_fires(slo: SLO) -> Callable[[list[Check]], bool]:
    """No step fires at the first check; every step fires at the last."""
    steps = len(slo.policy or ())

    def expect(checks: list[Check]) -> bool:
        known = [c.policy for c in checks if c.policy is not None]
        fired = [sum(len(f) for f in p.values()) for p in known]
        return len(fired) >= 2 and fired[0] == 0 and fired[-1] == steps

    return expect


def shows(slo: SLO, case: Case) -> list[Check]:
    """The case's checks; UntestableError when they cannot show its intent."""
    found = checks(slo, case)
    if len([c for c in found if c.burning is not None]) < 2 or not case.expect(found):
        raise UntestableError(f"the {case.name} case cannot show its intent ({case.intent}) at this objective")
    return found
