"""The SLOs the dashboards and the report draw, read with :func:`obsbox.slo.load` from the SLO spec.

The default is the example spec that ships with obsbox (``obsbox.slo.DEFAULT_SPEC``, package data, the
same file as ``compose/slo.yaml``); :func:`using` points the build at another one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from obsbox import conventions as c
from obsbox import slo as slo_spec
from obsbox.dashboards import panels as p
from obsbox.dashboards.panels import DashboardError
from obsbox.slo.policies import SLO_VARIABLE

_spec: Path | None = None


@contextmanager
def using(path: Path | None) -> Iterator[None]:
    """Read the SLOs from ``path`` (None: the default spec) inside the block."""
    global _spec  # noqa: PLW0603
    previous, _spec = _spec, path
    try:
        yield
    finally:
        _spec = previous


def spec_path() -> Path:
    return _spec if _spec is not None else slo_spec.DEFAULT_SPEC


def load() -> list[slo_spec.SLO]:
    path = spec_path()
    if not path.is_file():
        raise DashboardError(f"no SLO spec at {path}; pass the spec with --slo SLO_YAML")
    return slo_spec.load(path)


def selector(slo: slo_spec.SLO) -> str:
    """The label matchers of the SLO's recorded series: ``service="gateway",slo="ReplyLatency"``."""
    return ",".join(str(m) for m in slo.identity)


def panel_selector(slo: slo_spec.SLO) -> str:
    """:func:`selector`, narrowed by the burn dashboard's SLO variable, which an alert's link sets."""
    return f'{selector(slo)},slo=~"${SLO_VARIABLE}"'


def burn_windows(slo: slo_spec.SLO) -> list[str]:
    """The windows its rules record a burn rate for, shortest first, without the period itself."""
    return [w for w in slo_spec.slo_windows(slo) if w != slo.window]


def reply_latency_slo(slos: list[slo_spec.SLO] | None = None) -> slo_spec.SLO:
    """The latency SLO on the reply-latency histogram: its threshold is the line on latency panels."""
    for slo in load() if slos is None else slos:
        if slo.sli.kind == "latency" and slo.sli.metric == c.REPLY_LATENCY:
            return slo
    raise DashboardError(f"{spec_path()} has no latency SLO on {c.REPLY_LATENCY}; the dashboards draw its threshold")


def reply_latency_threshold() -> float:
    threshold = reply_latency_slo().sli.threshold
    assert threshold is not None  # a loaded latency SLO always has one
    return threshold


def latency_quantile(slo: slo_spec.SLO) -> str:
    """The latency at the SLO's objective (P95 for 95%), over 5m, from its histogram: above the
    threshold, that 5m missed the objective. Its exemplars are single requests with their trace."""
    sli = slo.sli
    if sli.kind != "latency" or sli.metric is None:
        raise DashboardError(f"SLO {slo.name} is not a latency SLO; it has no histogram to draw")
    if sli.histogram == "native":
        return f"histogram_quantile({slo.objective:g}, sum(rate({slo_spec.Selector(sli.metric, slo.matchers)}[5m])))"
    buckets = slo_spec.Selector(f"{sli.metric}_bucket", slo.matchers)
    return f"histogram_quantile({slo.objective:g}, sum by (le) (rate({buckets}[5m])))"


def policy_thresholds(slo: slo_spec.SLO) -> list[dict]:
    """The policy's steps as threshold steps of the budget remaining: green above the highest, darker below each."""
    colors = ("green", "yellow", "orange", "red")
    levels = sorted({step.threshold for step in slo.policy or ()}, reverse=True)
    steps = [(level, colors[min(i, len(colors) - 1)]) for i, level in enumerate(levels)]
    return p.steps(*reversed(steps), base="dark-red")


def alert_names(slo: slo_spec.SLO) -> list[str]:
    """Every alert name the SLO's rules may fire: the burn-rate ones, no data, its policy's steps."""
    own = [c.SLO_BURN_RATE_ALERT] if slo.alerts else []
    steps = sorted({step.name for step in slo.policy or ()})
    return [c.SLO_ALERT, *own, c.SLO_NO_DATA_ALERT, *steps]
