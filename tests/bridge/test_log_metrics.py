"""log_metrics against sample legacy logs: exact counts, histogram sums and buckets, bounded labels."""

from __future__ import annotations

import orjson
import pytest

from obsbox.config import build
from obsbox.exporters.bridge.processors.log_metrics import LogMetricsConfig, LogMetricsProcessor, load_rules
from tests.bridge.harness import context, traced

SAMPLE = [
    {
        "Timestamp": "2026-11-30T12:00:00Z",
        "Service": "gateway",
        "Level": "Error",
        "Message": "upstream timeout after 1500ms calling retrieval",
    },
    {"Timestamp": "2026-11-30T12:00:01Z", "Service": "gateway", "Level": "Error", "Message": "timeout after 250ms"},
    {"Timestamp": "2026-11-30T12:00:02Z", "Service": "worker", "Level": "Error", "Message": "pod OOMKilled"},
    {
        "Timestamp": "2026-11-30T12:00:03Z",
        "Service": "gateway",
        "Level": "Error",
        "Message": "rpc error: context deadline exceeded",
    },
    {
        "Timestamp": "2026-11-30T12:00:04Z",
        "Service": "gateway",
        "Level": "Information",
        "Message": "ok",
        "LatencyBreakdown": {
            "NetworkMs": 12.5,
            "SerializationMs": 80,
            "SchedulerWaitMs": 210,
            "PrefillMs": "120",
            "Total": 999,
            "DecodeMs": -1,
        },
    },
    {
        "Timestamp": "2026-11-30T12:00:05Z",
        "Service": "gateway",
        "Message": "ok",
        "LatencyBreakdown": {"NetworkMs": 7.5, "SchedulerWaitMs": 40},
    },
]


def run(lines, **options):
    ctx = context()
    processor = LogMetricsProcessor(build(LogMetricsConfig, options), ctx)
    processor.process(traced(*lines))
    return ctx.metrics.registry


def sample(registry, name, **labels):
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_default_rules_exact_values():
    registry = run([orjson.dumps(obj) for obj in SAMPLE] + [b"OOMKilled in a plain-text line"])
    assert sample(registry, "obsbox_log_timeout_duration_seconds_count", service="gateway") == 2
    assert sample(registry, "obsbox_log_timeout_duration_seconds_sum", service="gateway") == pytest.approx(1.75)
    assert sample(registry, "obsbox_log_timeout_duration_seconds_bucket", service="gateway", le="0.25") == 1
    assert sample(registry, "obsbox_log_timeout_duration_seconds_bucket", service="gateway", le="1.0") == 1
    assert sample(registry, "obsbox_log_timeout_duration_seconds_bucket", service="gateway", le="2.5") == 2
    assert sample(registry, "obsbox_log_oom_killed_total", service="worker") == 1
    assert sample(registry, "obsbox_log_oom_killed_total", service="unknown_service") == 1
    assert sample(registry, "obsbox_log_deadline_exceeded_total", service="gateway") == 1


def test_latency_breakdown_feeds_stage_histograms():
    registry = run([orjson.dumps(obj) for obj in SAMPLE])
    name = "obsbox_log_stage_duration_seconds"
    assert sample(registry, f"{name}_count", service="gateway", stage="network") == 2
    assert sample(registry, f"{name}_sum", service="gateway", stage="network") == pytest.approx(0.020)
    assert sample(registry, f"{name}_sum", service="gateway", stage="serialization") == pytest.approx(0.080)
    assert sample(registry, f"{name}_sum", service="gateway", stage="scheduler_wait") == pytest.approx(0.250)
    assert sample(registry, f"{name}_sum", service="gateway", stage="prefill") == pytest.approx(0.120)
    assert sample(registry, f"{name}_count", service="gateway", stage="total") == 0  # not a *Ms key
    assert sample(registry, f"{name}_count", service="gateway", stage="decode") == 0  # negative: ignored


def test_custom_rule_value_from_field_labels_bounded_and_gauge():
    rules = [
        {
            "name": "queue",
            "regex": "queue depth",
            "metric": "app_queue_depth",
            "type": "gauge",
            "value": {"field": "depth"},
            "labels": {"queue": "queue"},
        },
        {
            "name": "errors",
            "regex": "failed",
            "field": "event",
            "metric": "app_failures_total",
            "labels": {"tenant": "ctx.tenant"},
        },
    ]
    lines = [orjson.dumps({"msg": "queue depth", "depth": d, "queue": "q1"}) for d in (3, 9, 4)]
    lines += [orjson.dumps({"event": "job failed", "ctx": {"tenant": f"t{i}"}}) for i in range(5)]
    registry = run(lines, defaults=False, rules=rules, max_label_values=3)
    assert sample(registry, "app_queue_depth", queue="q1") == 4
    assert [sample(registry, "app_failures_total", tenant=t) for t in ("t0", "t1", "t2", "other")] == [1, 1, 1, 2]


def test_bad_rules_are_refused_with_reasons():
    for rule, reason in [
        ({"name": "a", "regex": "(", "metric": "x_total"}, "invalid regex"),
        ({"name": "b", "regex": "x", "metric": "x"}, "counter names end in _total"),
        ({"name": "c", "regex": "x", "metric": "h", "type": "histogram"}, "needs value"),
        ({"name": "d", "regex": "x", "metric": "h", "type": "histogram", "value": {"group": 2}}, "no group 2"),
        ({"name": "e", "regex": "x", "metric": "bad-name_total"}, "not a valid Prometheus metric name"),
    ]:
        with pytest.raises(Exception, match=reason):
            build(LogMetricsConfig, {"rules": [rule]})


def test_shipped_rules_carry_actions_for_alerts():
    rules = {rule.name: rule for rule in load_rules()}
    assert set(rules) == {"timeout", "oom_killed", "deadline_exceeded"}
    assert "memory" in rules["oom_killed"].action and "restart" in rules["oom_killed"].action
    assert "timeout" in rules["deadline_exceeded"].action and "retry" in rules["deadline_exceeded"].action
    assert all(rule.alert is not None for rule in rules.values())
