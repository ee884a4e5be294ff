"""``log_metrics``: turn log patterns, and legacy latency breakdowns, into Prometheus metrics.

A rule matches a regex against the line's message (or against one field, ``field: a.b``) and
counts, observes or sets a metric: the value comes from a capture group or a field, labels come
from fields and are bounded (values past ``max_label_values`` fold into ``other``). Every rule
carries an ``action``, the runbook line that ``obsbox slo build`` turns into alert annotations.

A record with a ``LatencyBreakdown`` object (``NetworkMs``, ``SerializationMs``, ``SchedulerWaitMs``,
any ``*Ms`` key) feeds ``obsbox_log_stage_duration_seconds{service, stage}``, so a legacy service
gets the same stage-breakdown dashboard as an instrumented one.
Threading: pipeline thread only; prometheus-client metrics are themselves thread-safe.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from obsbox import conventions, logfields
from obsbox.exporters.bridge.component import Processor
from obsbox.exporters.bridge.record import Record
from obsbox.logfields import lookup, number
from obsbox.logrules import STAGE_BUCKETS, Rule, load_rules, stage_name


@dataclass
class LogMetricsConfig:
    defaults: bool = True
    rules_file: Path | None = None
    rules: list[Rule] = dataclasses.field(default_factory=list)
    breakdown_field: str | None = "LatencyBreakdown"
    service: str | None = None
    max_label_values: int = 50


class BoundedLabels:
    """Label values per (metric, label), capped; the rest fold into ``other``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.seen: dict[tuple[str, str], set[str]] = {}

    def __call__(self, metric: str, label: str, value: Any) -> str:
        text = value if isinstance(value, str) else ("" if value is None else str(value))
        values = self.seen.setdefault((metric, label), set())
        if text in values:
            return text
        if len(values) >= self.cap:
            return "other"
        values.add(text)
        return text


class LogMetricsProcessor(Processor):
    type = "log_metrics"
    Config = LogMetricsConfig

    def __init__(self, config: LogMetricsConfig, context) -> None:
        super().__init__(config, context)
        self.rules = (
            (load_rules() if config.defaults else [])
            + (load_rules(config.rules_file) if config.rules_file else [])
            + list(config.rules)
        )
        self.bound = BoundedLabels(config.max_label_values)
        self.instruments = {rule.name: self._instrument(rule) for rule in self.rules}
        self.stages = None
        if config.breakdown_field:
            self.stages = self._shared(
                conventions.LOG_STAGE_DURATION,
                "histogram",
                ["service", "stage"],
                "Stage durations from legacy LatencyBreakdown log fields.",
                STAGE_BUCKETS,
            )

    def _shared(self, name: str, kind: str, labels: list[str], help_text: str, buckets=STAGE_BUCKETS):
        """One instrument per metric name, however many rules or bridges use it."""
        telemetry = self.context.telemetry
        if kind == "counter":
            return telemetry.counter(name, help_text, labels)
        if kind == "gauge":
            return telemetry.gauge(name, help_text, labels)
        return telemetry.histogram(name, help_text, labels, buckets)

    def _instrument(self, rule: Rule):
        return self._shared(
            rule.metric, rule.type, sorted(rule.labels), rule.help or f"log rule {rule.name}", tuple(rule.buckets)
        )

    def _service(self, fields: dict[str, Any] | None) -> str:
        return self.config.service or logfields.service(fields) or "unknown_service"

    def process(self, records: list[Record]) -> list[Record]:
        for rec in records:
            fields = rec.fields
            if self.rules:
                self._rules(rec, fields)
            if self.stages is not None and fields is not None:
                breakdown = fields.get(self.config.breakdown_field)
                if isinstance(breakdown, dict):
                    self._breakdown(self.stages, breakdown, fields)
        return records

    def _rules(self, rec: Record, fields: dict[str, Any] | None) -> None:
        message = None
        for rule in self.rules:
            if rule.field is not None:
                target = lookup(fields, rule.field) if fields is not None else None
                text = target if isinstance(target, str) else (None if target is None else str(target))
            else:
                if message is None:
                    message = (logfields.message(fields) if fields is not None else None) or rec.text()
                text = message
            if text is None:
                continue
            match = rule.compiled.search(text)
            if match is None:
                continue
            value = self._value(rule, match, fields)
            if value is None:
                self.context.metrics.errors.labels("log_metrics_value").inc()
                continue
            instrument = self.instruments[rule.name]
            if rule.labels:
                instrument = instrument.labels(
                    **{label: self._label(rule, label, selector, fields) for label, selector in rule.labels.items()}
                )
            if rule.type == "counter":
                instrument.inc(value)
            elif rule.type == "histogram":
                instrument.observe(value)
            else:
                instrument.set(value)

    @staticmethod
    def _value(rule: Rule, match: re.Match[str], fields: dict[str, Any] | None) -> float | None:
        """1 for a rule without ``value``; else the scaled number from its group or field, None if
        that is not a number."""
        if rule.value is None:
            return 1.0
        raw: Any = None  # ValueFrom holds exactly one of group and field (checked when it loads)
        if rule.value.group is not None:
            raw = match.group(rule.value.group)
        elif rule.value.field is not None and fields is not None:
            raw = lookup(fields, rule.value.field)
        parsed = number(raw)
        return None if parsed is None else parsed * rule.scale

    def _label(self, rule: Rule, label: str, selector: str, fields: dict[str, Any] | None) -> str:
        if selector == "service":
            return self.bound(rule.metric, label, self._service(fields))
        return self.bound(rule.metric, label, lookup(fields, selector) if fields is not None else None)

    def _breakdown(self, stages: Any, breakdown: dict[str, Any], fields: dict[str, Any]) -> None:
        """Observe each stage of ``breakdown`` into ``stages`` (the shared stage histogram)."""
        service = self.bound(conventions.LOG_STAGE_DURATION, "service", self._service(fields))
        for key, value in breakdown.items():
            stage = stage_name(key)
            ms = number(value)
            if stage is None or ms is None or ms < 0:
                continue
            stage = self.bound(conventions.LOG_STAGE_DURATION, "stage", stage)
            stages.labels(service, stage).observe(ms / 1000.0)
