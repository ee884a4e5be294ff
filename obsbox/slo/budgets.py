"""Latency budgets per stage: how a latency SLO's threshold is split among the stages of its breakdown,
and the rules that say which stage spends more than its share.

A latency SLO's ``budgets`` give each stage a duration; with ``slack`` (the time no stage measures)
they add up to the threshold. Each stage is measured by a histogram: by default one series of
``metric`` per stage, told apart by ``label`` (the demo's ``gateway_stage_duration_seconds{stage}``);
for an LLM server, ``source`` reads the ``obsbox:llm_<stage>_seconds`` series that ``obsbox llm
rules`` records for it; a stage may also name its own ``histogram`` selector.

What is compared with a budget is the stage's mean time per request over the last 5 minutes. Means
add up: the mean reply time is the sum of the means of the stages it waits for, so a split of the
threshold can be held against them, and the stage whose mean grew past its share is the one that
moved the total. Quantiles do not add (the P95s of the stages sum to more than the P95 of their sum,
and one stage's slow requests are not another's), so a P95 per stage could not be held to a share of
the threshold. The SLI itself stays the share of requests under the threshold; the budgets say where
to look when it burns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from obsbox.breakdown import SIGNALS
from obsbox.config import KeyPath
from obsbox.slo.selectors import LABEL_NAME, METRIC_NAME, Matcher, Selector, num, parse_selector

SPEND_WINDOW = "5m"  # the window of a stage's mean: the page alerts' short window, and the LLM rules' rates
STAGE_BUDGET = "obsbox:slo_stage_budget_seconds"  # {service, slo, stage}: the stage's budget
STAGE_SPEND = f"obsbox:slo_stage_spend_seconds:mean{SPEND_WINDOW}"  # {service, slo, stage}: its mean per request
STAGE_OVERSPEND = f"obsbox:slo_stage_overspend_seconds:mean{SPEND_WINDOW}"  # spend - budget, only where > 0
OVERSPEND_ANNOTATION = "overspend"  # the burn alerts' annotation naming the stages over their budget
NAMED = 3  # stages an alert names, most overspent first
WITHIN_BUDGET = "No stage is over its budget."  # what the alerts say when no stage is (or none has data)
_STAGE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Problem = tuple[KeyPath, str]


@dataclass
class Stage:
    """A stage's budget, and the histogram that measures it when the budgets' default does not."""

    budget: float
    histogram: str | None = None  # a selector: NAME{matchers}; its _sum and _count are read


@dataclass
class Budgets:
    """Stage name → budget (a duration, or a Stage), and how the stages are measured."""

    stages: dict[str, float | Stage]
    metric: str | None = None  # a histogram with one series per stage ...
    label: str = "stage"  # ... told apart by this label
    source: str | None = None  # or: an LLM source of `obsbox llm rules`; the stages are its signals
    slack: float = 0.0  # time no stage measures (tokenization, the gaps between stages)

    def plain(self) -> dict[str, Any]:
        """As the spec writes them, defaults left out (what an OpenSLO export keeps in an annotation)."""
        stages = {
            name: {"budget": entry.budget, "histogram": entry.histogram} if isinstance(entry, Stage) else entry
            for name, entry in self.stages.items()
        }
        out = {"stages": stages, "metric": self.metric, "label": self.label, "source": self.source, "slack": self.slack}
        return {key: value for key, value in out.items() if value is not None}

    def budget(self, stage: str) -> float:
        entry = self.stages[stage]
        return entry.budget if isinstance(entry, Stage) else entry

    @property
    def total(self) -> float:
        return sum(self.budget(stage) for stage in self.stages) + self.slack

    def problems(self, kind: str, threshold: float | None) -> list[Problem]:
        """What is wrong with these budgets on an SLI of ``kind`` and ``threshold`` (key paths under budgets)."""
        if kind != "latency":
            return [((), "belongs to a latency SLI: the stages split its threshold")]
        out: list[Problem] = []
        if self.metric is not None and self.source is not None:
            out.append(((), "give metric (with label) or source, not both"))
        if self.metric is not None and (not METRIC_NAME.fullmatch(self.metric) or _suffixed(self.metric)):
            out.append((("metric",), f"{self.metric!r}: give the histogram's base name, without _bucket/_count/_sum"))
        if not LABEL_NAME.fullmatch(self.label):
            out.append((("label",), f"{self.label!r} is not a label name"))
        if self.source is not None and not LABEL_NAME.fullmatch(self.source):
            out.append((("source",), f"{self.source!r} is not a source name of the LLM sources file"))
        if self.slack < 0:
            out.append((("slack",), f"{self.slack:g} is negative"))
        if not self.stages:
            return [*out, (("stages",), "lists no stages")]
        for stage in self.stages:
            out += [(("stages", stage, *key), message) for key, message in self._stage_problems(stage)]
        if threshold is not None and not out and not math.isclose(self.total, threshold, abs_tol=1e-9):
            out.append(
                (
                    ("stages",),
                    f"the budgets add up to {_ms(self.total)} (slack {_ms(self.slack)} included), not the "
                    f"threshold of {_ms(threshold)}; change a budget, or put the time no stage measures "
                    "under budgets.slack",
                )
            )
        return out

    def _stage_problems(self, stage: str) -> list[Problem]:
        entry = self.stages[stage]
        histogram = entry.histogram if isinstance(entry, Stage) else None
        out: list[Problem] = []
        if not _STAGE.fullmatch(stage):
            out.append(((), "a stage name is letters, digits and '_', not starting with a digit"))
        if self.budget(stage) <= 0:
            out.append(((), f"{self.budget(stage):g} is not a positive duration"))
        if histogram is not None:
            try:
                metric = parse_selector(histogram).metric
            except ValueError as exc:
                return [*out, (("histogram",), str(exc))]
            if _suffixed(metric):
                out.append((("histogram",), f"{metric}: give the histogram's base name, without _bucket/_count/_sum"))
        elif self.source is not None and stage not in (llm := _llm_stages()):
            known = ", ".join(llm)
            out.append(((), f"{stage} is not a latency signal of the LLM sources (known: {known})"))
        elif self.source is None and self.metric is None:
            out.append(((), "how is it measured? give budgets.metric (and label) or source, or the stage's histogram"))
        return out

    def spend_expr(self, stage: str) -> str:
        """The stage's mean seconds per request over SPEND_WINDOW, summed over every matching series."""
        entry = self.stages[stage]
        if isinstance(entry, Stage) and entry.histogram is not None:
            histogram = parse_selector(entry.histogram)
        elif self.source is not None:
            records = _llm_stages()[stage]  # bucket, count, sum rates, mean
            source = (Matcher("source", "=", self.source),)
            return f"sum({Selector(records[2], source)})\n/\nsum({Selector(records[1], source)})"
        else:
            histogram = Selector(str(self.metric), (Matcher(self.label, "=", stage),))
        rates = [
            f"sum(rate({Selector(histogram.metric + part, histogram.matchers)}[{SPEND_WINDOW}]))"
            for part in ("_sum", "_count")
        ]
        return "\n/\n".join(rates)


def stage_rules(budgets: Budgets, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """Per stage: its budget, its spend, and its overspend (spend - budget, recorded only when positive)."""
    out: list[dict[str, Any]] = []
    for stage in budgets.stages:
        own = {**labels, "stage": stage}
        mine = tuple(Matcher(key, "=", value) for key, value in own.items())
        out += [
            {"record": STAGE_BUDGET, "expr": f"vector({num(budgets.budget(stage))})", "labels": dict(own)},
            {"record": STAGE_SPEND, "expr": budgets.spend_expr(stage), "labels": dict(own)},
            {
                "record": STAGE_OVERSPEND,
                "expr": f"{Selector(STAGE_SPEND, mine)} - {Selector(STAGE_BUDGET, mine)} > 0",
                "labels": dict(own),
            },
        ]
    return out


def overspend_text(labels: Mapping[str, str]) -> str:
    """A Prometheus alert template naming the stages over their budget, most first, with numbers:
    "context_serialization is 181ms over its 100ms budget." (the series of ``stage_rules``)."""
    mine = tuple(Matcher(key, "=", value) for key, value in labels.items())
    over = f"sort_desc(topk({NAMED}, {Selector(STAGE_OVERSPEND, mine)}))"
    budget = str(Selector(STAGE_BUDGET, mine))[:-1] + ",stage=%q}"
    return (
        f"{{{{ range $i, $s := query `{over}` }}}}{{{{ if $i }}}} {{{{ end }}}}{{{{ $s.Labels.stage }}}} is "
        f"{{{{ humanizeDuration $s.Value }}}} over its {{{{ with printf `{budget}` $s.Labels.stage | query }}}}"
        f"{{{{ . | first | value | humanizeDuration }}}}{{{{ end }}}} budget.{{{{ else }}}}{WITHIN_BUDGET}{{{{ end }}}}"
    )


def without_stage_data(annotations: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, str]:
    """An alert's annotations as Prometheus renders them when no stage series exists (a test that feeds
    the SLI's series only): the stage template of ``labels``'s SLO says no stage is over budget."""
    template = overspend_text(labels)
    return {key: text.replace(template, WITHIN_BUDGET) for key, text in annotations.items()}


def _llm_stages() -> dict[str, tuple[str, ...]]:
    """The LLM sources' latency signals and their recorded series (obsbox.breakdown)."""
    return {name: signal.records for name, signal in SIGNALS.items() if signal.kind == "histogram"}


def _suffixed(metric: str) -> bool:
    return metric.endswith(("_bucket", "_count", "_sum"))


def _ms(seconds: float) -> str:
    return f"{num(round(seconds * 1000, 6))} ms"
