"""What a ``--once`` run did, said on stderr when it ends, from the bridge's own counters (the numbers
``/metrics`` serves, not counted twice): one line of lines read, each sink's lines by outcome, parse
failures and where the trace IDs came from; and before it, for files started at a saved position,
which positions file held it and how to read them again, so that a second run over the same files
that reads nothing says why instead of looking like a broken one.

Positions stay keyed by the source (its globs), as Vector and the collector key checkpoints per
source: keying them by the sinks too would make a sink added to an existing pipeline re-ship every
file to the sinks that already have it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client import Counter as Metric

if TYPE_CHECKING:
    from obsbox.exporters.bridge.runner import Bridge

PREFIX = "obsbox bridge: "


def counts(metric: Metric, *labels: str) -> Counter[tuple[str, ...]]:
    """A counter's values in this process, by its label values (in the order of ``labels``)."""
    found: Counter[tuple[str, ...]] = Counter()
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                found[tuple(sample.labels[name] for name in labels)] += int(sample.value)
    return found


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def listed(values: Mapping[tuple[str, ...], int]) -> str:
    """``w3c 2, derived_line 1``: the most frequent first."""
    ordered = sorted(values.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{key[0]} {n}" for key, n in ordered if n)


def summary(bridge: Bridge) -> str:
    """One line: lines read (and the lines of stack traces grouped into them); per sink, delivered
    and dead-lettered; parse failures; trace-ID origins."""
    metrics = bridge.metrics
    read = sum(counts(metrics.lines_read, "pipeline").values())
    shipped = counts(metrics.lines_shipped, "sink", "outcome")
    sinks = dict.fromkeys(sink.context.name for pipeline in bridge.pipelines for sink in pipeline.sinks)
    failures = counts(metrics.parse_errors, "reason")
    origins = counts(metrics.trace_ids, "source")
    grouped = sum(counts(metrics.multiline_lines).values())
    parts = [
        f"{plural(read, 'line')} read" + (f" ({grouped} more grouped into them as stack traces)" if grouped else ""),
        *(
            f"{name}: {shipped[name, 'delivered']} delivered, {shipped[name, 'dead_lettered']} dead-lettered"
            for name in sinks
        ),
        plural(sum(failures.values()), "parse failure") + (f" ({listed(failures)})" if failures else ""),
        f"trace IDs: {listed(origins) or 'none'}",
    ]
    return PREFIX + "; ".join(parts)


def already_read(bridge: Bridge, command_line: bool) -> list[str]:
    """A line per source that started files at their saved positions: how many, which positions
    file, and how to read them from the start again (``--no-positions`` is not an option with a
    ``--config`` pipeline: there it is the source's ``save_positions: false``)."""
    said = []
    for pipeline in bridge.pipelines:
        for source in pipeline.sources:
            files, path = source.resumed()
            if not files:
                continue
            again = "--no-positions" if command_line else f"save_positions: false under sources.{source.context.name}"
            were = "was" if files == 1 else "were"
            said.append(
                f"{PREFIX}{plural(files, 'file')} {were} already read up to the positions saved in {path}, so only "
                f"lines written after them were read; to read from the start again: {again}, or delete that file"
            )
    return said
