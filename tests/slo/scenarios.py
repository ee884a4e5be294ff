"""Synthetic series for ``promtool test rules``, and what the SRE Workbook says should fire on them.

A scenario is a schedule of segments, each a number of minutes at a burn rate (error ratio divided by
the SLO's error budget) and a traffic level. The expected alerts come from the windows' averages,
computed here from the schedule alone, never from the generated rules.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from obsbox import conventions
from obsbox.slo import SLO, parse_selector
from obsbox.slo.budgets import without_stage_data
from obsbox.slo.rules import RECORDED_FROM_SECONDS, seconds
from obsbox.slo.testgen import values

PER_MINUTE = 10_000.0  # events per minute unless a segment says otherwise
MARGIN = 0.005  # a window average this close to a threshold makes a scenario ambiguous
RECORDING_STEP_MINUTES = 5  # the recorded 5m rates can reach this far past the start of a window

# Label sets of the seed's availability SLOs that the selectors must count as good or as bad. 404 is
# among the good ones on purpose: client errors do not spend the budget.
AVAILABILITY_EXAMPLES = {
    "Availability": {"good": [{"status_code": "200"}, {"status_code": "404"}], "bad": [{"status_code": "503"}]},
    "checkout-availability": {"good": [{"outcome": "ok"}], "bad": [{"outcome": "declined"}, {"outcome": "error"}]},
    "search-availability": {"good": [{"code": "200"}, {"code": "404"}], "bad": [{"code": "500"}, {"code": "503"}]},
}


@dataclass(frozen=True)
class Segment:
    minutes: int
    burn: float
    per_minute: float = PER_MINUTE


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed: install Debian's prometheus package (scripts/test does)"
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def run_rule_tests(directory: Path, rules_text: str, tests: list[dict[str, Any]], interval: str = "1m") -> None:
    """Run each test group with ``promtool test rules`` (two at a time); fail with promtool's output."""
    (directory / "rules.yml").write_text(rules_text, encoding="utf-8")
    files = []
    for i, test in enumerate(tests):
        document = {"rule_files": ["rules.yml"], "evaluation_interval": interval, "tests": [test]}
        files.append(directory / f"test-{i}.yml")
        files[-1].write_text(yaml.safe_dump(document, sort_keys=False, width=1000), encoding="utf-8")
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda f: promtool("test", "rules", f.name, cwd=directory), files))
    failures = [
        f"{test['name']}:\n{r.stdout}{r.stderr}" for test, r in zip(tests, results, strict=True) if r.returncode
    ]
    assert not failures, "promtool test rules failed:\n" + "\n".join(failures)
    assert all("SUCCESS" in r.stdout for r in results)


def minutes(schedule: Sequence[Segment]) -> int:
    return sum(s.minutes for s in schedule)


def per_minute(schedule: Sequence[Segment], budget: float) -> tuple[list[float], list[float]]:
    """(errors, events) in each minute of the schedule."""
    errors, events = [], []
    for segment in schedule:
        ratio = segment.burn * budget
        assert 0 <= ratio <= 1, f"a burn of {segment.burn} needs an error ratio of {ratio}"
        errors += [segment.per_minute * ratio] * segment.minutes
        events += [segment.per_minute] * segment.minutes
    return errors, events


def series(slo: SLO, schedule: Sequence[Segment], step: int = 1) -> list[dict[str, str]]:
    """Input series that make ``slo`` see the schedule's error ratio, plus decoys its selectors must skip;
    a sample every ``step`` minutes."""
    errors, events = (_every(counts, step) for counts in per_minute(schedule, slo.error_budget))
    good = [e - b for e, b in zip(events, errors, strict=True)]
    base, decoys = {}, []
    for matcher in slo.matchers:
        assert matcher.op in ("=", "!="), f"{slo.name}: the scenarios know = and != filters, not {matcher}"
        if matcher.op == "=":
            base[matcher.label] = matcher.value
            decoys.append({matcher.label: matcher.value + "-other"})
        else:
            decoys.append({matcher.label: matcher.value})
    decoys = [{**base, **decoy} for decoy in decoys]
    nothing = [0.0] * len(events)
    if slo.sli.kind == "latency":
        name = slo.sli.metric
        le = slo.sli.le_matcher().value.split("|")[0]
        out = [
            _series(f"{name}_count", base, events),
            _series(f"{name}_bucket", {**base, "le": le}, good),
            _series(f"{name}_bucket", {**base, "le": "+Inf"}, events),
            _series(f"{name}_bucket", {**base, "le": "0.05"}, [g / 2 for g in good]),
        ]
        # Slow traffic outside the filters, which must not count.
        for decoy in decoys:
            out += [_series(f"{name}_count", decoy, events), _series(f"{name}_bucket", {**decoy, "le": le}, nothing)]
        return out
    examples = AVAILABILITY_EXAMPLES.get(slo.name)
    assert examples, f"add label sets for the availability SLO {slo.name} to AVAILABILITY_EXAMPLES"
    metric = parse_selector(slo.sli.total).metric
    good_sets, bad_sets = examples["good"], examples["bad"]
    out = [_series(metric, {**base, **labels}, [g / len(good_sets) for g in good]) for labels in good_sets]
    out += [_series(metric, {**base, **labels}, [e / len(bad_sets) for e in errors]) for labels in bad_sets]
    # Failures outside the filters, which must not count.
    return out + [_series(metric, {**decoy, **bad_sets[0]}, events) for decoy in decoys]


def _every(increments: Sequence[float], step: int) -> list[float]:
    """Per-minute increments as increments every ``step`` minutes."""
    return [sum(increments[i : i + step]) for i in range(0, len(increments), step)]


def _series(metric: str, labels: dict[str, str], increments: Sequence[float]) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{metric}{{{body}}}" if body else metric, "values": values(increments)}


def burn_over(schedule: Sequence[Segment], budget: float, end: int, window: int) -> float:
    """The traffic-weighted burn rate over the minutes (end - window, end], clipped to the data."""
    errors, events = per_minute(schedule, budget)
    start = max(0, end - window)
    return sum(errors[start:end]) / sum(events[start:end]) / budget


def firing(slo: SLO, schedule: Sequence[Segment], at: int) -> list:
    """The SLO's burn conditions the SRE Workbook says fire at minute ``at``.

    A window computed from the recorded 5m rates is averaged both as it is and reaching one recording
    step further back; the scenario must be clear of every threshold either way.
    """
    out = []
    for condition in slo.burn_conditions():
        states = []
        for window in (condition.long_window, condition.short_window):
            width = int(seconds(window) // 60)
            recorded = seconds(window) >= RECORDED_FROM_SECONDS
            for reach in (0, RECORDING_STEP_MINUTES if recorded else 0):
                burn = burn_over(schedule, slo.error_budget, at, width + reach)
                assert abs(burn / condition.factor - 1) > MARGIN, (
                    f"{slo.name}: burn {burn} over {window} at {at}m is too close to {condition.factor}"
                )
                states.append(burn >= condition.factor)
        assert states[0] == states[1] and states[2] == states[3], f"{slo.name}: {condition} at {at}m is ambiguous"
        if all(states):
            out.append(condition)
    return out


def expected_alerts(rules: dict[str, Any], slos: Sequence[SLO], schedule: Sequence[Segment], at: int) -> list:
    """``exp_alerts`` for SLOErrorBudgetBurn at minute ``at``: labels and annotations as generated."""
    out = []
    for slo in slos:
        for condition in firing(slo, schedule, at):
            rule = alert_rule(rules, slo, condition)
            named = {"slo": slo.name, "service": str(slo.service)}  # no stage series among the inputs
            link = dashboard_link(slo, condition.long_window, at)
            annotations = without_stage_data({**rule["annotations"], "dashboard": link}, named)
            out.append({"exp_labels": rule["labels"], "exp_annotations": annotations})
    return out


def dashboard_link(slo: SLO, window: str, at: int) -> str:
    """The burn dashboard for ``slo`` from ``window`` before minute ``at`` to it, in milliseconds, as an
    alert evaluated at ``at`` links it."""
    end = at * 60
    return (
        f"{slo.dashboard_url}/d/obsbox-slo-burn?var-slo={slo.name}"
        f"&from={(end - seconds(window)) * 1000:.0f}&to={end * 1000}"
    )


def alert_rule(rules: dict[str, Any], slo: SLO, condition) -> dict[str, Any]:
    (group,) = [g for g in rules["groups"] if g["name"] == f"obsbox-slo-{slo.name}"]
    (rule,) = [
        r
        for r in group["rules"]
        if r.get("alert") == conventions.SLO_ALERT and r["labels"]["long_window"] == condition.long_window
    ]
    return rule


def burn_test(
    name: str,
    rules: dict[str, Any],
    slos: Sequence[SLO],
    schedule: Sequence[Segment],
    at: Sequence[int],
    *,
    step: int = 1,
) -> dict[str, Any]:
    """A promtool test group: every SLO fed the schedule (a sample every ``step`` minutes, which must
    divide every segment), the burn alerts checked at each minute of ``at``."""
    assert all(segment.minutes % step == 0 for segment in schedule)
    return {
        "name": name,
        "interval": f"{step}m",
        "input_series": [s for slo in slos for s in series(slo, schedule, step)],
        "alert_rule_test": [
            {
                "eval_time": f"{t}m",
                "alertname": conventions.SLO_ALERT,
                "exp_alerts": expected_alerts(rules, slos, schedule, t),
            }
            for t in at
        ],
    }
