"""``promtool test rules`` files generated from an SLO spec, so that a user's rules are checked as ours are.

Per SLO, the cases of obsbox.slo.testcases (steady then no data, a fast burn, a slow burn, one per
burn-rate condition of its own, the budget spent through its policy) on series its SLI counts, and
decoys its filters must skip. What should fire at each checked minute comes from the schedule, never
from the rules under test; a minute where the answer depends on how Prometheus cuts a window is not
checked. Each SLO gets its own test file with only its rule group, and two promtool runs take them all.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from obsbox import conventions
from obsbox.slo.alertchecks import render
from obsbox.slo.budgets import without_stage_data
from obsbox.slo.matching import BAD_VALUES, GOOD_VALUES, label_set, negated
from obsbox.slo.policies import dashboard_link
from obsbox.slo.rules import burn_rate_alert, dump, policy_alert, slo_group
from obsbox.slo.schedules import STEP, Segment, UntestableError, per_minute, slice_minutes
from obsbox.slo.selectors import Matcher, Selector, num
from obsbox.slo.spec import SLO, go_float
from obsbox.slo.testcases import Check, cases, shows

WORKERS = 2  # promtool runs at once
Alert = dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    slo: SLO
    status: str  # "pass" | "FAIL" | "skip"
    detail: str

    def __str__(self) -> str:
        return f"{self.status} {self.slo.name} ({self.slo.service}): {self.detail}"


def values(increments: Sequence[float]) -> str:
    """A counter from 0 rising by ``increments[i]`` at minute i+1, in promtool's ``a+bxn`` notation."""
    terms, total = ["0"], 0.0
    for step, run in itertools.groupby(increments):
        count = len(list(run))
        terms.append(f"{num(round(total + step, 6))}+{num(round(step, 6))}x{count - 1}")
        total += step * count
    return " ".join(terms)


def levels(samples: Sequence[float]) -> str:
    """A gauge at ``samples[i]`` at minute i+1, none at minute 0, in promtool's notation: a window's mean
    then reads the same minutes a counter's increase does."""
    terms = ["_"]
    for value, run in itertools.groupby(samples):
        count = len(list(run))
        terms.append(f"{num(round(value, 6))}+0x{count - 1}" if count > 1 else num(round(value, 6)))
    return " ".join(terms)


def series(slo: SLO, schedule: Sequence[Segment]) -> list[dict[str, str]]:
    """Input series the SLI reads as the schedule's error ratio and, outside each filter, a target whose
    requests all fail and one whose requests all succeed, which the SLI must not count either way."""
    errors, events = per_minute(schedule, slo.error_budget, slice_minutes(slo))
    filters = slo.matchers
    out = _place(slo, _target(filters, "test"), errors, events)
    for skipped in filters:
        outside = (*(f for f in filters if f != skipped), negated(skipped))
        out += _place(slo, _target(outside, "failing"), events, events)
        out += _place(slo, _target(outside, "succeeding"), [0.0] * len(events), events)
    return out


def _target(matchers: Sequence[Matcher], instance: str) -> list[Matcher]:
    """``matchers`` and a scrape target's labels (the job, an instance), where the matchers leave them free."""
    taken = {m.label for m in matchers}
    target = (Matcher("job", "=", "obsbox-slo-test"), Matcher("instance", "=", f"{instance}:9090"))
    return [*matchers, *(m for m in target if m.label not in taken)]


def _place(slo: SLO, where: Sequence[Matcher], errors: list[float], events: list[float]) -> list[dict[str, str]]:
    """The SLI's series with the labels ``where`` selects, reading ``errors`` of ``events`` each minute."""
    good = [e - b for e, b in zip(events, errors, strict=True)]
    if slo.sli.kind == "latency":
        return _histogram(slo, _labels(where), good, events)
    if slo.sli.raw is not None:
        return [_raw(slo, where, errors, events)]
    counted, total, are_errors = slo.sli.selectors()
    numerator, rest = (errors, good) if are_errors else (good, errors)
    gauge = slo.sli.gauges
    if counted.metric != total.metric:
        return [
            _series(counted.metric, _labels([*where, *counted.matchers], are_errors), numerator, gauge),
            _series(total.metric, _labels([*where, *total.matchers]), events, gauge),
        ]
    inside = _labels([*where, *total.matchers, *counted.matchers], are_errors)
    outside = _complement([*where, *total.matchers], counted, not are_errors)
    return [_series(total.metric, inside, numerator, gauge), _series(total.metric, outside, rest, gauge)]


def _raw(slo: SLO, where: Sequence[Matcher], errors: list[float], events: list[float]) -> dict[str, str]:
    """A precomputed ratio's series: each minute's share of errors (failure) or of good events (success)."""
    if slo.sli.raw_template:
        raise UntestableError(
            f"a raw ratio written as a query ({slo.sli.raw}): the generated series cannot know what it reads"
        )
    ratio = slo.sli.selectors()[0]
    shares = [b / e for b, e in zip(errors, events, strict=True)]
    if slo.sli.raw_type == "success":
        shares = [1 - share for share in shares]
    return _series(ratio.metric, _labels([*where, *ratio.matchers]), shares, gauge=True)


def _labels(matchers: Sequence[Matcher], failing: bool = False) -> dict[str, str]:
    found = label_set(matchers, BAD_VALUES if failing else GOOD_VALUES)
    if found is None:
        raise UntestableError(f"no label values found that {Selector('series', tuple(matchers))} selects")
    return found


def _complement(matchers: Sequence[Matcher], counted: Selector, failing: bool) -> dict[str, str]:
    """Labels that ``matchers`` select and ``counted`` does not: events the SLI leaves uncounted."""
    for matcher in counted.matchers:
        found = label_set([*matchers, negated(matcher)], BAD_VALUES if failing else GOOD_VALUES)
        if found is not None:
            return found
    raise UntestableError(f"no series found that {Selector('series', tuple(matchers))} selects and {counted} does not")


def _histogram(slo: SLO, labels: dict[str, str], good: list[float], events: list[float]) -> list[dict[str, str]]:
    """A classic histogram: the good requests in the bucket the SLI counts in full, the others above the
    bucket it reads (so an interpolated or nearest threshold counts them exactly too)."""
    sli = slo.sli
    if sli.histogram == "native":
        raise UntestableError(
            "a native-histogram SLI: promtool 2.42's test series have no native histograms "
            "(prometheus/prometheus#12146); check it in a Prometheus fed by remote write"
        )
    assert sli.buckets is not None and sli.threshold is not None
    exact = sli.le(sli.buckets) is not None
    lower, upper = sli.bucket_around(sli.buckets)
    if not exact and lower == 0:
        raise UntestableError(
            f"the threshold lies in the first bucket (0, {go_float(upper or 0)}]: "
            "no bound counts a request as good in full"
        )
    good_from = sli.threshold if exact else lower
    bad_above = sli.threshold if exact else (upper if upper is not None else float("inf"))
    name = sli.metric or ""
    out = []
    for bound in sorted(sli.buckets):
        counted = [g + (e - g) * (bound > bad_above) for g, e in zip(good, events, strict=True)]
        counts = counted if bound >= good_from * (1 - 1e-9) else [0.0] * len(events)
        out.append(_series(f"{name}_bucket", {**labels, "le": go_float(bound)}, counts))
    out.append(_series(f"{name}_bucket", {**labels, "le": "+Inf"}, events))
    return [*out, _series(f"{name}_count", labels, events)]


def _series(metric: str, labels: dict[str, str], increments: Sequence[float], gauge: bool = False) -> dict[str, str]:
    """A counter rising by ``increments`` each minute, or a gauge at those levels (an SLI's ``gauges``)."""
    return {
        "series": str(Selector(metric, tuple(Matcher(k, "=", v) for k, v in sorted(labels.items())))),
        "values": levels(increments) if gauge else values(increments),
    }


def test_file(slo: SLO, rules_file: str) -> dict[str, Any]:
    """The promtool test file of one SLO: its cases, the alerts expected as the spec builds them."""
    built = slo_group(slo)["rules"]
    burn = {r["labels"]["long_window"]: r for r in built if r.get("alert") == conventions.SLO_ALERT}
    (gone,) = [r for r in built if r.get("alert") == conventions.SLO_NO_DATA_ALERT]
    own = {alert.label: burn_rate_alert(slo, alert) for alert in slo.alerts}
    steps = {str(i): policy_alert(slo, step) for i, step in enumerate(slo.policy or ())}
    named = {"slo": slo.name, "service": str(slo.service)}  # the cases feed no stage series

    def expected(rules: Sequence[Alert], at: int, value: float | None = None) -> list[Alert]:
        return [
            {"exp_labels": r["labels"], "exp_annotations": without_stage_data(rendered(slo, r, at, value), named)}
            for r in rules
        ]

    def tests_at(check: Check) -> list[Alert]:
        at = check.minute
        alerts: list[tuple[str, list[Alert]]] = [
            (conventions.SLO_NO_DATA_ALERT, expected([gone] if check.no_data else [], at))
        ]
        if check.burning is not None:
            alerts.insert(0, (conventions.SLO_ALERT, expected([burn[c.long_window] for c in check.burning], at)))
        if slo.alerts and check.own is not None:
            alerts.append((conventions.SLO_BURN_RATE_ALERT, expected([own[f.key] for f in check.own], at)))
        for name, fired in (check.policy or {}).items():
            alerts.append((name, [a for f in fired for a in expected([steps[f.key]], at, f.value)]))
        return [{"eval_time": f"{at}m", "alertname": name, "exp_alerts": exp} for name, exp in alerts]

    tests = [
        {
            "name": f"{slo.name}: {case.name} ({case.intent})",
            "interval": "1m",
            "input_series": series(slo, case.schedule),
            "alert_rule_test": [
                test for check in _turns(shows(slo, case), case.every_minute) for test in tests_at(check)
            ],
        }
        for case in cases(slo)
    ]
    interval = slice_minutes(slo) or STEP  # a time-slice SLO's group runs once per slice
    return {"rule_files": [rules_file], "evaluation_interval": f"{interval}m", "tests": tests}


def rendered(slo: SLO, rule: Alert, at: int, value: float | None = None) -> dict[str, str]:
    """The alert's annotations as an evaluation at minute ``at`` renders them: the dashboard link's
    range ends there (obsbox.slo.policies.dashboard_link), and ``value`` is the alert's ``$value``."""
    annotations = {key: render(text, value) for key, text in rule["annotations"].items()}
    if "dashboard" in annotations:
        labels = rule["labels"]
        window = labels.get("long_window") or labels.get("window") or slo.nominal_window
        annotations["dashboard"] = dashboard_link(slo, window, at * 60)
    return annotations


def _turns(checks: list[Check], every: bool = False) -> list[Check]:
    """The first and last checks, and those on either side of a change: where a rule that fires too early
    or too late shows, without checking every step (unless ``every``)."""
    if every:
        return checks
    states = [c.state() for c in checks]
    edges = {0, len(checks) - 1} | {i for i in range(1, len(checks)) if states[i] != states[i - 1]}
    keep = edges | {i - 1 for i in edges if i}
    return [c for i, c in enumerate(checks) if i in keep]


def write_tests(slos: Sequence[SLO], rules: dict[str, Any], directory: Path) -> tuple[list[Path], list[Verdict]]:
    """Per SLO, ``NAME.rules.yml`` (its group of ``rules``) and ``NAME.test.yml``; the SLOs left out, with why."""
    groups = {g.get("name"): g for g in rules.get("groups") or [] if isinstance(g, dict)}
    directory.mkdir(parents=True, exist_ok=True)
    files, skipped = [], []
    for slo in slos:
        group = groups.get(f"obsbox-slo-{slo.name}")
        try:
            if group is None:
                raise UntestableError(f"the rules have no group obsbox-slo-{slo.name}")
            document = test_file(slo, f"{slo.name}.rules.yml")
        except UntestableError as why:
            skipped.append(Verdict(slo, "FAIL" if group is None else "skip", str(why)))
            continue
        (directory / f"{slo.name}.rules.yml").write_text(dump({"groups": [group]}), encoding="utf-8")
        files.append(directory / f"{slo.name}.test.yml")
        files[-1].write_text(_json(document), encoding="utf-8")
    return files, skipped


def _json(document: dict[str, Any]) -> str:
    """A promtool test file as JSON, which is YAML too: PyYAML takes a second over a large spec's tests."""
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def run(slos: Sequence[SLO], rules: dict[str, Any], directory: Path, promtool: str) -> list[Verdict]:
    """Write the tests into ``directory``, run them with ``promtool`` (``WORKERS`` runs at once, each on
    every other SLO's file), and say per SLO how it went."""
    files, verdicts = write_tests(slos, rules, directory)
    if files:
        runs = [
            subprocess.Popen(
                [promtool, "test", "rules", *(f.name for f in files[i::WORKERS])],
                cwd=directory,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(min(WORKERS, len(files)))
        ]
        reports = _reports("".join(run.communicate(timeout=600)[0] for run in runs))
        by_name = {slo.name: slo for slo in slos}
        for f in files:
            slo = by_name[f.name.removesuffix(".test.yml")]
            report = reports.get(f.name, "promtool said nothing about this file")
            if report.strip() == "SUCCESS":
                verdicts.append(Verdict(slo, "pass", ", ".join(c.name for c in cases(slo))))
            else:
                verdicts.append(Verdict(slo, "FAIL", f"{_summary(report)}\n(the case file: {f.name}, kept with --out)"))
    order = {slo.name: i for i, slo in enumerate(slos)}
    return sorted(verdicts, key=lambda v: order[v.slo.name])


def _reports(output: str) -> dict[str, str]:
    """promtool's output split by test file: ``Unit Testing:  FILE`` then SUCCESS or FAILED and why."""
    parts = re.split(r"^Unit Testing:\s+(\S+)\s*$", output, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


_FAILURE = re.compile(
    r"name: [^:]*: (?P<case>[^(]*?) \(.*?alertname: (?P<alert>\S+), time: (?P<time>\S+),"
    r"\s*exp:(?P<exp>.*?)got:(?P<got>.*?)(?=\n\s*name: |\Z)",
    re.DOTALL,
)
_LABELS = re.compile(r"Labels:\{([^}]*)\}")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _summary(report: str) -> str:
    """promtool's failures in a line each: the case, the minute, the alerts expected and those that fired."""
    lines = []
    for failure in _FAILURE.finditer(report):
        exp, got = (_alerts(failure.group(key)) for key in ("exp", "got"))
        differ = " (their annotations differ)" if exp == got else ""
        lines.append(f"{failure['case']} at {failure['time']}: {failure['alert']} expected {exp}, fired {got}{differ}")
    return "\n".join(lines) or "\n".join(report.strip().splitlines()[:5])


def _alerts(text: str) -> str:
    """The alerts of promtool's ``exp:[...]`` or ``got:[...]``, by severity and windows."""
    found = []
    for labels in _LABELS.findall(text):
        named = dict(_LABEL.findall(labels))
        windows = f" {named['long_window']}/{named['short_window']}" if "long_window" in named else ""
        condition = f" {named['condition']}" if "condition" in named else ""
        found.append(f"{named.get('severity', '?')}{windows}{condition}")
    return "[" + ", ".join(found) + "]"


def report(verdicts: Sequence[Verdict]) -> int:
    """Print one verdict per SLO (a failure with promtool's words); exit status 1 when any failed."""
    for verdict in verdicts:
        print(str(verdict).replace("\n", "\n    "))
    return 1 if any(v.status == "FAIL" for v in verdicts) else 0
