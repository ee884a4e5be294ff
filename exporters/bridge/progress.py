"""A one-line progress bar for ``--once`` on a terminal: bytes done of total, lines/s, ETA."""

from __future__ import annotations

import sys
import time

from obsbox.exporters.bridge.component import Source

WIDTH = 30


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


class Progress:
    def __init__(self, sources: list[Source], stream=None, interval: float = 0.2) -> None:
        self.sources = sources
        self.stream = stream or sys.stderr
        self.interval = interval
        self.started = time.monotonic()
        self.next_draw = 0.0
        self.lines = 0

    def update(self, lines: int) -> None:
        self.lines += lines
        now = time.monotonic()
        if now >= self.next_draw:
            self.next_draw = now + self.interval
            self.stream.write("\r" + self.render(now))
            self.stream.flush()

    def render(self, now: float) -> str:
        done = total = 0
        for source in self.sources:
            d, t = source.progress()
            done, total = done + d, total + t
        elapsed = max(now - self.started, 1e-6)
        fraction = min(1.0, done / total) if total else 1.0
        bar = "#" * int(fraction * WIDTH) + "." * (WIDTH - int(fraction * WIDTH))
        rate = self.lines / elapsed
        eta = (total - done) / (done / elapsed) if done and total > done else 0.0
        return (
            f"[{bar}] {human_bytes(done)}/{human_bytes(total)} {fraction:6.1%}  "
            f"{self.lines:,} lines  {rate:,.0f} lines/s  ETA {eta:4.0f}s "
        )

    def finish(self) -> None:
        self.stream.write("\r" + self.render(time.monotonic()) + "\n")
        self.stream.flush()
