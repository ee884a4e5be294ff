"""The load generator: ``sessions`` simulated developers, each asking, reading the streamed reply,
following up with the conversation so far, and thinking in between.

A session is a closed loop (it sends its next request only after the previous reply and its think
time), so throughput is ``sessions / (response time + think time)`` until the gateway saturates.
Every loop is bounded by the stop event, the duration and a per-request timeout.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import orjson

from obsbox.exporters.demo import prompts
from obsbox.exporters.demo.gateway import MODELS, ROUTE
from obsbox.exporters.demo.http_client import Connection, parse_target
from obsbox.exporters.demo.summary import Summary, summarize

SYSTEM = "You are a coding assistant. Answer with code."
FOLLOW_UPS = ("now add type hints", "handle the empty case", "make it faster", "add a test", "explain the edge cases")


@dataclass
class LoadConfig:
    target: str
    sessions: int = 50
    duration: float | None = None  # seconds; None: until stop() (Ctrl-C)
    worker_pool: str = "default"
    think_time: tuple[float, float] = (1.0, 3.0)  # seconds, uniform
    turns: tuple[int, int] = (1, 4)  # follow-ups per conversation, uniform
    stream_share: float = 0.9  # the rest ask for a single JSON reply
    legacy_share: float = 0.2  # sessions that send X-Activity-ID (old clients) instead of nothing
    model_weights: dict[str, float] = field(default_factory=lambda: {MODELS[0]: 0.7, MODELS[1]: 0.3})
    request_timeout: float = 30.0
    seed: int = 11

    def __post_init__(self) -> None:
        parse_target(self.target)
        if self.sessions < 1:
            raise ValueError(f"sessions must be >= 1, got {self.sessions}")
        if self.duration is not None and self.duration <= 0:
            raise ValueError(f"duration must be > 0 seconds, got {self.duration}")
        low, high = self.think_time
        if not 0 <= low <= high:
            raise ValueError(f"think time must be MIN,MAX with 0 <= MIN <= MAX, got {low},{high}")
        if not self.worker_pool:
            raise ValueError("worker pool must not be empty")


class LoadGenerator:
    def __init__(self, config: LoadConfig) -> None:
        self.config = config
        self.host, self.port = parse_target(config.target)
        self.stop_event = asyncio.Event()
        self.replies: list[float] = []
        self.totals: list[float] = []
        self.statuses: Counter[str] = Counter()
        self.started = 0.0
        self.finished = 0.0

    def stop(self) -> None:
        self.stop_event.set()

    async def run(self) -> Summary:
        cfg = self.config
        master = random.Random(cfg.seed)
        self.started = time.perf_counter()
        tasks = [
            asyncio.create_task(self._session(random.Random(master.getrandbits(64)), i)) for i in range(cfg.sessions)
        ]
        try:
            await asyncio.wait_for(self.stop_event.wait(), cfg.duration)
        except (TimeoutError, asyncio.TimeoutError):
            self.stop_event.set()
        # Sessions finish the request they are in (bounded by request_timeout), then return.
        _, pending = await asyncio.wait(tasks, timeout=cfg.request_timeout + 1.0)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.finished = time.perf_counter()
        return self.summary()

    def summary(self) -> Summary:
        seconds = (self.finished or time.perf_counter()) - self.started
        return summarize(self.replies, self.totals, dict(self.statuses), seconds)

    async def _session(self, rng: random.Random, index: int) -> None:
        cfg = self.config
        # Spread the sessions' first requests over the first think time.
        if await self._think(rng.uniform(0, cfg.think_time[1])):
            return
        legacy = rng.random() < cfg.legacy_share
        connection = Connection(self.host, self.port, cfg.request_timeout)
        models, weights = zip(*cfg.model_weights.items(), strict=True)
        try:
            while not self.stop_event.is_set():
                start = prompts.prefix(prompts.draw(rng))
                messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": start}]
                model = rng.choices(models, weights)[0]
                for turn in range(rng.randint(*cfg.turns) + 1):
                    reply = await self._ask(connection, rng, model, messages, legacy)
                    if reply is None or await self._think(rng.uniform(*cfg.think_time)):
                        break
                    follow_up = f"{start} {FOLLOW_UPS[(index + turn) % len(FOLLOW_UPS)]}"
                    answer = {"role": "assistant", "content": reply}
                    messages = [*messages[-4:], answer, {"role": "user", "content": follow_up}]
        finally:
            await connection.close()

    async def _think(self, seconds: float) -> bool:
        """Wait ``seconds``; True when the run was stopped meanwhile."""
        try:
            await asyncio.wait_for(self.stop_event.wait(), seconds)
        except (TimeoutError, asyncio.TimeoutError):
            return False
        return True

    async def _ask(
        self, connection: Connection, rng: random.Random, model: str, messages: list[dict[str, str]], legacy: bool
    ) -> str | None:
        stream = rng.random() < self.config.stream_share
        body = orjson.dumps({"model": model, "messages": messages, "stream": stream, "max_tokens": 256})
        headers = [("Content-Type", "application/json"), ("X-Worker-Pool", self.config.worker_pool)]
        if legacy:
            headers.append(("X-Activity-ID", str(uuid.UUID(int=rng.getrandbits(128)))))
        try:
            exchange = await connection.request("POST", ROUTE, headers, body)
        except (OSError, TimeoutError, asyncio.TimeoutError, ConnectionError) as exc:
            self.statuses[type(exc).__name__] += 1
            await self._think(0.5)  # do not spin on a gateway that is down
            return None
        self.statuses[str(exchange.status)] += 1
        self.replies.append(exchange.first_byte - exchange.sent)
        self.totals.append(exchange.done - exchange.sent)
        if exchange.status != 200:
            return None
        return reply_text(exchange.body, stream)


def reply_text(body: bytes, stream: bool) -> str:
    """The assistant's text from an SSE stream or a JSON reply."""
    if not stream:
        return orjson.loads(body)["choices"][0]["message"]["content"]
    parts: list[str] = []
    for line in body.split(b"\n\n"):
        if line.startswith(b"data: {"):
            event = orjson.loads(line[6:])
            parts.extend(choice["delta"].get("content", "") for choice in event.get("choices", ()))
    return "".join(parts)
