"""The bridge's own metrics (prometheus-client), one instance per process, in a registry of its own.

Names follow the project convention: ``obsbox_`` prefix, base units, ``_total`` on counters, and
labels with bounded values only (``path`` is bounded by the files the globs match).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class LagGauge:
    """``obsbox_bridge_lag_bytes{path}``: bytes written to a file but not yet acknowledged."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.gauge = Gauge(
            "obsbox_bridge_lag_bytes",
            "Bytes of a file not yet acknowledged by every sink.",
            ["path"],
            registry=registry,
        )
        self.paths: set[str] = set()

    def set_path(self, path: str, lag: int) -> None:
        self.gauge.labels(path).set(lag)
        self.paths.add(path)

    def remove_path(self, path: str) -> None:
        if path in self.paths:
            self.paths.discard(path)
            self.gauge.remove(path)


class BridgeMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.lines_read = Counter("obsbox_bridge_lines_read", "Lines read from files.", ["pipeline"], registry=r)
        self.bytes_read = Counter("obsbox_bridge_read_bytes", "Bytes read from files.", ["pipeline"], registry=r)
        self.lines_shipped = Counter(
            "obsbox_bridge_lines_shipped",
            "Records a sink acknowledged: delivered, or dead-lettered.",
            ["sink"],
            registry=r,
        )
        self.parse_errors = Counter(
            "obsbox_bridge_parse_errors", "Lines passed through unparsed, by reason.", ["reason"], registry=r
        )
        self.truncated = Counter(
            "obsbox_bridge_lines_truncated",
            "Lines longer than max_line_bytes, shipped truncated and flagged.",
            registry=r,
        )
        self.redactions = Counter(
            "obsbox_bridge_redactions", "Secrets replaced by [REDACTED], by rule.", ["rule"], registry=r
        )
        self.trace_ids = Counter(
            "obsbox_bridge_trace_ids",
            "Records by where their trace ID came from (a legacy form, or derived).",
            ["source"],
            registry=r,
        )
        self.retries = Counter(
            "obsbox_bridge_retries", "Export attempts retried, by sink and reason.", ["sink", "reason"], registry=r
        )
        self.dead_letters = Counter(
            "obsbox_bridge_dead_letter_records",
            "Records a sink rejected for good, written to the dead-letter file.",
            ["sink"],
            registry=r,
        )
        self.batch_duration = Histogram(
            "obsbox_bridge_batch_duration_seconds",
            "Time from reading a batch to every sink acknowledging it.",
            ["pipeline"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.files = Gauge("obsbox_bridge_files_tracked", "Files open for reading.", registry=r)
        self.rotations = Counter("obsbox_bridge_rotations", "Rotations seen, by kind.", ["kind"], registry=r)
        self.unread = Counter(
            "obsbox_bridge_unreadable_bytes", "Bytes lost to a copytruncate whose copy no glob matches.", registry=r
        )
        self.errors = Counter("obsbox_bridge_errors", "Operational errors, by kind.", ["kind"], registry=r)
        self.lag = LagGauge(r)
