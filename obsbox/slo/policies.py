"""Error-budget policies as data, and the link from each SLO alert to the SLO's burn dashboard.

A policy is a list of steps on the error budget remaining over the SLO's period, the series
``slo:period_error_budget_remaining:ratio`` that every SLO group records (1 - the period's error ratio
/ (1 - objective)). Each step becomes one alert, labelled for a router (slo, service, severity and the
step's own labels). Steps are cumulative, as in the SRE Workbook's example policy: with 5% left, the
ticket at 50% and the page at 10% both fire::

    policy:                           # at the top: every SLO's; in an SLO: replaces it ([] for none)
      - below: 50%                    # the share of the budget left: 50% or 0.5
        severity: ticket
        labels: {action: review-reliability}
      - below: 10%
        severity: page
        labels: {action: freeze-deploys}
      - exhausted: true               # nothing left: remaining <= 0
        severity: page
        alert: ErrorBudgetExhausted   # the default; ErrorBudgetLow for a `below` step
        description: Only fixes ship until the budget recovers.

Every SLO alert carries a ``dashboard`` annotation: the burn dashboard for its SLO (``var-slo``) over
the alert's long window, ending when the alert was evaluated (``dashboard_url``: Grafana's base URL).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from obsbox.durations import parse_duration
from obsbox.slo.selectors import LABEL_NAME, num

DEFAULT_DASHBOARD_URL = "http://localhost:3000"  # compose's Grafana
BURN_DASHBOARD = "obsbox-slo-burn"  # the UID of dashboards/slo_burn.dashboard.py
SLO_VARIABLE = "slo"  # that dashboard's variable for the SLO
LOW_ALERT = "ErrorBudgetLow"
EXHAUSTED_ALERT = "ErrorBudgetExhausted"
VALUE_PERCENT = "{{ $value | humanizePercentage }}"  # the budget left, in a step's description
_ALERT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_URL = re.compile(r"https?://[^\s?#]+")
Problem = tuple[tuple[str | int, ...], str]


class PolicySLO(Protocol):
    """What a policy reads of an SLO (``obsbox.slo.spec.SLO``)."""

    name: str
    service: str | None
    window: str
    dashboard_url: str | None


@dataclass
class PolicyStep:
    """One step: an alert while the budget remaining is below ``below`` (or, ``exhausted``, at most 0)."""

    severity: str
    below: str | None = None
    exhausted: bool = False
    alert: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    description: str = ""

    @property
    def name(self) -> str:
        return self.alert or (EXHAUSTED_ALERT if self.exhausted else LOW_ALERT)

    @property
    def threshold(self) -> float:
        """The share of the budget left under which the step fires (0: when none is left)."""
        return 0.0 if self.exhausted or self.below is None else share(self.below)

    @property
    def state(self) -> str:
        """The budget's state the step acts on, in words: ``below 50%`` or ``exhausted``."""
        return "exhausted" if self.exhausted else f"below {percent(self.threshold)}"

    @property
    def comparison(self) -> str:
        return "<= 0" if self.exhausted else f"< {num(self.threshold)}"

    def problems(self, reserved: Collection[str]) -> list[Problem]:
        out: list[Problem] = []
        if self.exhausted == (self.below is not None):
            out.append(((), "a policy step needs exactly one of 'below: 50%' or 'exhausted: true'"))
        elif self.below is not None:
            try:
                share(self.below)
            except ValueError as exc:
                out.append((("below",), str(exc)))
        if not self.severity.strip():
            out.append((("severity",), "must name the severity a router acts on (e.g. page, ticket)"))
        if not _ALERT_NAME.fullmatch(self.name):
            out.append((("alert",), f"{self.name!r} is not an alert name (letters, digits and '_')"))
        out += [
            (("labels", label), f"{label!r} is reserved or not a label name")
            for label in self.labels
            if label in reserved or not LABEL_NAME.fullmatch(label)
        ]
        return out


def share(text: str) -> float:
    """``50%`` or ``0.5`` as 0.5: a share of the error budget in (0, 1]."""
    stripped = text.strip()
    try:
        value = float(stripped[:-1]) / 100 if stripped.endswith("%") else float(stripped)
    except ValueError:
        raise ValueError(f"{text!r} is not a share of the budget; write 50% or 0.5") from None
    if not 0 < value <= 1:
        raise ValueError(f"{text!r} is not a share of the budget in (0, 100%]; for none left, write exhausted: true")
    return value


def problems(steps: Sequence[PolicyStep], reserved: Collection[str]) -> list[Problem]:
    """Everything wrong with a policy, keyed from ``policy``: each step's, and two steps alike."""
    out: list[Problem] = []
    seen: dict[tuple[object, ...], int] = {}
    for i, step in enumerate(steps):
        out += [(("policy", i, *key), message) for key, message in step.problems(reserved)]
        identity = (step.name, step.severity, tuple(sorted(step.labels.items())))
        if identity in seen:
            out.append(
                (("policy", i), f"alerts as {step.name} with the same severity and labels as policy[{seen[identity]}]")
            )
        seen.setdefault(identity, i)
    return out


def url_problems(url: str | None) -> list[Problem]:
    if url is None or _URL.fullmatch(url.rstrip("/")):
        return []
    return [(("dashboard_url",), f"{url!r} is not Grafana's base URL (http:// or https://, no query)")]


def summary(slo: PolicySLO, step: PolicyStep) -> str:
    return f"{slo.name} ({slo.service}): error budget {step.state}"


def description(slo: PolicySLO, step: PolicyStep) -> str:
    """The step's description, then what is left (``$value``, at each evaluation) against the step."""
    left = f"{VALUE_PERCENT} of its {slo.window} error budget left"
    where = "none is left" if step.exhausted else f"the policy acts below {percent(step.threshold)}"
    return f"{step.description.strip()} {slo.name} ({slo.service}) has {left}; {where}.".strip()


def describe(steps: Sequence[PolicyStep]) -> str:
    """The steps in words: ``ErrorBudgetLow (ticket): budget below 50%, action=review; ...``."""
    return "; ".join(
        f"{step.name} ({step.severity}): budget {step.state}"
        + "".join(f", {key}={value}" for key, value in step.labels.items())
        for step in steps
    )


def percent(value: float) -> str:
    return f"{num(value * 100)}%"


def dashboard_link(slo: PolicySLO, window: str, at: float | None = None) -> str:
    """The burn dashboard for ``slo``, from ``window`` before the evaluation to the evaluation.

    Prometheus renders annotations at each evaluation; ``query "time()"`` is that evaluation's time, so
    the range is absolute (Grafana's ``from``/``to`` in milliseconds) and still right when read later.
    With ``at`` (seconds), the link as an evaluation at that time renders it, for a test to expect.
    """
    base = (slo.dashboard_url or DEFAULT_DASHBOARD_URL).rstrip("/")
    back = parse_duration(window)
    if at is None:
        start, end = _milliseconds(f"(time() - {num(back)})"), _milliseconds("time()")
    else:
        start, end = f"{(at - back) * 1000:.0f}", f"{at * 1000:.0f}"
    return f"{base}/d/{BURN_DASHBOARD}?var-{SLO_VARIABLE}={slo.name}&from={start}&to={end}"


def _milliseconds(expr: str) -> str:
    """A template giving ``expr`` (seconds) in whole milliseconds, evaluated at the alert's evaluation."""
    return f'{{{{ query "{expr} * 1000" | first | value | printf "%.0f" }}}}'
