"""The query catalog: every PromQL, LogQL and TraceQL expression the dashboards and the report run.

Each expression is defined once, here, from the names in :mod:`obsbox.conventions`, the bridge's
own metrics included. Expressions keep Grafana's template variables (``$service``, ``$route``,
``$model``, ``$trace_id``, ``$__rate_interval``, ``$__range``, ``$__interval``);
:meth:`Query.fill` replaces them for tools that talk to Prometheus directly.

``$service`` is the Prometheus ``job`` label for scraped metrics (the OpenTelemetry ``service.name``
maps to ``job``), the ``service`` label for metrics derived from logs, ``service_name`` in Loki and
``resource.service.name`` in Tempo.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from obsbox import conventions as c
from obsbox.durations import parse_duration
from obsbox.llm.spec import SIGNALS, Signal
from obsbox.slo.budgets import STAGE_BUDGET, STAGE_OVERSPEND, STAGE_SPEND
from obsbox.slo.rules import EVENTS_RATE

LANG_DATASOURCE = {"promql": "prometheus", "logql": "loki", "traceql": "tempo"}
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


@dataclass(frozen=True)
class Query:
    """One expression, the language it is written in, and the legend Grafana draws for its series."""

    expr: str
    legend: str = ""
    lang: str = "promql"

    def __post_init__(self) -> None:
        if self.lang not in LANG_DATASOURCE:
            raise ValueError(f"unknown query language {self.lang!r}; expected one of {sorted(LANG_DATASOURCE)}")

    @property
    def datasource(self) -> str:
        return LANG_DATASOURCE[self.lang]

    @property
    def variables(self) -> set[str]:
        return {a or b for a, b in VARIABLE.findall(self.expr)}

    def fill(self, values: dict[str, str]) -> str:
        """The expression with every template variable replaced; a variable without a value is an error."""
        missing = self.variables - values.keys()
        if missing:
            raise KeyError(f"no value for template variable(s) {sorted(missing)} in {self.expr!r}")
        return VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], self.expr)


def stage(name: str) -> str:
    """A stage name, checked against the conventions."""
    if name not in c.STAGES:
        raise ValueError(f"unknown stage {name!r}; conventions.STAGES has {c.STAGES}")
    return name


def caches(*names: str) -> str:
    """A regex alternation of cache names, checked against the conventions."""
    unknown = set(names) - set(c.CACHES)
    if unknown:
        raise ValueError(f"unknown cache(s) {sorted(unknown)}; conventions.CACHES has {c.CACHES}")
    return "|".join(names)


# ---------------------------------------------------------------- selectors

SERVICE = 'job=~"$service"'
ROUTED = f'{SERVICE}, route=~"$route", model=~"$model"'
LOG_SERVICE = 'service=~"$service"'
RATE = "[$__rate_interval]"
RANGE = "[$__range]"


def rate_sum(metric: str, selector: str, by: str = "", window: str = RATE) -> str:
    grouping = f"sum by ({by}) " if by else "sum "
    return f"{grouping}(rate({metric}{{{selector}}}{window}))"


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n/\n{denominator}"


def quantile(q: float, histogram: str, selector: str, by: str = "", window: str = RATE) -> str:
    grouping = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({grouping}) (rate({histogram}_bucket{{{selector}}}{window})))"


def mean(histogram: str, selector: str, by: str, window: str = RATE) -> str:
    return ratio(
        rate_sum(f"{histogram}_sum", selector, by, window), rate_sum(f"{histogram}_count", selector, by, window)
    )


def share(metric: str, selector: str, part: str, by: str = "") -> str:
    """The share of ``metric``'s rate that also matches ``part``; 0, not "no data", while none does."""
    whole = rate_sum(metric, selector, by)
    return ratio(f"({rate_sum(metric, f'{selector}, {part}', by)}\nor\n{whole} * 0)", whole)


def hit_ratio(selector: str, by: str = "") -> str:
    return share(c.CACHE_REQUESTS, selector, 'result="hit"', by)


# ---------------------------------------------------------------- gateway latency breakdown

QUANTILES = (0.5, 0.95, 0.99)
REQUEST_RATE = Query(rate_sum(f"{c.REQUEST_DURATION}_count", ROUTED, "route, model"), "{{route}} {{model}}")
ERROR_RATIO = Query(
    share(f"{c.REQUEST_DURATION}_count", ROUTED, 'status_code=~"5.."', "route, model"), "{{route}} {{model}}"
)
REQUEST_QUANTILE = {
    q: Query(quantile(q, c.REQUEST_DURATION, ROUTED, "route, model"), f"P{round(q * 100)} {{{{route}}}} {{{{model}}}}")
    for q in QUANTILES
}
REPLY_P95 = Query(quantile(0.95, c.REPLY_LATENCY, ROUTED), "P95 reply latency")
REPLY_HEATMAP = Query(f"sum by (le) (increase({c.REPLY_LATENCY}_bucket{{{ROUTED}}}{RATE}))", "{{le}}")
STAGE_MEAN = Query(mean(c.STAGE_DURATION, SERVICE, "stage"), "{{stage}}")
STAGE_P95 = Query(quantile(0.95, c.STAGE_DURATION, SERVICE, "stage", RANGE), "{{stage}}")
_stage_time = rate_sum(f"{c.STAGE_DURATION}_sum", SERVICE, "stage", RANGE)
STAGE_SHARE = Query(
    ratio(_stage_time, f"ignoring (stage) group_left\n{rate_sum(f'{c.STAGE_DURATION}_sum', SERVICE, '', RANGE)}"),
    "{{stage}}",
)
LOG_STAGE_MEAN = Query(mean(c.LOG_STAGE_DURATION, LOG_SERVICE, "service, stage"), "{{service}} {{stage}}")
MODEL_ONLY = f'{SERVICE}, model=~"$model"'
TOP_SLOW_ROUTES = Query(f"topk(10, {quantile(0.95, c.REQUEST_DURATION, MODEL_ONLY, 'route', RANGE)})", "{{route}}")

# ---------------------------------------------------------------- LLM serving: the recorded obsbox:llm_* series
# `obsbox llm rules` records every serving stack's metrics (obsbox/llm/sources.yaml) under one set of
# names labelled source and model; these queries read only those, so a panel shows whichever sources
# exist. The rates and ratios are the rules' own (over 5m), not $__rate_interval.

LLM = 'source=~"$source", model=~"$model"'
LLM_SOURCE = 'source=~"$source"'  # GPUs serve whichever model: no model filter
LLM_RECORDED = '__name__=~"obsbox:llm_.+"'  # matches every recorded series, for the variables
LLM_LEGEND = "{{source}} {{model}}"
LLM_QUANTILES = (0.5, 0.95)


def llm_latency(signal: Signal) -> list[Query]:
    """P50 and P95 from the recorded bucket rates, and the recorded mean, per source and model."""
    if signal.kind != "histogram":
        raise ValueError(f"{signal.name} is a {signal.kind}, not a latency histogram")
    bucket = signal.records[0]
    return [
        *(
            Query(
                f"histogram_quantile({q}, sum by (source, model, le) ({bucket}{{{LLM}}}))",
                f"P{round(q * 100)} {LLM_LEGEND}",
            )
            for q in LLM_QUANTILES
        ),
        Query(f"{signal.mean}{{{LLM}}}", f"mean {LLM_LEGEND}"),
    ]


def llm_value(signal: Signal, label: str, selector: str = LLM) -> Query:
    """A counter rate, gauge or ratio signal as recorded, per source and model."""
    if signal.kind == "histogram":
        raise ValueError(f"{signal.name} is a histogram; use llm_latency")
    return Query(f"{signal.records[0]}{{{selector}}}", f"{label} {LLM_LEGEND}".lstrip())


LLM_LATENCY = {name: llm_latency(s) for name, s in SIGNALS.items() if s.kind == "histogram"}

# ---------------------------------------------------------------- the demo gateway's own LLM metrics

CACHE_HIT_RATIO = Query(
    hit_ratio(f'{SERVICE}, cache=~"{caches("prompt_lru", "intent_fingerprint")}"', "cache"), "{{cache}}"
)
DECODE_WARMUP_QUANTILE = {q: Query(quantile(q, c.DECODE_WARMUP, SERVICE), f"P{round(q * 100)}") for q in (0.5, 0.95)}
EMBEDDING_STALLS = Query(rate_sum(c.EMBEDDING_BATCH_STALLS, SERVICE), "stalls")
DECODE_QPS = Query(rate_sum(f"{c.STAGE_DURATION}_count", f'{SERVICE}, stage="{stage("decode")}"'), "decode QPS")
DECODE_TPS_P50 = Query(quantile(0.5, c.DECODE_TOKENS_PER_SECOND, MODEL_ONLY, "model"), "P50 {{model}}")
IN_FLIGHT = Query(f"sum by (worker_pool) ({c.REQUESTS_IN_FLIGHT}{{{SERVICE}}})", "{{worker_pool}}")

# ---------------------------------------------------------------- logs and traces

# Level convention, the same on both paths into Loki: the level is never a stream label. Loki's OTLP
# ingestion stores severity as the structured metadata severity_text/severity_number, and its level
# detection (on by default) adds detected_level, normalised to trace, debug, info, warn, error,
# critical or fatal (Loki 3.7: pkg/loghttp/push/otlp.go, pkg/distributor/field_detection.go,
# pkg/util/constants/levels.go). A push to /loki/api/v1/push gets the same detected_level when it sends
# a `level` structured-metadata entry. So the level is filtered after the selector and grouped by
# detected_level, and the only stream label the queries select on is service_name.
LOKI_SELECTOR = '{service_name=~"$service"}'
TRACE_FILTER = '| trace_id=~"${trace_id}.*"'
ERROR_LEVELS = ("error", "critical", "fatal")
LEVEL_FILTER = f'| detected_level=~"{"|".join(ERROR_LEVELS)}"'
LOKI_LOGS = Query(f"{LOKI_SELECTOR} {TRACE_FILTER}", lang="logql")
LOKI_ERRORS = Query(f"{LOKI_SELECTOR} {LEVEL_FILTER} {TRACE_FILTER}", lang="logql")
LOKI_VOLUME = Query(
    f"sum by (detected_level) (count_over_time({LOKI_SELECTOR} {TRACE_FILTER} [$__interval]))",
    "{{detected_level}}",
    lang="logql",
)
LOG_TIMEOUT_RATE = Query(rate_sum(f"{c.LOG_TIMEOUT_DURATION}_count", LOG_SERVICE, "service"), "{{service}}")
LOG_TIMEOUT_P95 = Query(quantile(0.95, c.LOG_TIMEOUT_DURATION, LOG_SERVICE, "service"), "P95 waited {{service}}")
LOG_OOM_KILLED = Query(f"sum by (service) (increase({c.LOG_OOM_KILLED}{{{LOG_SERVICE}}}{RATE}))", "{{service}}")
LOG_DEADLINE_RATE = Query(rate_sum(c.LOG_DEADLINE_EXCEEDED, LOG_SERVICE, "service"), "{{service}}")
TEMPO_SERVICE = 'resource.service.name=~"$service"'
TEMPO_SEARCH = Query(f"{{{TEMPO_SERVICE}}}", lang="traceql")
TEMPO_ERRORS = Query(f"{{{TEMPO_SERVICE} && status = error}}", lang="traceql")


def tempo_slow(threshold_seconds: float) -> Query:
    """Spans of a route slower than the reply-latency objective."""
    ms = round(threshold_seconds * 1000)
    return Query(f'{{{TEMPO_SERVICE} && span.http.route=~"$route" && duration > {ms}ms}}', lang="traceql")


# ---------------------------------------------------------------- bridge health


def _bridge_queries() -> dict[str, Query]:
    return {
        "lines_read": Query(rate_sum(c.BRIDGE_LINES_READ, SERVICE), "read"),
        "lines_delivered": Query(
            rate_sum(c.BRIDGE_LINES_SHIPPED, f'{SERVICE}, outcome="delivered"', "sink"), "delivered {{sink}}"
        ),
        "dead_lettered": Query(
            rate_sum(c.BRIDGE_LINES_SHIPPED, f'{SERVICE}, outcome="dead_lettered"', "sink"), "dead-lettered {{sink}}"
        ),
        "parse_errors": Query(rate_sum(c.BRIDGE_PARSE_ERRORS, SERVICE, "reason"), "{{reason}}"),
        "truncated": Query(rate_sum(c.BRIDGE_LINES_TRUNCATED, SERVICE), "truncated"),
        "lag": Query(f"max by (path) ({c.BRIDGE_LAG}{{{SERVICE}}})", "{{path}}"),
        "retries": Query(rate_sum(c.BRIDGE_RETRIES, SERVICE, "sink, reason"), "{{sink}} {{reason}}"),
        "redactions": Query(rate_sum(c.BRIDGE_REDACTIONS, SERVICE, "rule"), "{{rule}}"),
        "dead_letter_total": Query(
            f"sum (increase({c.BRIDGE_DEAD_LETTERS}{{{SERVICE}}}{RANGE})) or vector(0)", "dead letters"
        ),
        "batch_p95": Query(quantile(0.95, c.BRIDGE_BATCH_DURATION, SERVICE), "P95 batch"),
        "files": Query(f"sum ({c.BRIDGE_FILES}{{{SERVICE}}})", "files"),
        "rotations": Query(f"sum by (kind) (increase({c.BRIDGE_ROTATIONS}{{{SERVICE}}}{RATE}))", "{{kind}}"),
    }


BRIDGE = _bridge_queries()

# ---------------------------------------------------------------- SLOs (the recording rules of `obsbox slo build`)
# ``selector`` is the label matchers of one SLO's recorded series: ``service="...",slo="..."``.


def sli_good(selector: str, window: str) -> Query:
    """The SLI: the share of good events over ``window``."""
    return Query(f"1 - {_recorded(c.SLI_ERROR_RATIO.format(window=window), selector)}", f"SLI over {window}")


def slo_objective(selector: str) -> Query:
    return Query(_recorded(c.SLO_OBJECTIVE, selector), "objective")


def burn_rate(selector: str, window: str) -> Query:
    """Error ratio over ``window`` divided by the error budget: 1 spends the budget exactly over the period."""
    sli = _recorded(c.SLI_ERROR_RATIO.format(window=window), selector)
    return Query(f"{sli}\n/ on (service, slo)\n{_recorded(c.SLO_ERROR_BUDGET, selector)}", f"{{{{slo}}}} {window}")


def budget_remaining(selector: str) -> Query:
    return Query(_recorded(c.SLO_BUDGET_REMAINING, selector), "budget remaining")


def budget_consumed(selector: str) -> Query:
    return Query(f"1 - {_recorded(c.SLO_BUDGET_REMAINING, selector)}", "budget consumed")


def alert_states(selector: str, alertnames: Sequence[str]) -> Query:
    """Every alert of an SLO, pending or firing, a lane per alert name and severity."""
    names = "|".join(alertnames)
    return Query(
        f'max by (alertname, severity, alertstate) (ALERTS{{alertname=~"{names}", {selector}}})',
        "{{alertname}} {{severity}} {{alertstate}}",
    )


def sli_data(selector: str) -> Query:
    """1 while the SLO's recorded event rate has a series, 0 while it has none (``SLONoData`` fires
    once that lasts its ``for``): the rules record it from the SLI's series, so 0 means no data."""
    return Query(f"count({EVENTS_RATE}{{{selector}}}) or vector(0)", "SLI data")


def stage_spend(selector: str) -> Query:
    """Each budgeted stage's mean seconds per request over 5m (an SLO with ``budgets``)."""
    return Query(f"{STAGE_SPEND}{{{selector}}}", "{{stage}}")


def stage_budget(selector: str) -> Query:
    return Query(f"{STAGE_BUDGET}{{{selector}}}", "{{stage}} budget")


def stage_overspend(selector: str) -> Query:
    """Spend minus budget, where positive: the stages over their share of the threshold."""
    return Query(f"{STAGE_OVERSPEND}{{{selector}}}", "{{stage}}")


def _recorded(metric: str, selector: str) -> str:
    window = window_of(metric)
    if window is not None:
        parse_duration(window)  # a window the SLO rules record: any Prometheus duration, as periods scale them
    return f"{metric}{{{selector}}}"


def window_of(metric: str) -> str | None:
    prefix = c.SLI_ERROR_RATIO.format(window="")
    return metric[len(prefix) :] if metric.startswith(prefix) else None
