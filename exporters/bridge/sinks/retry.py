"""Retry with exponential backoff and jitter, shared by the network sinks.

The files being tailed are the buffer, so by default a sink retries for as long as it takes (the
bridge stops reading meanwhile and memory stays bounded). ``Retry-After`` from the server wins over
the computed delay. Giving up happens only when the pipeline aborts (shutdown timeout).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple


@dataclass
class RetryConfig:
    initial_interval: float = 0.5
    max_interval: float = 30.0
    multiplier: float = 2.0
    max_retry_after: float = 300.0

    def __post_init__(self) -> None:
        if self.initial_interval <= 0 or self.max_interval < self.initial_interval or self.multiplier < 1:
            raise ValueError("need 0 < initial_interval <= max_interval and multiplier >= 1")


class Attempt(NamedTuple):
    """The outcome of one request: ``ok``, ``retry`` (transient) or ``reject`` (permanent, 4xx)."""

    kind: Literal["ok", "retry", "reject"]
    reason: str = ""
    retry_after: float | None = None
    status: int | None = None


def with_retry(
    send: Callable[[], Attempt], policy: RetryConfig, abort: threading.Event, on_retry: Callable[[Attempt], None]
) -> Attempt | None:
    """Call ``send`` until it is not ``retry``; None when ``abort`` was set while waiting."""
    delay = policy.initial_interval
    while True:
        attempt = send()
        if attempt.kind != "retry":
            return attempt
        on_retry(attempt)
        if attempt.retry_after is not None:
            wait = min(max(attempt.retry_after, 0.0), policy.max_retry_after)
        else:
            wait = delay * (0.5 + random.random())  # full jitter around the backoff step
            delay = min(delay * policy.multiplier, policy.max_interval)
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
