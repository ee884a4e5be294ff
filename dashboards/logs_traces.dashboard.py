"""Logs and traces: Loki logs by service and trace ID, the log-pattern metrics, and Tempo searches."""

from obsbox import conventions as c
from obsbox.dashboards import panels as p
from obsbox.dashboards import queries as q
from obsbox.dashboards import slos

threshold = slos.reply_latency_threshold()

grid = p.Grid()
grid.row("Logs")
grid.add(
    p.logs(
        "Logs",
        "Log lines of the selected services, newest first. Paste a trace ID into the trace_id box to see "
        "one request's lines (trace_id is Loki structured metadata, not a label; a prefix is enough).",
        [q.LOKI_LOGS],
    ),
    w=16,
    h=12,
)
grid.add(
    p.timeseries(
        "Log volume by level",
        "Log lines per interval, by level, for the same selection as the log panel.",
        [q.LOKI_VOLUME],
        unit="short",
        thresholds=p.steps(),
        stack=True,
    ),
    w=8,
    h=12,
)
grid.add(
    p.logs(
        "Error logs",
        "Only lines at level error, fatal or critical.",
        [q.LOKI_ERRORS],
    ),
    w=24,
    h=8,
)
grid.row("Log-pattern metrics (from the bridge's log_metrics rules)")
grid.add(
    p.timeseries(
        "Timeouts",
        '"timeout after Nms" lines per second, and the P95 of the time waited before giving up. '
        "Runbook: find the slow dependency in the timed-out request's trace.",
        [q.LOG_TIMEOUT_RATE, q.LOG_TIMEOUT_P95],
        unit="short",
        thresholds=p.steps((0.1, "red")),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "OOMKilled",
        "Containers reported OOMKilled per interval. Runbook: raise the memory request and limit of the "
        "killed container, then restart it.",
        [q.LOG_OOM_KILLED],
        unit="short",
        thresholds=p.steps((1, "red")),
        lines=True,
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Context deadline exceeded",
        '"context deadline exceeded" errors per second. Runbook: raise the client timeout above the '
        "dependency's P99 and use bounded retries with backoff and jitter.",
        [q.LOG_DEADLINE_RATE],
        unit="ops",
        thresholds=p.steps((0.05, "red")),
        lines=True,
    ),
    w=8,
)
grid.row("Traces")
grid.add(
    p.traces_table(
        "Recent traces",
        "Tempo search for the selected services; click a trace ID to open its waterfall, and from a span its logs.",
        [q.TEMPO_SEARCH],
    ),
    w=8,
    h=10,
)
grid.add(
    p.traces_table(
        f"Slower than {threshold * 1000:.0f} ms",
        f"Spans of the selected routes that took longer than the reply-latency objective ({threshold * 1000:.0f} ms).",
        [q.tempo_slow(threshold)],
    ),
    key="slow-traces",
    w=8,
    h=10,
)
grid.add(
    p.traces_table(
        "Error traces",
        "Traces with a span whose status is error.",
        [q.TEMPO_ERRORS],
    ),
    w=8,
    h=10,
)

dashboard = p.dashboard(
    uid="obsbox-logs-traces",
    title="obsbox / Logs and traces",
    description="Loki logs by service and trace ID, the log-pattern metrics, and Tempo trace searches.",
    grid=grid,
    variables=[
        *p.standard_variables(f"{c.REQUEST_DURATION}_count", extra=("loki", "tempo")),
        p.textbox_variable("trace_id", "Trace ID"),
    ],
    tags=["logs", "traces"],
)
