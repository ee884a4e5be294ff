"""The SLO rules under ``promtool test rules``: each burn-rate condition fires at its rate and not below it."""

from __future__ import annotations

from pathlib import Path

import pytest

from obsbox import conventions, slo
from obsbox.slo.budgets import STAGE_BUDGET, STAGE_OVERSPEND, STAGE_SPEND
from obsbox.slo.rules import seconds
from tests.slo.scenarios import Segment, burn_test, firing, run_rule_tests

TESTDATA = Path(__file__).parent / "testdata"
FEATURES = TESTDATA / "features.slo.yaml"
SPECS = {"seed": slo.DEFAULT_SPEC, "features": FEATURES, "weekly": TESTDATA / "weekly.slo.yaml"}  # 30d, 28d, 7d
ABOVE, BELOW = 1.01, 0.99  # "at its burn rate" and "just below it"


def build(spec: Path) -> tuple[list[slo.SLO], dict, str]:
    slos = slo.load(spec)
    document = slo.rules(slos)
    return slos, document, slo.render(document, spec.name)


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_each_condition_fires_at_its_burn_rate_and_not_just_below(spec, tmp_path):
    """A steady burn at 1.01x and at 0.99x of every condition's factor.

    With a steady burn every window sees the same ratio, so exactly the conditions whose factor the
    burn reaches fire: 1.01 x 6 fires both ticket conditions and the 6h page but not the 1h page.
    """
    slos, document, text = build(spec)
    tests = []
    for s in slos:
        for condition in s.burn_conditions():
            for margin in (ABOVE, BELOW):
                schedule = [Segment(90, condition.factor * margin)]
                name = f"{s.name} {condition.severity} {condition.long_window}/{condition.short_window} x{margin}"
                tests.append(burn_test(name, document, [s], schedule, at=[90]))
                fired = tests[-1]["alert_rule_test"][0]["exp_alerts"]
                assert {a["exp_labels"]["long_window"] for a in fired} == {
                    c.long_window for c in s.burn_conditions() if c.factor <= condition.factor * margin
                }
    assert len(tests) == 2 * 4 * len(slos)
    run_rule_tests(tmp_path, text, tests, interval="5m")


@pytest.mark.slow
def test_both_windows_must_burn(tmp_path):
    """Per condition, at 1.3x its factor: a spike that fills the short window but not the long one
    stays silent; a burn that fills the long window fires; once the short window has been clean
    again the alert resets, although the long window still burns."""
    slos, document, _ = build(slo.DEFAULT_SPEC)
    tests = []
    latency = slos[0]
    # promtool evaluates only this SLO's group: four days at 5m steps of every group took twice as long
    (group,) = [g for g in document["groups"] if g["name"] == f"obsbox-slo-{latency.name}"]
    # and without its stage-budget rules, which read series this test does not feed (a quarter of its time)
    stages = (STAGE_BUDGET, STAGE_SPEND, STAGE_OVERSPEND)
    own = {"groups": [{**group, "rules": [r for r in group["rules"] if r.get("record") not in stages]}]}
    text = slo.render(own, slo.DEFAULT_SPEC.name)
    for condition in latency.burn_conditions():
        long, short = (int(seconds(w) // 60) for w in (condition.long_window, condition.short_window))
        burn = condition.factor * 1.3
        # Before the spike only 2 short windows of clean traffic: a long window reaching further back
        # sees just the data there is, so the spike is half of it.
        schedule = [Segment(2 * short, 0.0), Segment(long + short, burn), Segment(2 * short, 0.0)]
        spike, sustained, recovered = 4 * short, long + 3 * short, long + 5 * short
        name = f"windows {condition.long_window}/{condition.short_window}"
        # A sample every 5m (each 5m rate still sees two, as the windows are closed in Prometheus 2)
        test = burn_test(name, document, [latency], schedule, at=[spike, sustained, recovered], step=5)
        states = [
            {(a["exp_labels"]["slo"], a["exp_labels"]["long_window"]) for a in case["exp_alerts"]}
            for case in test["alert_rule_test"]
        ]
        mine = {(latency.name, condition.long_window)}
        assert [mine & state for state in states] == [set(), mine, set()], states
        tests.append(test)
    run_rule_tests(tmp_path, text, tests, interval="5m")


def test_recorded_values(tmp_path):
    """Objective, budget, burn rates and budget remaining, and a period ratio weighted by traffic.

    An hour at 10x the traffic and a 10% error ratio, then an hour at 50%: of 660,000 events 90,000
    failed, 13.6%. Sloth's average of the 5m ratios would say 30%.
    """
    slos, document, text = build(slo.DEFAULT_SPEC)
    latency = slos[0]
    schedule = [Segment(60, 0.10 / latency.error_budget, 10_000), Segment(60, 0.50 / latency.error_budget, 1_000)]
    weighted = (60 * 10_000 * 0.10 + 60 * 1_000 * 0.50) / (60 * 10_000 + 60 * 1_000)
    period = latency.window
    checks = {
        latency.recorded(conventions.SLO_OBJECTIVE): latency.objective,
        latency.recorded(conventions.SLO_ERROR_BUDGET): latency.error_budget,
        latency.recorded(conventions.SLI_ERROR_RATIO.format(window="5m")): 0.50,
        latency.recorded(conventions.SLI_ERROR_RATIO.format(window="2h")): weighted,
        latency.recorded(conventions.SLI_ERROR_RATIO.format(window=period)): weighted,
        latency.recorded(conventions.SLO_CURRENT_BURN_RATE): 0.50 / latency.error_budget,
        latency.recorded(conventions.SLO_PERIOD_BURN_RATE): weighted / latency.error_budget,
        latency.recorded(conventions.SLO_BUDGET_REMAINING): 1 - weighted / latency.error_budget,
    }
    labels = f'{{service="{latency.service}", slo="{latency.name}"}}'
    test = burn_test("recorded values", document, [latency], schedule, at=[])
    test["promql_expr_test"] = [
        {
            "expr": f"abs({expr} - {value!r}) < bool 1e-9",
            "eval_time": "120m",
            "exp_samples": [{"labels": labels, "value": 1}],
        }
        for expr, value in checks.items()
    ]
    run_rule_tests(tmp_path, text, [test], interval="5m")


def test_a_weekly_slo_pages_on_a_burn_its_scaled_window_sees(tmp_path):
    """20 minutes at 1.3x the page factor, after an hour clean: the 7d SLO's page (14.4x over 14m and 5m)
    fires, where a 30d SLO's page, over 1h, would still be below 14.4x (6.24x)."""
    weekly, document, text = build(SPECS["weekly"])
    (page, *_) = weekly[0].burn_conditions()
    assert (page.factor, page.long_window, page.short_window) == (14.4, "14m", "5m")
    schedule = [Segment(60, 0.0), Segment(20, page.factor * 1.3)]
    test = burn_test("7d page", document, weekly, schedule, at=[80])
    fired = {a["exp_labels"]["long_window"] for a in test["alert_rule_test"][0]["exp_alerts"]}
    assert "14m" in fired
    seed = slo.load(slo.DEFAULT_SPEC)[0]
    assert "1h" not in {c.long_window for c in firing(seed, schedule, 80)}
    run_rule_tests(tmp_path, text, [test], interval="5m")
