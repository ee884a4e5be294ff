"""``promtool test rules`` cases generated from an SLO spec, so that a user's rules are checked as ours are.

Per SLO, three timelines on series its SLI counts (and decoys its filters must skip): a steady good
period (no alert) after which the series stop (``SLONoData`` fires once they have been gone for its
``for``), a fast burn (a page fires once its windows burn) and a slow burn (a ticket fires, no page).
What should fire at each checked minute comes from the SRE Workbook's windows averaged over the
schedule, never from the rules under test; a minute where the answer depends on how Prometheus cuts a
window is not checked. Each SLO gets its own test file with only its rule group, and two promtool runs
take them all.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from obsbox import conventions
from obsbox.durations import parse_duration as seconds
from obsbox.slo import slicetests
from obsbox.slo.budgets import without_stage_data
from obsbox.slo.matching import BAD_VALUES, GOOD_VALUES, label_set, negated
from obsbox.slo.policies import dashboard_link
from obsbox.slo.rules import NO_DATA_FOR, RECORDED_FROM_SECONDS, dump, slo_group
from obsbox.slo.selectors import Matcher, Selector, num
from obsbox.slo.spec import SLO, BurnCondition, go_float

PER_MINUTE = 6000.0  # events per minute
STEP = 5  # minutes between rule evaluations, and between the minutes checked
WORKERS = 2  # promtool runs at once
MARGIN = 0.01  # a window this close to a factor is not checked
Alert = dict[str, Any]
Check = tuple[int, list[BurnCondition], bool]  # minute, the burn conditions firing, whether SLONoData fires


class UntestableError(Exception):
    """An SLO whose SLI the generated series cannot express; the message says why."""


@dataclass(frozen=True)
class Segment:
    """``minutes`` of traffic burning the error budget at ``burn``; no series at all when not ``present``."""

    minutes: int
    burn: float = 0.0
    present: bool = True


@dataclass(frozen=True)
class Case:
    """A schedule, what it must show (``expect``, over the checks), and its checks every STEP minutes."""

    name: str
    schedule: tuple[Segment, ...]
    expect: Callable[[list[Check]], bool]
    intent: str


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


def per_minute(schedule: Sequence[Segment], budget: float, slices: int = 0) -> tuple[list[float], list[float]]:
    """(errors, events) in each minute the series exist; ``slices``: the minutes of a time-slice SLO's
    slices (obsbox.slo.slicetests)."""
    for segment in schedule:
        if segment.present and not 0 <= segment.burn * budget <= 1:
            raise UntestableError(f"a burn of {num(segment.burn)} needs an error ratio of {num(segment.burn * budget)}")
    if slices:
        return slicetests.per_minute(schedule, budget, slices)
    errors: list[float] = []
    events: list[float] = []
    for segment in schedule:
        if segment.present:
            ratio = segment.burn * budget
            errors += [PER_MINUTE * ratio] * segment.minutes
            events += [PER_MINUTE] * segment.minutes
    return errors, events


def burn_over(minutes: tuple[list[float], list[float]], budget: float, end: int, window: int) -> float | None:
    """The traffic-weighted burn rate over the minutes (end - window, end] of ``per_minute``'s (errors,
    events); None without traffic there."""
    errors, events = minutes
    start = max(0, end - window)
    total = sum(events[start:end])
    return sum(errors[start:end]) / total / budget if total else None


def firing(slo: SLO, schedule: Sequence[Segment], at: int) -> list[BurnCondition] | None:
    """The burn conditions that fire at minute ``at``; None when a window is too close to call.

    Each window is averaged as it is, one minute shorter (a range's first sample starts it) and, when
    it is summed from the recorded 5m rates, one step longer; all must agree, clear of the factor."""
    out = []
    length = slice_minutes(slo)
    minutes = per_minute(schedule, slo.error_budget, length)
    values = slicetests.slice_values(schedule, slo.error_budget, length, at) if length else {}
    for condition in slo.burn_conditions():
        states = []
        for window in (condition.long_window, condition.short_window):
            width = int(seconds(window) // 60)
            if length:  # the mean of the slices, with and without the one at the window's start
                burns = [slicetests.burn_over(values, slo.error_budget, at, width, c) for c in (True, False)]
            else:
                widths = {width, width - 1} | ({width + STEP} if seconds(window) >= RECORDED_FROM_SECONDS else set())
                burns = [burn_over(minutes, slo.error_budget, at, w) for w in widths]
            seen = {b is not None and b >= condition.factor for b in burns}
            if len(seen) > 1 or any(b is not None and abs(b / condition.factor - 1) <= MARGIN for b in burns):
                return None
            states.append(seen.pop())
        if all(states):
            out.append(condition)
    return out


def slice_minutes(slo: SLO) -> int:
    """A time-slice SLO's slice in minutes (its rules' evaluation interval); 0 for other SLOs."""
    return int(seconds(slo.timeslices.window) // 60) if slo.timeslices is not None else 0


def no_data(schedule: Sequence[Segment], at: int, step: int = STEP, needs: int = 2) -> bool:
    """Whether ``SLONoData`` fires at minute ``at``: the 5m event rate (``needs`` samples in 5m: two for a
    counter's rate, one for a gauge's mean) has been absent at every evaluation (every ``step`` minutes)
    since ``NO_DATA_FOR`` ago."""
    last = sum(s.minutes for s in schedule if s.present)  # samples at minutes 0..last

    def absent(t: int) -> bool:
        first = t - 4 if needs > 1 else t - 5  # a 5m range includes its start: a gauge's last sample counts 5m on
        return len([m for m in range(first, t + 1) if 0 <= m <= last]) < needs

    hold = int(seconds(NO_DATA_FOR) // 60)
    since = at
    while since - step >= 0 and absent(since - step):
        since -= step
    return absent(at) and at - since >= hold


def cases(slo: SLO) -> list[Case]:
    """The three timelines, their burn rates placed between the SLO's factors."""
    factors = {
        severity: [c.factor for c in slo.burn_conditions() if c.severity == severity] for severity in ("page", "ticket")
    }
    good = min(factors["ticket"]) / 2
    # Halfway between the fastest page and every request failing: the 1h window reaches its factor
    # sooner the higher the objective, and the case lasts that long and 10m more.
    fast = (max(factors["page"]) + 1 / slo.error_budget) / 2
    fast_minutes = STEP * math.ceil((60 * max(factors["page"]) / fast + 10) / STEP)
    slow = (max(factors["ticket"]) * min(factors["page"])) ** 0.5

    def pages(conditions: list[BurnCondition]) -> bool:
        return any(c.severity == "page" for c in conditions)

    def quiet_until(checks: list[Check], minute: int) -> bool:
        return all(not fired and not gone for at, fired, gone in checks if at <= minute)

    return [
        Case(
            "steady good, then no data",
            (Segment(15, good), Segment(20, present=False)),
            lambda checks: quiet_until(checks, 15) and not any(c[1] for c in checks) and checks[-1][2],
            f"{num(round(good, 3))}x the budget for 15m: no alert; then no series: "
            f"{conventions.SLO_NO_DATA_ALERT} fires {NO_DATA_FOR} after",
        ),
        Case(
            "fast burn",
            (Segment(5, good), Segment(fast_minutes, fast)),
            lambda checks: quiet_until(checks, 5) and pages(checks[-1][1]),
            f"{num(round(fast, 3))}x after 5m at {num(round(good, 3))}x: a page fires once its windows burn",
        ),
        Case(
            "slow burn",
            (Segment(5, good), Segment(20, slow)),
            lambda checks: quiet_until(checks, 5) and not any(pages(c[1]) for c in checks) and bool(checks[-1][1]),
            f"{num(round(slow, 3))}x after 5m at {num(round(good, 3))}x: a ticket fires, no page",
        ),
    ]


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
    """The promtool test file of one SLO: its three cases, the alerts expected as the spec builds them."""
    built = slo_group(slo)["rules"]
    burn = {r["labels"]["long_window"]: r for r in built if r.get("alert") == conventions.SLO_ALERT}
    (gone,) = [r for r in built if r.get("alert") == conventions.SLO_NO_DATA_ALERT]

    def expected(rules: Sequence[Alert], at: int) -> list[Alert]:
        named = {"slo": slo.name, "service": str(slo.service)}  # the cases feed no stage series
        return [
            {"exp_labels": r["labels"], "exp_annotations": without_stage_data(rendered(slo, r, at), named)}
            for r in rules
        ]

    tests = []
    for case in cases(slo):
        end = sum(s.minutes for s in case.schedule)
        checks = []
        for at in range(STEP, end + 1, STEP):
            fired = firing(slo, case.schedule, at)
            if fired is not None:
                needs = 1 if slo.sli.gauges else 2
                checks.append((at, fired, no_data(case.schedule, at, slice_minutes(slo) or STEP, needs)))
        if len(checks) < 2 or not case.expect(checks):
            raise UntestableError(f"the {case.name} case cannot show its intent ({case.intent}) at this objective")
        checks = _turns(checks)
        tests.append(
            {
                "name": f"{slo.name}: {case.name} ({case.intent})",
                "interval": "1m",
                "input_series": series(slo, case.schedule),
                "alert_rule_test": [
                    test
                    for at, fired, gone_now in checks
                    for test in (
                        {
                            "eval_time": f"{at}m",
                            "alertname": conventions.SLO_ALERT,
                            "exp_alerts": expected([burn[c.long_window] for c in fired], at),
                        },
                        {
                            "eval_time": f"{at}m",
                            "alertname": conventions.SLO_NO_DATA_ALERT,
                            "exp_alerts": expected([gone] if gone_now else [], at),
                        },
                    )
                ],
            }
        )
    interval = slice_minutes(slo) or STEP  # a time-slice SLO's group runs once per slice
    return {"rule_files": [rules_file], "evaluation_interval": f"{interval}m", "tests": tests}


def rendered(slo: SLO, rule: Alert, at: int) -> dict[str, str]:
    """The alert's annotations as an evaluation at minute ``at`` renders them: the dashboard link's
    range ends there (obsbox.slo.policies.dashboard_link)."""
    annotations = dict(rule["annotations"])
    if "dashboard" in annotations:
        annotations["dashboard"] = dashboard_link(slo, rule["labels"]["long_window"], at * 60)
    return annotations


def _turns(checks: list[Check]) -> list[Check]:
    """The first and last checks, and those on either side of a change: where a rule that fires too early
    or too late shows, without checking every step."""

    def state(check: Check) -> tuple[object, ...]:
        return (*(c.long_window for c in check[1]), check[2])

    states = [state(c) for c in checks]
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
        lines.append(f"{failure['case']} at {failure['time']}: {failure['alert']} expected {exp}, fired {got}")
    return "\n".join(lines) or "\n".join(report.strip().splitlines()[:5])


def _alerts(text: str) -> str:
    """The alerts of promtool's ``exp:[...]`` or ``got:[...]``, by severity and windows."""
    found = []
    for labels in _LABELS.findall(text):
        named = dict(_LABEL.findall(labels))
        windows = f" {named['long_window']}/{named['short_window']}" if "long_window" in named else ""
        found.append(f"{named.get('severity', '?')}{windows}")
    return "[" + ", ".join(found) + "]"


def report(verdicts: Sequence[Verdict]) -> int:
    """Print one verdict per SLO (a failure with promtool's words); exit status 1 when any failed."""
    for verdict in verdicts:
        print(str(verdict).replace("\n", "\n    "))
    return 1 if any(v.status == "FAIL" for v in verdicts) else 0
