"""The log_metrics alerts and the GPU autoscaling signals under ``promtool test rules``."""

from __future__ import annotations

from typing import Any

from obsbox import conventions, slo
from obsbox.logrules import load_rules
from obsbox.slo.rules import LOG_ALERT_GROUP, seconds
from tests.slo.scenarios import run_rule_tests, values

HOLD = int(conventions.GPU_SCALE_HOLD_SECONDS // 60)


def generated() -> tuple[dict[str, Any], str]:
    document = slo.rules(slo.load(slo.DEFAULT_SPEC))
    return document, slo.render(document, slo.DEFAULT_SPEC.name)


def alert(document: dict[str, Any], name: str, **labels: str) -> dict[str, Any]:
    """The expected alert: the generated rule's labels and annotations, plus the series' labels."""
    (rule,) = [r for g in document["groups"] for r in g["rules"] if r.get("alert") == name]
    return {"exp_labels": {**rule["labels"], **labels}, "exp_annotations": rule["annotations"]}


def test_log_metrics_alerts_fire_above_their_threshold_after_their_hold(tmp_path):
    document, text = generated()
    tests = []
    rules = [rule for rule in load_rules() if rule.alert is not None]
    assert rules, "the shipped log_metrics rules have alerts"
    group = next(g for g in document["groups"] if g["name"] == LOG_ALERT_GROUP)
    for rule in rules:
        spec = rule.alert
        name = next(r["alert"] for r in group["rules"] if r["labels"]["log_rule"] == rule.name)
        window, hold = int(seconds(spec.window) // 60), int(seconds(spec.for_) // 60)
        if spec.threshold > 0:
            # "hot" logs at twice the threshold, "cool" at half of it. rate() over a window not yet full
            # of data is that fraction of the real rate, so "hot" passes the threshold once half the
            # window has data and fires `for` later; at minute `for` it cannot have fired yet.
            end = window + hold + 10
            series = [
                {"series": f'{rule.series}{{service="hot"}}', "values": values([120 * spec.threshold] * end)},
                {"series": f'{rule.series}{{service="cool"}}', "values": values([30 * spec.threshold] * end)},
            ]
            hot = [alert(document, name, service="hot")]
            cases = [(hold, []), (window + hold + 1, hot), (end, hot)]
        else:
            # Any occurrence: "old" had the series at 0 before its first increment, "new" appears at 1.
            series = [
                {"series": f'{rule.series}{{service="old"}}', "values": "0 0 0 1x10"},
                {"series": f'{rule.series}{{service="new"}}', "values": "_ _ _ 1x10"},
            ]
            both = [alert(document, name, service="old"), alert(document, name, service="new")]
            cases = [(2, []), (3, both), (3 + window - 1, both), (3 + window + 1, [])]
        tests.append(
            {
                "name": f"log rule {rule.name}",
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [{"eval_time": f"{t}m", "alertname": name, "exp_alerts": exp} for t, exp in cases],
            }
        )
    run_rule_tests(tmp_path, text, tests)


def gpu_series(memory: list[float], qps: list[float]) -> list[dict[str, str]]:
    """Two GPUs whose mean memory utilization is ``memory[i]`` in minute i, and the decode rate.

    The prefill stage's counter races; a rule that forgot ``stage="decode"`` would see it.
    """
    return [
        {
            "series": f'{conventions.GPU_MEMORY_UTILIZATION}{{gpu="0"}}',
            "values": " ".join(f"{m + 0.04:.4f}" for m in memory),
        },
        {
            "series": f'{conventions.GPU_MEMORY_UTILIZATION}{{gpu="1"}}',
            "values": " ".join(f"{m - 0.04:.4f}" for m in memory),
        },
        {
            "series": f'{conventions.STAGE_DURATION}_count{{stage="decode"}}',
            "values": values([q * 60 for q in qps[1:]]),
        },
        {
            "series": f'{conventions.STAGE_DURATION}_count{{stage="prefill"}}',
            "values": values([60_000] * (len(qps) - 1)),
        },
    ]


def gpu_case(label: str, alerts: tuple[str, str], memory: list[float], qps: list[float], expect: list) -> dict:
    """A test group: the first of ``alerts`` fires as ``expect`` says at each minute, the other never."""
    name, other = alerts
    checks = [{"eval_time": f"{t}m", "alertname": name, "exp_alerts": exp} for t, exp in expect]
    checks += [{"eval_time": f"{t}m", "alertname": other, "exp_alerts": []} for t, _ in expect]
    series = gpu_series(memory, qps)
    return {"name": f"{name} {label}", "interval": "1m", "input_series": series, "alert_rule_test": checks}


def close_to(expr: str, value: float, minute: int) -> dict[str, Any]:
    expr = f"abs({expr} - {value!r}) < bool 1e-6"
    return {"expr": expr, "eval_time": f"{minute}m", "exp_samples": [{"labels": "{}", "value": 1}]}


def test_gpu_scale_signals_need_both_conditions_held_for_five_minutes(tmp_path):
    document, text = generated()
    minutes = HOLD + 12
    tests = []
    for name, other, limits, past in (
        (slo.GPU_SCALE_UP_ALERT, slo.GPU_SCALE_DOWN_ALERT, conventions.GPU_SCALE_UP, 1.05),
        (slo.GPU_SCALE_DOWN_ALERT, slo.GPU_SCALE_UP_ALERT, conventions.GPU_SCALE_DOWN, 0.95),
    ):
        short = 2 - past  # as far on the other side of the limit
        memory_in = [limits["gpu_memory_utilization"] * past] * minutes
        memory_out = [limits["gpu_memory_utilization"] * short] * minutes
        qps_in = [limits["decode_qps"] * past] * minutes
        qps_out = [limits["decode_qps"] * short] * minutes
        fired = [alert(document, name)]
        never = [(HOLD + 1, []), (minutes - 1, [])]
        # Decode QPS has a value from minute 1 (a rate over 1m needs two samples): both hold from then on.
        both = gpu_case("both", (name, other), memory_in, qps_in, [(HOLD, []), (HOLD + 1, fired)])
        both["promql_expr_test"] = [close_to(slo.DECODE_QPS, qps_in[0], 3), close_to(slo.GPU_MEMORY, memory_in[0], 3)]
        # Memory leaves the zone in minute 5: the hold starts again at minute 6.
        dip = memory_in[:5] + memory_out[:1] + memory_in[6:]
        tests += [
            both,
            gpu_case("memory only", (name, other), memory_in, qps_out, never),
            gpu_case("qps only", (name, other), memory_out, qps_in, never),
            gpu_case(
                "interrupted", (name, other), dip, qps_in, [(HOLD + 1, []), (6 + HOLD - 1, []), (6 + HOLD, fired)]
            ),
        ]
    run_rule_tests(tmp_path, text, tests)
