"""The log-rule model: patterns in log lines that become metrics, and the runbook action each carries.

A rule matches a regex against a line's message (or one field, ``field: a.b``) and counts, observes
or sets a metric. The bridge's ``log_metrics`` processor evaluates rules; ``obsbox slo build`` turns
their ``action`` and ``alert`` into Prometheus alerts; the spans sink names breakdown stages with
:func:`stage_name`. The shipped defaults (timeouts, OOMKilled, deadline exceeded) are package data.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from obsbox.config import build, load_yaml, parse_yaml

STAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass
class ValueFrom:
    group: int | None = None
    field: str | None = None

    def __post_init__(self) -> None:
        if (self.group is None) == (self.field is None):
            raise ValueError("value takes exactly one of group or field")


@dataclass
class AlertSpec:
    """Fire when the metric's per-second rate over ``window`` exceeds ``threshold`` for ``for``."""

    threshold: float = 0.0
    window: str = "5m"
    severity: Literal["page", "ticket"] = "ticket"
    for_: str = "5m"


@dataclass
class Rule:
    name: str
    regex: str
    metric: str
    type: Literal["counter", "histogram", "gauge"] = "counter"
    field: str | None = None
    value: ValueFrom | None = None
    scale: float = 1.0
    buckets: list[float] = dataclasses.field(default_factory=lambda: list(STAGE_BUCKETS))
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    help: str = ""
    action: str = ""
    alert: AlertSpec | None = None

    def __post_init__(self) -> None:
        try:
            self.compiled = re.compile(self.regex)
        except re.error as exc:
            raise ValueError(f"rule {self.name!r}: invalid regex: {exc}") from None
        if not _METRIC_NAME.fullmatch(self.metric):
            raise ValueError(f"rule {self.name!r}: {self.metric!r} is not a valid Prometheus metric name")
        if self.type == "counter" and not self.metric.endswith("_total"):
            raise ValueError(f"rule {self.name!r}: counter names end in _total ({self.metric!r})")
        if self.type != "counter" and self.value is None:
            raise ValueError(f"rule {self.name!r}: a {self.type} needs value: {{group: N}} or {{field: NAME}}")
        if self.value and self.value.group is not None and self.value.group > self.compiled.groups:
            raise ValueError(f"rule {self.name!r}: the regex has no group {self.value.group}")

    @property
    def series(self) -> str:
        """The series an alert counts: the counter itself, or a histogram's ``_count``."""
        return self.metric if self.type == "counter" else f"{self.metric}_count"


@dataclass
class RuleFile:
    rules: list[Rule]


def _alert_keys(data: Any) -> Any:
    """YAML says ``for:``; the dataclass field is ``for_`` (``for`` is a Python keyword)."""
    for rule in data.get("rules", []) if isinstance(data, dict) else []:
        alert = rule.get("alert") if isinstance(rule, dict) else None
        if isinstance(alert, dict) and "for" in alert:
            alert["for_"] = alert.pop("for")
    return data


def load_rules(path: str | Path | None = None) -> list[Rule]:
    """Rules from a YAML file, or the shipped defaults when ``path`` is None."""
    if path is None:
        text = resources.files(__package__).joinpath("logrules.yaml").read_text(encoding="utf-8")
        doc = parse_yaml(text, source="logrules.yaml (defaults)")
    else:
        doc = load_yaml(path)
    return build(RuleFile, _alert_keys(doc.data), doc).rules


def stage_name(key: str) -> str | None:
    """``SchedulerWaitMs`` → ``scheduler_wait``; None for keys that are not a ``*Ms`` duration."""
    if len(key) < 3 or not key.lower().endswith("ms"):
        return None
    base = key[:-2].rstrip("_")
    return _CAMEL.sub("_", base).lower() if base else None
