"""Gateway latency breakdown: traffic, errors, quantiles, reply latency against its SLO, where the time goes."""

from obsbox import conventions as c
from obsbox.dashboards import panels as p
from obsbox.dashboards import queries as q
from obsbox.dashboards import slos

threshold = slos.reply_latency_threshold()
slo_line = p.steps((threshold, "red"))

grid = p.Grid()
grid.row("Traffic and latency")
grid.add(
    p.timeseries(
        "Request rate",
        "Requests per second by route and model (every status code).",
        [q.REQUEST_RATE],
        unit="reqps",
        thresholds=p.steps(),
    )
)
grid.add(
    p.timeseries(
        "Error rate",
        "Share of requests that ended in a server error (5xx), by route and model.",
        [q.ERROR_RATIO],
        unit="percentunit",
        thresholds=p.steps((0.01, "orange"), (0.05, "red")),
        lines=True,
    )
)
grid.add(
    p.timeseries(
        "Request duration P50 / P95 / P99",
        "Quantiles of the whole request (to the last byte), by route and model, from the "
        f"{c.REQUEST_DURATION} histogram (buckets {', '.join(f'{b:g}' for b in c.REQUEST_BUCKETS)} s; "
        "a quantile is interpolated inside its bucket).",
        list(q.REQUEST_QUANTILE.values()),
        unit="s",
        thresholds=p.steps((1.0, "yellow"), (2.5, "red")),
    )
)
grid.add(
    p.timeseries(
        f"Reply latency (time to first byte) P95 against {threshold * 1000:.0f} ms",
        f"P95 of the time to the first byte of the reply, the SLI of the "
        f"{slos.reply_latency_slo().name} SLO. The dashed line is its threshold ({threshold * 1000:.0f} ms).",
        [q.REPLY_P95],
        unit="s",
        thresholds=slo_line,
        lines=True,
    ),
    key="reply-p95",
)
grid.row("Where the time goes")
grid.add(
    p.timeseries(
        "Stage breakdown (mean per request)",
        "Mean seconds per request spent in each stage, stacked: network, tls, jwt_verify, "
        "pre_cache_validation, context_serialization, retrieval, scheduler_wait, prefill, decode. "
        "The stack's height is the mean request time.",
        [q.STAGE_MEAN],
        unit="s",
        thresholds=slo_line,
        stack=True,
    ),
    w=16,
    h=10,
)
grid.add(
    p.table(
        "Stage P95 and share of time",
        "For each stage over the dashboard's time range: its P95, and its share of the total time "
        "requests spent in stages.",
        [q.STAGE_P95, q.STAGE_SHARE],
        unit="s",
        thresholds=slo_line,
        sort_by="Share of time",
        renames={"Value #A": ("P95", "s"), "Value #B": ("Share of time", "percentunit")},
    ),
    w=8,
    h=10,
)
grid.add(
    p.heatmap(
        "Reply latency heatmap (exemplars link to Tempo)",
        "Replies per latency bucket over time. The dots are exemplars: single requests with their "
        "trace ID; click one to open its trace in Tempo.",
        [q.REPLY_HEATMAP],
        unit="s",
        thresholds=slo_line,
    ),
    w=24,
    h=9,
)
grid.row("Legacy services (from logs) and slow routes")
grid.add(
    p.timeseries(
        "Stage breakdown from logs",
        f"The same breakdown for services that only log it: the bridge turns each LatencyBreakdown "
        f"record into {c.LOG_STAGE_DURATION}. Mean seconds per request, by service and stage, stacked.",
        [q.LOG_STAGE_MEAN],
        unit="s",
        thresholds=slo_line,
        stack=True,
    ),
    w=14,
    h=9,
)
grid.add(
    p.table(
        "Top slow routes",
        "The ten routes with the highest request-duration P95 over the dashboard's time range.",
        [q.TOP_SLOW_ROUTES],
        unit="s",
        thresholds=p.steps((1.0, "yellow"), (2.5, "red")),
        sort_by="P95",
        renames={"Value": ("P95", "s")},
    ),
    w=10,
    h=9,
)

dashboard = p.dashboard(
    uid="obsbox-gateway-latency",
    title="obsbox / Gateway latency breakdown",
    description="Request rate, errors, P50/P95/P99 by route and model, reply latency against its SLO, the stage "
    "breakdown (instrumented and from logs), a heatmap with exemplars, and the slowest routes.",
    grid=grid,
    variables=p.standard_variables(f"{c.REQUEST_DURATION}_count"),
    tags=["gateway", "latency"],
)
