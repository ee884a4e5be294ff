"""The bridge's own metrics, one set per process, registered through its :class:`Telemetry`.

Names come from ``obsbox.conventions`` (the dashboards read them there): ``obsbox_`` prefix, base
units, ``_total`` on counters, and labels with bounded values only (``path`` is bounded by the files
the globs match).
"""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, Gauge

from obsbox import conventions as c
from obsbox.exporters.bridge.telemetry import Telemetry

BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class LagGauge:
    """A gauge per open file: ``obsbox_bridge_lag_bytes{path}`` (bytes written to a file but not yet
    acknowledged) and ``obsbox_bridge_oldest_unacked_age_seconds{path}``."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge
        self.paths: set[str] = set()

    def set_path(self, path: str, value: float) -> None:
        self.gauge.labels(path).set(value)
        self.paths.add(path)

    def remove_path(self, path: str) -> None:
        if path in self.paths:
            self.paths.discard(path)
            self.gauge.remove(path)


class FormatGauge:
    """``obsbox_bridge_file_format{path, format}`` = 1: how each open file is read (json, logfmt, cri, docker)."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge
        self.formats: dict[str, str] = {}

    def set_path(self, path: str, fmt: str) -> None:
        self.remove_path(path)
        self.gauge.labels(path, fmt).set(1)
        self.formats[path] = fmt

    def remove_path(self, path: str) -> None:
        fmt = self.formats.pop(path, None)
        if fmt is not None:
            self.gauge.remove(path, fmt)


class BridgeMetrics:
    def __init__(self, registry: CollectorRegistry | Telemetry | None = None) -> None:
        t = registry if isinstance(registry, Telemetry) else Telemetry(registry)
        self.telemetry = t
        self.registry = t.registry
        self.lines_read = t.counter(c.BRIDGE_LINES_READ, "Lines read from files.", ["pipeline"])
        self.bytes_read = t.counter(c.BRIDGE_READ_BYTES, "Bytes read from files.", ["pipeline"])
        self.lines_shipped = t.counter(
            c.BRIDGE_LINES_SHIPPED,
            "Records a sink is done with, by outcome: delivered, or dead_lettered (refused for good, or given "
            "up on, and written to its dead-letter file).",
            ["sink", "outcome"],
        )
        self.parse_errors = t.counter(c.BRIDGE_PARSE_ERRORS, "Lines passed through unparsed, by reason.", ["reason"])
        self.truncated = t.counter(
            c.BRIDGE_LINES_TRUNCATED, "Lines longer than max_line_bytes, shipped truncated and flagged."
        )
        self.multiline_lines = t.counter(
            c.BRIDGE_MULTILINE_LINES,
            "Lines added to the record before them (a stack trace's lines), so not records of their own.",
        )
        self.redactions = t.counter(c.BRIDGE_REDACTIONS, "Secrets replaced by [REDACTED], by rule.", ["rule"])
        self.trace_ids = t.counter(
            c.BRIDGE_TRACE_IDS, "Records by where their trace ID came from (a legacy form, or derived).", ["source"]
        )
        self.retries = t.counter(c.BRIDGE_RETRIES, "Export attempts retried, by sink and reason.", ["sink", "reason"])
        self.dead_letters = t.counter(
            c.BRIDGE_DEAD_LETTERS, "Records a sink rejected for good, written to the dead-letter file.", ["sink"]
        )
        self.batch_duration = t.histogram(
            c.BRIDGE_BATCH_DURATION,
            "Time from reading a batch to every sink acknowledging it.",
            ["pipeline"],
            buckets=BATCH_BUCKETS,
        )
        self.files = t.gauge(c.BRIDGE_FILES, "Files open for reading.")
        self.rotations = t.counter(c.BRIDGE_ROTATIONS, "Rotations seen, by kind.", ["kind"])
        self.unread = t.counter(c.BRIDGE_UNREADABLE_BYTES, "Bytes lost to a copytruncate whose copy no glob matches.")
        self.errors = t.counter(c.BRIDGE_ERRORS, "Operational errors, by kind.", ["kind"])
        self.dead_lettered_by_sink: Counter[str] = Counter()  # what ``dead_lettered`` counted, for ``delivered``
        self.resumes = t.counter(c.BRIDGE_RESUMES, "Saved positions judged on restart, by outcome.", ["outcome"])
        self.lag = LagGauge(t.gauge(c.BRIDGE_LAG, "Bytes of a file not yet acknowledged by every sink.", ["path"]))
        age = "Seconds since the oldest byte of a file that some sink has not acknowledged was seen written."
        self.unacked_age = LagGauge(t.gauge(c.BRIDGE_OLDEST_UNACKED_AGE, age, ["path"]))
        matched = "Regular files each include pattern of a tail source matches."
        self.files_matched = t.gauge(c.BRIDGE_FILES_MATCHED, matched, ["pattern"])
        problems = "Paths and patterns a tail source cannot read now (permission, symlink, read, no_match, ...)."
        self.source_problems = t.gauge(c.BRIDGE_SOURCE_PROBLEMS, problems, ["kind"])
        self.file_format = FormatGauge(
            t.gauge(c.BRIDGE_FILE_FORMAT, "1 for the format each open file is read as.", ["path", "format"])
        )

    def dead_lettered(self, sink: str, count: int) -> None:
        """``count`` records of ``sink`` went to its dead-letter file: the one place that counts them."""
        self.dead_letters.labels(sink).inc(count)
        self.lines_shipped.labels(sink, "dead_lettered").inc(count)
        self.dead_lettered_by_sink[sink] += count

    def delivered(self, sink: str, count: int) -> None:
        self.lines_shipped.labels(sink, "delivered").inc(count)
