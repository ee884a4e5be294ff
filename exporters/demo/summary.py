"""Latency percentiles and throughput, as the load generator and ``obsbox demo`` print them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) with linear interpolation between closest ranks; NaN when
    there are no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class Summary:
    requests: int
    errors: int
    seconds: float
    reply_p50: float
    reply_p95: float
    reply_p99: float
    total_p50: float
    total_p95: float
    slower_than_300ms: float  # share of replies with a first byte after 0.3 s (the SLO threshold)
    statuses: dict[str, int]

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        return [
            f"requests      {self.requests} in {self.seconds:.1f} s  ({self.throughput:.1f} req/s), "
            f"{self.errors} errors  statuses {self.statuses}",
            f"reply latency P50 {self.reply_p50 * 1000:.0f} ms  P95 {self.reply_p95 * 1000:.0f} ms  "
            f"P99 {self.reply_p99 * 1000:.0f} ms  ({self.slower_than_300ms:.0%} slower than 300 ms)",
            f"full response P50 {self.total_p50 * 1000:.0f} ms  P95 {self.total_p95 * 1000:.0f} ms",
        ]


def summarize(replies: Sequence[float], totals: Sequence[float], statuses: dict[str, int], seconds: float) -> Summary:
    """``replies``: time to first byte of each reply, ``totals``: time to its end, both in seconds."""
    errors = sum(n for status, n in statuses.items() if not status.startswith("2"))
    return Summary(
        requests=len(totals),
        errors=errors,
        seconds=seconds,
        reply_p50=percentile(replies, 50),
        reply_p95=percentile(replies, 95),
        reply_p99=percentile(replies, 99),
        total_p50=percentile(totals, 50),
        total_p95=percentile(totals, 95),
        slower_than_300ms=sum(r > 0.3 for r in replies) / len(replies) if replies else 0.0,
        statuses=dict(sorted(statuses.items())),
    )
