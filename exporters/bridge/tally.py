"""The bridge's counters as a worker process keeps them: increments only, sent back with each result
and added to the bridge's own metrics there (``workers.add_counters``).

A worker serves no /metrics, so it has no use for prometheus-client, which would be most of what a
worker imports (about 8 MiB of its memory). The processors that run in workers (``parse``,
``trace``, ``redact``) only ever call ``labels(*values).inc(amount)`` or ``inc(amount)`` on the
counters named in ``COUNTERS``; that is all a :class:`Tally` offers.
"""

from __future__ import annotations

# the BridgeMetrics counters the processors that run in workers touch
COUNTERS = ("parse_errors", "trace_ids", "redactions", "truncated", "errors")

Increment = tuple[str, tuple[str, ...], float]  # (counter, label values in order, amount)


class _Labelled:
    __slots__ = ("counts", "key")

    def __init__(self, counts: dict[tuple[str, ...], float], key: tuple[str, ...]) -> None:
        self.counts, self.key = counts, key

    def inc(self, amount: float = 1) -> None:
        self.counts[self.key] = self.counts.get(self.key, 0) + amount


class TallyCounter:
    """One counter's increments since the last :meth:`Tally.drain`, by label values."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[tuple[str, ...], float] = {}

    def labels(self, *values: str) -> _Labelled:
        return _Labelled(self.counts, values)

    def inc(self, amount: float = 1) -> None:
        self.counts[()] = self.counts.get((), 0) + amount


class Tally:
    """Stands in for ``BridgeMetrics`` in a worker: an attribute per name in ``COUNTERS``."""

    def __init__(self) -> None:
        self.counters = {name: TallyCounter() for name in COUNTERS}
        for name, counter in self.counters.items():
            setattr(self, name, counter)

    def drain(self) -> list[Increment]:
        """The increments since the last call, and none kept."""
        out = []
        for name, counter in self.counters.items():
            out += [(name, values, amount) for values, amount in counter.counts.items() if amount]
            counter.counts.clear()
        return out
