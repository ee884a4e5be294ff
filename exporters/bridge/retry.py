"""The one retry policy of the bridge: exponential backoff with jitter and a maximum elapsed time,
as the OTel Collector's ``configretry`` defines it.

It is configured once, under ``settings.retry``, and reaches every component through its context; a
sink may override it with a ``retry:`` block of its own, as a collector exporter does. It runs one
loop, :meth:`RetryPolicy.run`, used by the network sinks for each request and by the pipeline for a
sink's export as a whole (a sink that raised, or returned FAILURE by itself).

The files being tailed are the buffer, so by default (``max_elapsed_time: 0``) an export is retried
for as long as it takes: the bridge stops reading meanwhile and memory stays bounded. With a
maximum, the records of a request that still fails are dead-lettered with the last reason, never
dropped. ``Retry-After`` from the server wins over the computed delay. Any retry ends when the
pipeline aborts (the shutdown timeout).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple


class Attempt(NamedTuple):
    """The outcome of one try: ``ok``, ``retry`` (transient) or ``reject`` (permanent, e.g. a 4xx)."""

    kind: Literal["ok", "retry", "reject"]
    reason: str = ""
    retry_after: float | None = None
    status: int | None = None


@dataclass
class RetryPolicy:
    initial_interval: float = 0.5
    max_interval: float = 30.0
    multiplier: float = 2.0
    randomization_factor: float = 0.5
    max_elapsed_time: float = 0.0  # 0: retry until it works (or the pipeline aborts)
    max_retry_after: float = 300.0

    def __post_init__(self) -> None:
        if self.initial_interval <= 0 or self.max_interval < self.initial_interval or self.multiplier < 1:
            raise ValueError("need 0 < initial_interval <= max_interval and multiplier >= 1")
        if not 0 <= self.randomization_factor <= 1 or self.max_elapsed_time < 0:
            raise ValueError("need 0 <= randomization_factor <= 1 and max_elapsed_time >= 0")

    def run(
        self, attempt: Callable[[], Attempt], abort: threading.Event, on_retry: Callable[[Attempt], None]
    ) -> Attempt | None:
        """Call ``attempt`` until it is not ``retry``. Returns the last attempt: ``ok``, ``reject``, or
        ``retry`` when ``max_elapsed_time`` ran out; None when ``abort`` was set while waiting."""
        delay = self.initial_interval
        deadline = time.monotonic() + self.max_elapsed_time if self.max_elapsed_time else None
        while True:
            outcome = attempt()
            if outcome.kind != "retry":
                return outcome
            if outcome.retry_after is not None:
                wait = min(max(outcome.retry_after, 0.0), self.max_retry_after)
            else:
                spread = self.randomization_factor * delay
                wait = delay - spread + random.random() * 2 * spread
                delay = min(delay * self.multiplier, self.max_interval)
            if deadline is not None and time.monotonic() + wait > deadline:
                return outcome
            if abort.is_set():  # stopping: say nothing of a retry that will not come
                return None
            on_retry(outcome)
            if abort.wait(wait):
                return None


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the HTTP-date form is rare from these servers and is ignored)."""
    if not value:
        return None
    try:
        return float(value.strip())
    except ValueError:
        return None
