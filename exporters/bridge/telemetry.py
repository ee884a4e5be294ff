"""Component telemetry: the one way a bridge component gets a metric.

Each component finds a :class:`Telemetry` handle in its context. Asking twice for the same name
returns the same instrument (two ``log_metrics`` processors counting into one metric, two spans
sinks sharing a counter), and asking with another kind or other labels is an error that names
both, instead of a duplicate-timeseries crash inside prometheus-client.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

Kind = Literal["counter", "gauge", "histogram"]
Instrument = Counter | Gauge | Histogram


class Telemetry:
    """The bridge's metrics registry, shared by every component. Thread-safe."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._instruments: dict[str, tuple[Kind, tuple[str, ...], Instrument]] = {}
        self._lock = threading.Lock()

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        """A counter; ``name`` may carry its ``_total`` suffix (the sample name)."""
        return self._get("counter", name.removesuffix("_total"), documentation, labels, None)  # type: ignore[return-value]

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return self._get("gauge", name, documentation, labels, None)  # type: ignore[return-value]

    def histogram(
        self, name: str, documentation: str, labels: Sequence[str] = (), buckets: Sequence[float] | None = None
    ) -> Histogram:
        return self._get("histogram", name, documentation, labels, buckets)  # type: ignore[return-value]

    def _get(
        self, kind: Kind, name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float] | None
    ) -> Instrument:
        wanted = tuple(labels)
        with self._lock:
            known = self._instruments.get(name)
            if known is not None:
                known_kind, known_labels, instrument = known
                if (known_kind, known_labels) != (kind, wanted):
                    raise ValueError(
                        f"metric {name} is already a {known_kind} with labels {list(known_labels)}; "
                        f"asked for a {kind} with labels {list(wanted)}"
                    )
                return instrument
            if kind == "counter":
                instrument = Counter(name, documentation, wanted, registry=self.registry)
            elif kind == "gauge":
                instrument = Gauge(name, documentation, wanted, registry=self.registry)
            else:
                bounds = tuple(buckets) if buckets is not None else Histogram.DEFAULT_BUCKETS
                instrument = Histogram(name, documentation, wanted, registry=self.registry, buckets=bounds)
            self._instruments[name] = (kind, wanted, instrument)
            return instrument
