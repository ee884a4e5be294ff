"""SLO burn: one row per SLO in the SLO spec, generated from it; the series are `obsbox slo build`'s rules."""

from obsbox import conventions as c
from obsbox.dashboards import panels as p
from obsbox.dashboards import queries as q
from obsbox.dashboards import slos
from obsbox.dashboards.queries import Query
from obsbox.slo.policies import BURN_DASHBOARD, SLO_VARIABLE, describe
from obsbox.slo.rules import NO_DATA_FOR

BURN_COLORS = ("yellow", "orange", "red", "dark-red")  # for the alert factors, lowest first

grid = p.Grid()
spec = slos.load()
for slo in spec:
    sel = slos.panel_selector(slo)
    factors = sorted({cond.factor for cond in slo.burn_conditions()})
    conditions = "; ".join(
        f"{cond.severity} at {cond.factor:g}x over {cond.long_window} and {cond.short_window}"
        for cond in slo.burn_conditions()
    )
    grid.row(f"{slo.name} ({slo.service}): {slo.description or f'objective {slo.objective:.2%}'}", key=slo.name)
    grid.add(
        p.timeseries(
            "SLI against the objective",
            f"Share of good events over 5m and 1h against the objective of {slo.objective:.2%} "
            f"(over {slo.window}). Below the line, {slo.name} is spending error budget.",
            [q.sli_good(sel, "5m"), q.sli_good(sel, "1h"), q.slo_objective(sel)],
            unit="percentunit",
            thresholds=p.steps((slo.objective, "green"), base="red"),
            lines=True,
        ),
        w=9,
        key=f"{slo.name}/sli",
    )
    grid.add(
        p.stat(
            "Error budget remaining",
            f"Share of the {slo.window} error budget ({slo.error_budget:.2%} of events) not yet spent. "
            "Below zero, the objective is missed for this period.",
            [q.budget_remaining(sel)],
            unit="percentunit",
            thresholds=p.steps((0.0, "orange"), (0.25, "yellow"), (0.5, "green"), base="red"),
        ),
        w=4,
        key=f"{slo.name}/remaining",
    )
    grid.add(
        p.timeseries(
            "Burn rate",
            f"Error ratio divided by the error budget, over {', '.join(slos.burn_windows(slo))}. At 1 the budget "
            f"lasts exactly {slo.window}. The lines are the alert thresholds: {conditions}.",
            [q.burn_rate(sel, window) for window in slos.burn_windows(slo)],
            unit="x",
            thresholds=p.steps(*zip(factors, BURN_COLORS, strict=False)),
            lines=True,
        ),
        w=11,
        key=f"{slo.name}/burn",
    )
    grid.add(
        p.state_timeline(
            "Alerts",
            f"Every alert of {slo.name}, pending or firing, by name and severity: {c.SLO_ALERT} (the burn-rate "
            f"windows), {c.SLO_BURN_RATE_ALERT} (its own conditions), {c.SLO_NO_DATA_ALERT} (its SLI has no data, "
            f"so the burn alerts cannot fire) and its policy's steps. Runbook: {slo.runbook}",
            [q.alert_states(sel, slos.alert_names(slo))],
            value_text="active",
            color="red",
        ),
        w=8,
        key=f"{slo.name}/alerts",
    )
    grid.add(
        p.stat(
            "SLI data",
            f"Whether the SLI's events reach the rules (their recorded 5m event rate has a series). Missing: "
            f"the target is not scraped, the metric was renamed or the filters select nothing; every ratio is "
            f"then empty, the burn alerts cannot fire, and {c.SLO_NO_DATA_ALERT} fires after {NO_DATA_FOR}.",
            [q.sli_data(sel)],
            unit="none",
            thresholds=p.steps((1.0, "green"), base="red"),
            texts={"0": "missing", "1": "receiving"},
        ),
        w=4,
        key=f"{slo.name}/data",
    )
    grid.add(
        p.timeseries(
            "Error budget consumed",
            f"Share of the {slo.window} error budget spent so far, over time. At 100% the objective is missed.",
            [q.budget_consumed(sel)],
            unit="percentunit",
            thresholds=p.steps((0.5, "yellow"), (1.0, "red")),
            lines=True,
        ),
        key=f"{slo.name}/consumed",
    )
    if slo.budgets is not None:
        budgets = ", ".join(f"{stage} {slo.budgets.budget(stage) * 1000:g} ms" for stage in slo.budgets.stages)
        grid.add(
            p.timeseries(
                "Stage spend against budget",
                f"Mean time per request in each stage over 5m, and each stage's budget (the '<stage> budget' "
                f"lines): {budgets}, with {slo.budgets.slack * 1000:g} ms of slack, adding up to the threshold of "
                f"{(slo.sli.threshold or 0) * 1000:g} ms.",
                [q.stage_spend(sel), q.stage_budget(sel)],
                unit="s",
                thresholds=p.steps(),
            ),
            key=f"{slo.name}/stages",
        )
        grid.add(
            p.timeseries(
                "Stages over budget",
                "How far each stage's mean exceeds its budget; a stage within budget draws no line. The burn "
                f"alerts of {slo.name} name the stages shown here, most over first.",
                [q.stage_overspend(sel)],
                unit="s",
                thresholds=p.steps(),
                stack=True,
            ),
            key=f"{slo.name}/overspend",
        )
    if slo.policy:
        grid.add(
            p.timeseries(
                "Error-budget policy",
                f"Share of the {slo.window} error budget left, against the policy's steps (the lines): "
                f"{describe(slo.policy)}. Each step is an alert while the budget is below its line.",
                [q.budget_remaining(sel)],
                unit="percentunit",
                thresholds=slos.policy_thresholds(slo),
                lines=True,
            ),
            key=f"{slo.name}/policy",
        )
    if slo.sli.kind == "latency":
        threshold = slo.sli.threshold or 0.0
        grid.add(
            p.timeseries(
                "Slow requests: exemplars to traces and logs",
                f"The latency at the objective ({slo.objective:.2%} of requests are faster) against the "
                f"threshold of {threshold:g} s (the line). The dots are exemplars: single requests with "
                "their trace ID; those above the line are the slow ones. Click one to open its trace in "
                "Tempo, and from the trace its logs in Loki.",
                [
                    Query(
                        f"{slos.latency_quantile(slo)}\nand on ()\n{q.slo_objective(sel).expr}",
                        f"P{slo.objective * 100:g}",
                    )
                ],
                unit="s",
                thresholds=p.steps((threshold, "red")),
                lines=True,
                exemplar=True,
            ),
            key=f"{slo.name}/slow",
        )

dashboard = p.dashboard(
    uid=BURN_DASHBOARD,
    title="obsbox / SLO burn",
    description=f"Every SLO of {slos.spec_path().name}: SLI against objective, error budget, multi-window burn "
    "rates with the alert thresholds, alert states.",
    grid=grid,
    variables=[
        *p.standard_variables(f"{c.REQUEST_DURATION}_count"),
        p.custom_variable(SLO_VARIABLE, "SLO", [slo.name for slo in spec]),
    ],
    tags=["slo"],
)
