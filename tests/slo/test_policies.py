"""Error-budget policies: each step fires below its share of the budget and not above it (promtool test
rules), with the labels a router acts on and the dashboard link rendered; bad policies are refused."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from obsbox import conventions, slo
from obsbox.cli import main
from obsbox.config import ConfigError
from obsbox.slo.policies import PolicyStep
from tests.slo.scenarios import Segment, dashboard_link, run_rule_tests, series

MINUTES = 90  # the data there is: the period's ratio is the ratio over these 90 minutes
DASHBOARD = Path(__file__).parents[2] / "compose" / "grafana" / "dashboards" / "obsbox-slo-burn.json"


def fires(step: PolicyStep, remaining: float) -> bool:
    """The policy as written: below the step's share, or (exhausted) none left."""
    return remaining <= 0 if step.exhausted else remaining < step.threshold


def percentage(value: float) -> str:
    """Prometheus' humanizePercentage: ``%.4g%%`` of the value times 100."""
    return f"{value * 100:.4g}%"


def policy_test(document: dict, target: slo.SLO, remaining: float) -> dict:
    """A promtool test group: a steady burn that leaves ``remaining`` of the budget after 90 minutes."""
    schedule = [Segment(MINUTES, 1 - remaining)]
    steps = target.policy or []
    (group,) = [g for g in document["groups"] if g["name"] == f"obsbox-slo-{target.name}"]
    rules = {
        (r["alert"], r["labels"]["severity"], r["labels"].get("action")): r for r in group["rules"] if "alert" in r
    }
    cases = []
    for name in dict.fromkeys(step.name for step in steps):
        expected = []
        for step in steps:
            if step.name != name or not fires(step, remaining):
                continue
            rule = rules[(step.name, step.severity, step.labels.get("action"))]
            annotations = dict(rule["annotations"])
            annotations["description"] = annotations["description"].replace(
                "{{ $value | humanizePercentage }}", percentage(remaining)
            )
            annotations["dashboard"] = dashboard_link(target, target.window, MINUTES)
            expected.append({"exp_labels": rule["labels"], "exp_annotations": annotations})
        cases.append({"eval_time": f"{MINUTES}m", "alertname": name, "exp_alerts": expected})
    return {
        "name": f"{target.name} at {remaining:g} left",
        "interval": "1m",
        "input_series": series(target, schedule),
        "alert_rule_test": cases,
    }


def test_each_step_fires_below_its_share_of_the_budget_and_not_above(tmp_path):
    """The seed's policy (50% ticket, 10% page, exhausted page), just above and just below each step:
    the steps are cumulative, so at 9% left both ErrorBudgetLow steps fire, and at -1% all three."""
    slos = slo.load(slo.DEFAULT_SPEC)
    document = slo.rules(slos)
    target = slos[0]
    thresholds = sorted({step.threshold for step in target.policy or []})
    assert thresholds == [0.0, 0.1, 0.5]
    levels = [level for t in thresholds for level in (t - 0.01, t + 0.01)]
    tests = [policy_test(document, target, remaining) for remaining in levels]
    firing = [sum(len(case["exp_alerts"]) for case in test["alert_rule_test"]) for test in tests]
    assert firing == [3, 2, 2, 1, 1, 0]  # -1%, 1%, 9%, 11%, 49%, 51% left
    run_rule_tests(tmp_path, slo.render(document, "slo.yaml"), tests, interval="5m")


def test_a_step_alert_carries_the_routers_labels_and_the_links():
    (latency, _) = slo.load(slo.DEFAULT_SPEC)
    (group, *_) = slo.rules([latency])["groups"]
    alerts = [r for r in group["rules"] if r.get("alert") in ("ErrorBudgetLow", "ErrorBudgetExhausted")]
    page = alerts[1]
    assert page["expr"] == 'slo:period_error_budget_remaining:ratio{service="gateway",slo="ReplyLatency"} < 0.1'
    assert page["labels"] == {
        "severity": "page",
        "slo": "ReplyLatency",
        "service": "gateway",
        "action": "freeze-deploys",
    }
    assert page["annotations"]["summary"] == "ReplyLatency (gateway): error budget below 10%"
    assert page["annotations"]["description"].startswith(
        "Freeze deploys but fixes until the budget recovers. ReplyLatency (gateway) has "
        "{{ $value | humanizePercentage }} of its 30d error budget left; the policy acts below 10%. Runbook: "
    )
    assert page["annotations"]["dashboard"].startswith(
        'http://localhost:3000/d/obsbox-slo-burn?var-slo=ReplyLatency&from={{ query "(time() - 2592000) * 1000"'
    )
    assert [a["expr"].rsplit(" ", 2)[1:] for a in alerts] == [["<", "0.5"], ["<", "0.1"], ["<=", "0"]]


def test_the_link_names_the_burn_dashboards_uid_and_slo_variable():
    """The committed dashboard has the UID the link opens and an ``slo`` variable offering every SLO."""
    built = json.loads(DASHBOARD.read_text())
    slos = slo.load(slo.DEFAULT_SPEC)
    link = slo.rules(slos)["groups"][0]["rules"][-1]["annotations"]["dashboard"]
    assert link.startswith(f"http://localhost:3000/d/{built['uid']}?var-slo=ReplyLatency&")
    (variable,) = [v for v in built["templating"]["list"] if v["name"] == "slo"]
    assert [o["value"] for o in variable["options"]] == [s.name for s in slos]
    panels = {(p["title"], p["gridPos"]["y"]): p for p in built["panels"]}
    policy = [p for (title, _), p in panels.items() if title == "Error-budget policy"]
    assert len(policy) == len(slos)
    assert [s["value"] for s in policy[0]["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 0.0, 0.1, 0.5]
    slow = [p for (title, _), p in panels.items() if title.startswith("Slow requests")]
    assert len(slow) == 1 and slow[0]["targets"][0]["exemplar"] is True
    assert "gateway_reply_latency_seconds_bucket" in slow[0]["targets"][0]["expr"]
    assert all('slo=~"$slo"' in t["expr"] for p in built["panels"] for t in p.get("targets", []))


def spec(policy: str, top: str = "") -> str:
    return (
        textwrap.dedent(top)
        + textwrap.dedent(
            """\
        service: gateway
        slos:
          - name: A
            objective: 0.99
            sli: {kind: availability, bad: 'x_total{code="500"}', total: x_total}
            runbook: Roll back.
        """
        )
        + textwrap.indent(textwrap.dedent(policy), "    ")
    )


@pytest.mark.parametrize(
    ("policy", "error"),
    [
        ("policy: [{severity: page}]", "slos[0].policy[0]: a policy step needs exactly one of"),
        (
            "policy: [{below: 10%, exhausted: true, severity: page}]",
            "slos[0].policy[0]: a policy step needs exactly one",
        ),
        ("policy: [{below: 150%, severity: page}]", "slos[0].policy[0].below: '150%' is not a share of the budget in"),
        (
            "policy: [{below: half, severity: page}]",
            "policy[0].below: 'half' is not a share of the budget; write",
        ),
        ("policy: [{below: 0, severity: page}]", "for none left, write exhausted: true"),
        ("policy: [{below: 10%, severity: ''}]", "slos[0].policy[0].severity: must name the severity"),
        ("policy: [{below: 10%, severity: page, labels: {slo: x}}]", "slos[0].policy[0].labels.slo: 'slo' is reserved"),
        ("policy: [{below: 10%, severity: page, alert: Budget low}]", "policy[0].alert: 'Budget low' is not an alert"),
        ("policy: [{below: 10%, severity: page, when: now}]", "slos[0].policy[0].when: unknown key"),
        (
            "policy: [{below: 10%, severity: page}, {below: 5%, severity: page}]",
            "slos[0].policy[1]: alerts as ErrorBudgetLow with the same severity and labels as policy[0]",
        ),
        ("dashboard_url: grafana:3000", "slos[0].dashboard_url: 'grafana:3000' is not Grafana's base URL"),
    ],
)
def test_bad_policies_are_refused_in_one_line_naming_the_key(policy, error):
    with pytest.raises(ConfigError) as caught:
        slo.loads(spec(policy), source="slo.yaml")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("slo.yaml:") and error in message, message


def test_a_spec_wide_policy_is_checked_and_an_slos_own_replaces_it(tmp_path, capsys):
    top = "policy: [{exhausted: true, severity: page}]\n"
    path = tmp_path / "slo.yaml"
    path.write_text(spec("", top="policy: [{exhausted: yes-please, severity: page}]\n"))
    assert main(["slo", "check", str(path)]) == 2
    assert "slo.yaml:1: policy[0].exhausted: must be true or false" in capsys.readouterr().err
    path.write_text(spec("", top=top))
    assert main(["slo", "check", str(path)]) == 0
    assert "  policy: ErrorBudgetExhausted (page): budget exhausted\n" in capsys.readouterr().out

    def policy_alerts(text: str) -> list[tuple[str, str]]:
        (group, *_) = slo.rules(slo.loads(text))["groups"]
        return [
            (r["alert"], r["labels"]["severity"])
            for r in group["rules"]
            if r.get("alert", conventions.SLO_ALERT) not in (conventions.SLO_ALERT, conventions.SLO_NO_DATA_ALERT)
        ]

    assert policy_alerts(spec("", top=top)) == [("ErrorBudgetExhausted", "page")]
    assert policy_alerts(spec("policy: []", top=top)) == []
    own = "policy: [{below: 25%, severity: ticket, alert: BudgetQuarter}]"
    assert policy_alerts(spec(own, top=top)) == [("BudgetQuarter", "ticket")]
