"""What waits in one file: the bytes written and not yet acknowledged by every sink, and since when.

Lag is what an operator watches, so it is measured from the file's size on every scan (the watcher
thread scans while the pipeline thread is blocked on a sink), not only when a batch is committed:
it grows whenever lines wait, whatever holds them (a sink that is down, a stalled worker).

The age of the oldest unacknowledged byte comes from marks of (size, when that size was first
seen): the oldest byte past ``acked`` was first seen with the first mark beyond it. Marks are
bounded; past the bound the two oldest merge, keeping the older time (an age reads high, never low).
"""

from __future__ import annotations

from collections import deque

MAX_MARKS = 128


class Backlog:
    def __init__(self) -> None:
        self.marks: deque[tuple[int, float]] = deque()  # (size, first seen at), sizes increasing
        self.size = 0  # the largest size seen in this generation
        self.generation = 0

    def seen(self, size: int, generation: int, now: float) -> None:
        """The file had ``size`` bytes at ``now`` (a truncation starts a new ``generation``)."""
        if generation != self.generation:
            self.marks.clear()
            self.size, self.generation = 0, generation
        if size <= self.size:
            return
        self.size = size
        self.marks.append((size, now))
        if len(self.marks) > MAX_MARKS:
            _, oldest = self.marks.popleft()
            self.marks[0] = (self.marks[0][0], oldest)

    def lag(self, acked: int) -> int:
        return max(0, self.size - acked)

    def age(self, acked: int, now: float) -> float:
        """Seconds since the oldest byte past ``acked`` was seen; 0 when every byte is acknowledged."""
        marks = self.marks
        while marks and marks[0][0] <= acked:
            marks.popleft()
        return now - marks[0][1] if marks else 0.0
