"""Cumulative histogram buckets, read the way Prometheus reads them.

One implementation of ``histogram_quantile`` for everything that summarises a histogram without a
Prometheus server (the demo's summary, the local mode's live view), so their figures agree with the
dashboards' PromQL.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """PromQL's ``histogram_quantile`` over (upper bound, cumulative count) pairs ending with +Inf.

    Linear interpolation inside the bucket that holds the rank, from 0 for the first bucket; a rank
    in the +Inf bucket gives the highest finite bound. NaN when there are no observations, as in
    PromQL. The pairs may come in any order.
    """
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return math.nan
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below) if count > below else bound
        lower, below = bound, count
    return lower


def summed_buckets(registry: object, name: str) -> list[tuple[float, float]]:
    """The buckets of histogram ``name`` in a prometheus-client registry, summed over its label sets
    (``sum by (le)``)."""
    return merge_buckets(
        (float(sample.labels["le"]), sample.value)
        for family in registry.collect()  # type: ignore[attr-defined]
        if family.name == name
        for sample in family.samples
        if sample.name == f"{name}_bucket"
    )


def merge_buckets(pairs: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(upper bound, count) pairs with equal bounds added up, sorted by bound."""
    totals: dict[float, float] = {}
    for bound, count in pairs:
        totals[bound] = totals.get(bound, 0.0) + count
    return sorted(totals.items())
