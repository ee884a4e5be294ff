"""Latency budgets per stage: the spec refuses budgets that do not add up, the rules record each stage's
overspend, and the burn alerts' text names the stages over budget, rendered by promtool test rules."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from obsbox import conventions, slo
from obsbox.config import ConfigError
from obsbox.slo.budgets import OVERSPEND_ANNOTATION, STAGE_OVERSPEND, STAGE_SPEND, WITHIN_BUDGET, overspend_text
from obsbox.slo.policies import dashboard_link
from tests.slo.scenarios import run_rule_tests, values

ROOT = Path(__file__).resolve().parents[2]
# The untuned demo's stage means (ms per request), read from its /metrics after 20 s of
# `obsbox demo --scenario untuned --sessions 50` (the figures in the spec's comment).
UNTUNED_MS = {
    "network": 7.9,
    "tls": 33.8,
    "jwt_verify": 30.6,
    "pre_cache_validation": 25.9,
    "context_serialization": 270.8,
    "retrieval": 93.5,
    "scheduler_wait": 3.5,
    "prefill": 101.6,
}
PER_MINUTE = 600  # requests
MINUTES = 15
SEED_LABELS = {"slo": "ReplyLatency", "service": "gateway"}

SPEC = """\
service: gateway
slos:
  - name: ReplyLatency
    objective: 0.95
    sli: {{kind: latency, metric: gateway_reply_latency_seconds, threshold: 300ms}}
    runbook: Look at the stage breakdown.
    budgets:
{budgets}
"""


def spec(budgets: str) -> str:
    return SPEC.format(budgets=textwrap.indent(textwrap.dedent(budgets), " " * 6))


def test_the_seed_spec_splits_its_300_ms_among_the_stages_the_reply_waits_for():
    (latency, _) = slo.load(slo.DEFAULT_SPEC)
    assert latency.budgets is not None
    assert list(latency.budgets.stages) == [s for s in conventions.STAGES if s != "decode"]
    assert latency.budgets.total == pytest.approx(0.3)


def test_budgets_that_do_not_add_up_to_the_threshold_are_refused_in_one_line():
    text = spec("""\
        metric: gateway_stage_duration_seconds
        stages: {network: 20ms, context_serialization: 100ms, prefill: 60ms}
        slack: 10ms
        """)
    with pytest.raises(ConfigError) as caught:
        slo.loads(text, source="slo.yaml")
    message = str(caught.value)
    assert message == (
        "slo.yaml:9: slos[0].budgets.stages: the budgets add up to 190 ms (slack 10 ms included), not the "
        "threshold of 300 ms; change a budget, or put the time no stage measures under budgets.slack"
    )
    assert "\n" not in message


@pytest.mark.parametrize(
    ("budgets", "refusal"),
    [
        ("stages: {network: 300ms}", r"budgets\.stages\.network: how is it measured\?"),
        ("source: vllm\nstages: {scheduler: 300ms}", r"stages\.scheduler: scheduler is not a latency signal .*prefill"),
        ("metric: x_bucket\nstages: {network: 300ms}", r"budgets\.metric: 'x_bucket': give the histogram's base name"),
        ("metric: x\nstages: {network: -1, tls: 301s}", r"budgets\.stages\.network: -1 is not a positive duration"),
        ("stages: {network: {budget: 300ms, histogram: 'x{'}}", r"stages\.network\.histogram: "),
    ],
)
def test_budgets_that_cannot_be_measured_are_refused(budgets, refusal):
    with pytest.raises(ConfigError, match=refusal):
        slo.loads(spec(budgets))


def test_budgets_belong_to_latency_slos():
    text = spec("metric: x\nstages: {network: 300ms}").replace(
        "{kind: latency, metric: gateway_reply_latency_seconds, threshold: 300ms}",
        "{kind: availability, bad: 'x_total{code=\"500\"}', total: x_total}",
    )
    with pytest.raises(ConfigError, match=r"slos\[0\]\.budgets: belongs to a latency SLI"):
        slo.loads(text)


def untuned_series(stages_ms: dict[str, float]) -> list[dict[str, str]]:
    """The seed's histograms at PER_MINUTE requests a minute: each stage at its mean, 99% of replies slow."""
    out = []
    for stage, ms in stages_ms.items():
        out += [
            {
                "series": f'{conventions.STAGE_DURATION}_sum{{stage="{stage}"}}',
                "values": values([PER_MINUTE * ms / 1000] * MINUTES),
            },
            {
                "series": f'{conventions.STAGE_DURATION}_count{{stage="{stage}"}}',
                "values": values([PER_MINUTE] * MINUTES),
            },
        ]
    reply = conventions.REPLY_LATENCY
    return [
        *out,
        {"series": f'{reply}_bucket{{le="0.3"}}', "values": values([PER_MINUTE / 100] * MINUTES)},
        {"series": f"{reply}_count", "values": values([PER_MINUTE] * MINUTES)},
    ]


def rendered(rules: dict, overspend: str) -> list[dict]:
    """The ReplyLatency burn alerts that fire on a steady 99% of slow replies, with the stage template
    replaced by the text Prometheus should render from it."""
    (group,) = [g for g in rules["groups"] if g["name"] == "obsbox-slo-ReplyLatency"]
    template = overspend_text(SEED_LABELS)
    (seed,) = [s for s in slo.load(slo.DEFAULT_SPEC) if s.name == "ReplyLatency"]
    return [
        {
            "exp_labels": rule["labels"],
            "exp_annotations": {
                **{k: v.replace(template, overspend) for k, v in rule["annotations"].items()},
                "dashboard": dashboard_link(seed, rule["labels"]["long_window"], MINUTES * 60),
            },
        }
        for rule in group["rules"]
        if rule.get("alert") == conventions.SLO_ALERT
    ]


def test_the_untuned_demo_s_alerts_name_the_stages_over_budget(tmp_path):
    """The untuned demo's stage means against the seed's budgets: the overspend series and the alert text,
    rendered by promtool's Prometheus from the alert's own query."""
    slos = slo.load(slo.DEFAULT_SPEC)
    document = slo.rules(slos)
    latency = slos[0]
    assert latency.budgets is not None
    over = {
        stage: ms / 1000 - latency.budgets.budget(stage)
        for stage, ms in UNTUNED_MS.items()
        if ms / 1000 > latency.budgets.budget(stage)
    }
    assert set(over) == {"tls", "jwt_verify", "pre_cache_validation", "context_serialization", "retrieval", "prefill"}
    said = (
        "context_serialization is 170.8ms over its 100ms budget. retrieval is 53.5ms over its 40ms budget. "
        "prefill is 41.6ms over its 60ms budget."
    )
    within = dict.fromkeys(UNTUNED_MS, 5.0)  # every stage at 5 ms: none over
    tests = [
        {
            "name": "untuned",
            "interval": "1m",
            "input_series": untuned_series(UNTUNED_MS),
            "promql_expr_test": [  # in tenths of a millisecond: promtool compares floats exactly
                {
                    "expr": f'round(10000 * {STAGE_OVERSPEND}{{slo="ReplyLatency"}})',
                    "eval_time": f"{MINUTES}m",
                    "exp_samples": [
                        {"labels": f'{{service="gateway",slo="ReplyLatency",stage="{s}"}}', "value": round(v * 10000)}
                        for s, v in over.items()
                    ],
                },
                {
                    "expr": f'round(10000 * {STAGE_SPEND}{{stage="network"}})',
                    "eval_time": f"{MINUTES}m",
                    "exp_samples": [{"labels": '{service="gateway",slo="ReplyLatency",stage="network"}', "value": 79}],
                },
            ],
            "alert_rule_test": [
                {"eval_time": f"{MINUTES}m", "alertname": conventions.SLO_ALERT, "exp_alerts": rendered(document, said)}
            ],
        },
        {
            "name": "slow replies, every stage within its budget",
            "interval": "1m",
            "input_series": untuned_series(within),
            "alert_rule_test": [
                {
                    "eval_time": f"{MINUTES}m",
                    "alertname": conventions.SLO_ALERT,
                    "exp_alerts": rendered(document, WITHIN_BUDGET),
                }
            ],
        },
    ]
    (alert, *_) = rendered(document, said)
    assert alert["exp_annotations"][OVERSPEND_ANNOTATION] == said
    assert said in alert["exp_annotations"]["description"]
    run_rule_tests(tmp_path, slo.render(document, "slo.yaml"), tests)


def test_vllm_s_own_histograms_reach_the_ttft_stage_budgets_through_the_llm_rules(tmp_path):
    """vLLM's queue and prefill histograms, through the committed LLM rules and the LLM SLO rules: prefill
    at 440 ms a request is 140 ms over its 300 ms budget; the queue, at 50 ms, is within its 100 ms."""
    ttft = {s.name: s for s in slo.load(ROOT / "compose" / "slo-llm.yaml")}["vllm-ttft"]
    assert (
        ttft.budgets is not None and ttft.budgets.source == "vllm" and list(ttft.budgets.stages) == ["queue", "prefill"]
    )
    rules = ROOT / "compose" / "prometheus" / "rules"
    groups = [  # the committed files' groups for vLLM and its TTFT SLO (the others would only idle)
        g
        for name in ("llm.rules.yml", "slo-llm.rules.yml")
        for g in yaml.safe_load((rules / name).read_text())["groups"]
        if g["name"] in ("obsbox-llm-vllm", "obsbox-slo-vllm-ttft")
    ]
    assert len(groups) == 2
    target = 'job="vllm",instance="engine:8000",model_name="m"'
    inputs = [
        {"series": f"vllm:request_{stage}_time_seconds_{part}{{{target}}}", "values": values([amount] * MINUTES)}
        for stage, mean in (("queue", 0.05), ("prefill", 0.44))
        for part, amount in (("sum", PER_MINUTE * mean), ("count", PER_MINUTE))
    ]
    test = {
        "name": "vllm-ttft stages",
        "interval": "1m",
        "input_series": inputs,
        "promql_expr_test": [
            {
                "expr": f'round(10000 * {STAGE_OVERSPEND}{{slo="vllm-ttft"}})',
                "eval_time": f"{MINUTES}m",
                "exp_samples": [{"labels": '{service="vllm",slo="vllm-ttft",stage="prefill"}', "value": 1400}],
            },
            {
                "expr": f'round(10000 * {STAGE_SPEND}{{slo="vllm-ttft"}})',
                "eval_time": f"{MINUTES}m",
                "exp_samples": [
                    {"labels": f'{{service="vllm",slo="vllm-ttft",stage="{stage}"}}', "value": value}
                    for stage, value in (("queue", 500), ("prefill", 4400))
                ],
            },
        ],
    }
    run_rule_tests(tmp_path, yaml.safe_dump({"groups": groups}, sort_keys=False), [test])
