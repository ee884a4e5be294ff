"""Single-window burn-rate alerts: an SLO's own alert conditions beside obsbox's four multi-window ones.

OpenSLO's ``AlertCondition`` (its README, "AlertCondition") is one burn-rate comparison: ``op`` (lte, lt,
gte, gt) against ``threshold`` over ``lookbackWindow``, held for ``alertAfter`` (0m by default) before it
alerts. obsbox writes the SRE Workbook's multi-window alerts itself; a condition that is not one of them
(``burnrate lte 2 over 1h``, a 2x burn over a day, ...) becomes an ``SLOBurnRate`` alert of its own:
the SLO's error ratio over the window, over its error budget, compared as the condition says, with
``for:`` set to ``alertAfter``, labelled with the condition's ``severity``, its ``window`` and its
``condition`` name so that a router can tell it from the others. The spec writes them under ``alerts``::

    alerts:
      - {name: cpu-usage-breach, severity: page, op: lte, threshold: 2, window: 1h, after: 5m}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from obsbox.durations import format_duration, parse_duration

OPS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
SHORTEST = "5m"  # the recorded rate's window: a shorter one reads fewer than two samples of a 1m scrape
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
Problem = tuple[tuple[str | int, ...], str]


@dataclass
class BurnAlert:
    """Alert when the burn rate over ``window`` compares with ``threshold`` as ``op`` says, for ``after``."""

    severity: str
    op: Literal["gt", "gte", "lt", "lte"]
    threshold: float
    window: str
    after: str = "0m"  # OpenSLO's alertAfter: Prometheus's for:
    name: str | None = None  # the OpenSLO AlertCondition's name; by default from the other fields

    @property
    def label(self) -> str:
        """The condition's name: its own, or ``page-lte-2-1h``."""
        return self.name or f"{self.severity}-{self.op}-{self.threshold:g}-{self.window}".replace(".", "-").lower()

    def problems(self, period: str) -> list[Problem]:
        """What is wrong with this alert on an SLO over ``period`` (a rolling length)."""
        out: list[Problem] = []
        if not self.severity.strip():
            out.append((("severity",), "names the alert's severity (page, ticket, ...), a router's label value"))
        if self.op not in OPS:
            out.append((("op",), f"{self.op!r} is not one of {', '.join(OPS)}"))
        if self.threshold < 0:
            out.append((("threshold",), f"{self.threshold:g}: a burn rate is never negative"))
        out += [((key,), error) for key in ("window", "after") if (error := _duration_error(getattr(self, key)))]
        if out:
            return out
        window = parse_duration(self.window)
        if window % 60 or not parse_duration(SHORTEST) <= window <= parse_duration(period):
            out.append(
                (
                    ("window",),
                    f"{self.window!r}: a burn-rate window is whole minutes from {SHORTEST} (the recorded rate's) "
                    f"to the SLO's period ({period})",
                )
            )
        if self.name is not None and not _NAME.fullmatch(self.name):
            out.append((("name",), f"{self.name!r}: lowercase letters, digits and '-' (an OpenSLO name)"))
        return out

    def expr(self, ratio: str, budget: str) -> str:
        """The alert's PromQL: the recorded error ratio over the window, over the budget, compared."""
        return f"({ratio} / {budget}) {OPS[self.op]} {self.threshold:g}"

    @property
    def hold(self) -> str | None:
        """Prometheus's ``for:``, None for 0m."""
        seconds = parse_duration(self.after)
        return format_duration(seconds) if seconds else None

    def describe(self) -> str:
        return f"burn rate {OPS[self.op]} {self.threshold:g} over {self.window}" + (
            f" for {self.hold}" if self.hold else ""
        )


def _duration_error(text: str) -> str | None:
    try:
        parse_duration(text)
    except ValueError as exc:
        return str(exc)
    return None
