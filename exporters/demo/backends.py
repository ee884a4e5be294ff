"""The simulated backends a demo request passes through, with real state and real queues.

Time is simulated with ``asyncio.sleep`` (no CPU is burnt), scaled by ``Clock.scale`` (0 for
benchmarks that measure only the code around it). Capacity is real: a request that finds every
slot or connection taken waits in a FIFO queue, so waits grow with load as in a real gateway.
"""

from __future__ import annotations

import asyncio
import collections
import random
import statistics
from collections.abc import Iterable

from obsbox.exporters.demo.latency import Dist


class Clock:
    def __init__(self, scale: float = 1.0) -> None:
        if scale < 0:
            raise ValueError(f"time scale must be >= 0, got {scale}")
        self.scale = scale

    async def sleep_ms(self, ms: float) -> None:
        await asyncio.sleep(ms * self.scale / 1000.0)


class LruCache:
    """A bounded LRU of keys (the prompt and intent caches): ``lookup`` says hit or miss and
    remembers the key."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.keys: collections.OrderedDict[str, None] = collections.OrderedDict()

    def warm(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.lookup(key)

    def lookup(self, key: str) -> bool:
        if key in self.keys:
            self.keys.move_to_end(key)
            return True
        self.keys[key] = None
        if len(self.keys) > self.capacity:
            self.keys.popitem(last=False)
        return False


class ConnectionPool:
    """At most ``size`` connections to a backend at once; a caller that finds all in use waits.
    Pooled: an idle connection is reused, and only a new one pays ``connect``. Not pooled: every
    use opens (and pays for) a connection of its own."""

    def __init__(self, size: int, pooled: bool, connect: Dist, clock: Clock) -> None:
        self.slots = asyncio.Semaphore(size)
        self.pooled = pooled
        self.connect = connect
        self.clock = clock
        self.idle = 0
        self.opened = 0

    async def use(self, work_ms: float, rng: random.Random) -> None:
        async with self.slots:
            if self.pooled and self.idle:
                self.idle -= 1
            else:
                self.opened += 1
                await self.clock.sleep_ms(self.connect.draw(rng))
            try:
                await self.clock.sleep_ms(work_ms)
            finally:
                if self.pooled:
                    self.idle += 1


class JwtBatcher:
    """Batched JWT verification: callers within ``window_ms`` of the first (or up to
    ``max_size`` of them) share one verification pass."""

    def __init__(self, window_ms: float, max_size: int, cost: Dist, clock: Clock, rng: random.Random) -> None:
        self.window_ms = window_ms
        self.max_size = max_size
        self.cost = cost
        self.clock = clock
        self.rng = rng
        self.pending: list[asyncio.Future[None]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def verify(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self.pending.append(future)
        if len(self.pending) >= self.max_size:
            self._flush()
        elif self.timer is None:
            self.timer = loop.call_later(self.window_ms * self.clock.scale / 1000.0, self._flush)
        await future

    def _flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        batch, self.pending = self.pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._verify(batch))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _verify(self, batch: list[asyncio.Future[None]]) -> None:
        await self.clock.sleep_ms(self.cost.draw(self.rng))
        for future in batch:
            if not future.done():
                future.set_result(None)


class GpuScheduler:
    """``slots`` sequences prefill at once; the rest wait in FIFO order (the scheduler wait).
    Tracks the sequences decoding and the KV cache they hold, for decode slowdown and the
    simulated GPU memory utilization."""

    def __init__(self, slots: int, kv_capacity_tokens: int, base_utilization: float) -> None:
        self.slots = asyncio.Semaphore(slots)
        self.kv_capacity = kv_capacity_tokens
        self.base = base_utilization
        self.kv_tokens = 0
        self.decoding = 0

    async def acquire(self, timeout_s: float | None) -> None:
        """Wait for a prefill slot; ``TimeoutError`` after ``timeout_s`` (None: no deadline)."""
        await asyncio.wait_for(self.slots.acquire(), timeout_s)

    def release(self) -> None:
        self.slots.release()

    def memory_utilization(self) -> float:
        return min(1.0, self.base + (1.0 - self.base) * min(1.0, self.kv_tokens / self.kv_capacity))


class EmbeddingBatch:
    """The sequence lengths of the embedding batch being filled; uneven lengths (population std
    above ``std_limit``) mean padding, and the batch stalls."""

    def __init__(self, window: int, std_limit: float) -> None:
        self.lengths: collections.deque[int] = collections.deque(maxlen=window)
        self.std_limit = std_limit

    def add(self, length: int) -> bool:
        """Add a sequence; True when the batch it joins stalls."""
        self.lengths.append(length)
        return len(self.lengths) >= 4 and statistics.pstdev(self.lengths) > self.std_limit
