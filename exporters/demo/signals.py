"""SIGINT/SIGTERM as a graceful stop for the demo and the load generator: the first signal asks
to stop (finish what is in flight, print the summary); later ones are ignored rather than
interrupting the shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    stopped = False

    def handle() -> None:
        nonlocal stopped
        if not stopped:
            stopped = True
            stop()

    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, handle)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
