"""Bridge health: the log bridge's own metrics (throughput, failures, lag, retries, redactions)."""

from obsbox import conventions as c
from obsbox.dashboards import panels as p
from obsbox.dashboards import queries as q

b = q.BRIDGE

grid = p.Grid()
grid.row("Throughput")
grid.add(
    p.timeseries(
        "Lines read, delivered and dead-lettered per second",
        "Lines read from the tailed files, lines each sink delivered, and lines a sink refused for good or "
        "gave up on (written to its dead-letter file, not delivered). Delivered below read for long means a "
        "sink is falling behind or refusing.",
        [b["lines_read"], b["lines_delivered"], b["dead_lettered"]],
        unit="short",
        thresholds=p.steps(),
    ),
    w=16,
)
grid.add(
    p.stat(
        "Dead-lettered records",
        "Records a sink rejected for good over the dashboard's time range. Each one is in the sink's "
        "dead-letter file; anything above zero needs a look.",
        [b["dead_letter_total"]],
        unit="short",
        thresholds=p.steps((1, "red")),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Lag per file",
        "Bytes written to each file but not yet acknowledged by every sink.",
        [b["lag"]],
        unit="bytes",
        thresholds=p.steps((1 << 20, "yellow"), (64 << 20, "red")),
    )
)
grid.add(
    p.timeseries(
        "Batch latency (P95)",
        "Time from reading a batch to every sink acknowledging it.",
        [b["batch_p95"]],
        unit="s",
        thresholds=p.steps((1.0, "yellow"), (5.0, "red")),
    )
)
grid.row("Failures and rewrites")
grid.add(
    p.timeseries(
        "Retries",
        "Export attempts retried, by sink and reason (timeouts, 429, 5xx, connection errors).",
        [b["retries"]],
        unit="ops",
        thresholds=p.steps((0.1, "yellow"), (1.0, "red")),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Parse errors and truncated lines",
        "Lines passed through unparsed, by reason, and lines longer than max_line_bytes that were shipped truncated.",
        [b["parse_errors"], b["truncated"]],
        unit="ops",
        thresholds=p.steps((0.1, "yellow"), (1.0, "red")),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Redactions",
        "Secrets replaced by [REDACTED] per second, by rule.",
        [b["redactions"]],
        unit="ops",
        thresholds=p.steps(),
    ),
    w=8,
)
grid.add(
    p.timeseries(
        "Files tracked and rotations",
        "Files open for reading, and rotations seen by kind (rename, copytruncate).",
        [b["files"], b["rotations"]],
        unit="short",
        thresholds=p.steps(),
    ),
    w=24,
)

dashboard = p.dashboard(
    uid="obsbox-bridge-health",
    title="obsbox / Bridge health",
    description="The log bridge: lines read, shipped and failed, lag per file, retries, redactions, dead letters.",
    grid=grid,
    variables=p.standard_variables(c.BRIDGE_LINES_READ),
    tags=["bridge"],
)
