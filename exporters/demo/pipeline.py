"""What one demo chat completion goes through, stage by stage, reported with ``stage()`` and the
``record_*`` API exactly as a real gateway would report them.

``prepare`` runs everything before the first token (network, TLS, JWT, pre-cache validation,
context serialization, retrieval, scheduler wait, prefill); ``decode`` produces the tokens, the
first 3-5 slower (warmup), and hands them to ``emit`` in chunks so the caller can stream them.
Failures the bridge's log rules look for are raised as ``RequestFailedError`` with the legacy message.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from obsbox.exporters import (
    record_cache,
    record_decode,
    record_decode_warmup,
    record_embedding_stall,
    record_prefill,
    set_gpu_memory_utilization,
    stage,
)
from obsbox.exporters.demo import prompts
from obsbox.exporters.demo.backends import (
    Clock,
    ConnectionPool,
    EmbeddingBatch,
    GpuScheduler,
    JwtBatcher,
    LruCache,
)
from obsbox.exporters.demo.latency import LatencyModel
from obsbox.exporters.demo.scenarios import Scenario
from obsbox.exporters.demo.vllm_metrics import EngineRequest, VllmMetrics

WORDS = ("def", " result", " =", " items", ".", "map", "(", "lambda", " x", ":", " x", " *", " 2", ")", "\n", "return")


class RequestFailedError(Exception):
    """A request that ends in an error line of the legacy log."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Chat:
    """One validated request, and what its stages found out."""

    model: str
    messages: list[dict[str, str]]
    stream: bool
    max_tokens: int | None
    stages: dict[str, float] = field(default_factory=dict)  # seconds, for the legacy log
    prompt_tokens: int = 0
    reply_tokens: int = 0
    degraded: str | None = None  # an Error-level message for a request served anyway
    engine: EngineRequest | None = None  # its way through the inference backend, once it got there

    @property
    def last_user_text(self) -> str:
        return next((m["content"] for m in reversed(self.messages) if m.get("role") == "user"), "")


class Pipeline:
    """The backends of one gateway and the walk of a request through them."""

    def __init__(
        self, scenario: Scenario, model: LatencyModel, clock: Clock, rng: random.Random, backend: VllmMetrics
    ) -> None:
        self.s = scenario
        self.backend = backend
        self.m = model
        self.clock = clock
        self.rng = rng
        self.cache_pool = ConnectionPool(model.cache_pool_size, scenario.pooled_connections, model.cache_connect, clock)
        self.jwt = JwtBatcher(model.jwt_batch_window_ms, model.jwt_batch_size, model.jwt_batch, clock, rng)
        self.gpu = GpuScheduler(model.prefill_slots, model.kv_capacity_tokens, model.gpu_base_utilization)
        self.embedding = EmbeddingBatch(model.embedding_window, model.embedding_std_limit)
        size = 4096 if scenario.warm_cache else 128
        self.prompt_cache = LruCache(size)
        self.intent_cache = LruCache(size)
        if scenario.warm_cache:
            frequent = [prompts.key(p) for p in prompts.frequent(1000)]
            self.prompt_cache.warm(frequent)
            self.intent_cache.warm(frequent)

    async def _timed(self, chat: Chat, name: str, ms: float) -> None:
        with stage(name, chat.stages):
            await self.clock.sleep_ms(ms)

    async def prepare(self, chat: Chat) -> None:
        m, rng = self.m, self.rng
        await self._timed(chat, "network", m.network.draw(rng))
        await self._timed(chat, "tls", m.tls(self.s).draw(rng))
        with stage("jwt_verify", chat.stages):
            if self.s.batched_jwt:
                await self.jwt.verify()
            else:
                await self.clock.sleep_ms(m.jwt_single.draw(rng))
        key = prompts.key(chat.last_user_text)
        # Untrimmed, the context's AST metadata changes with every edit, and so do the cache keys.
        if not self.s.trimmed_context:
            key = f"{key}|{rng.getrandbits(32)}"
        with stage("pre_cache_validation", chat.stages):
            await self.cache_pool.use(m.cache_lookup.draw(rng), rng)
            prompt_hit = self.prompt_cache.lookup(key)
            record_cache("prompt_lru", prompt_hit)
        context_kb = m.context_size_kb(self.s, rng)
        await self._timed(chat, "context_serialization", context_kb * m.serialize_ms_per_kb)
        await self._retrieval(chat, key)
        await self._schedule_and_prefill(chat, context_kb, prompt_hit)

    async def _retrieval(self, chat: Chat, key: str) -> None:
        m, rng = self.m, self.rng
        with stage("retrieval", chat.stages):
            hit = self.intent_cache.lookup(key)
            record_cache("intent_fingerprint", hit)
            if hit:
                await self.clock.sleep_ms(m.retrieval_hit.draw(rng))
            elif rng.random() < m.retrieval_timeout_rate:
                await self.clock.sleep_ms(m.retrieval_timeout_ms)
                chat.degraded = (
                    f"retrieval: timeout after {m.retrieval_timeout_ms:.0f}ms; answered without retrieved context"
                )
            else:
                if self.embedding.add(len(chat.last_user_text) // 4):
                    record_embedding_stall()
                    await self.clock.sleep_ms(m.embedding_stall.draw(rng))
                await self.clock.sleep_ms(m.retrieval_miss.draw(rng))

    async def _schedule_and_prefill(self, chat: Chat, context_kb: float, prompt_hit: bool) -> None:
        m, rng = self.m, self.rng
        deadline = m.deadline_ms * self.clock.scale / 1000.0 if self.clock.scale else None
        engine = chat.engine = self.backend.arrive(chat.model)
        try:
            with stage("scheduler_wait", chat.stages):
                if rng.random() < m.deadline_rate:
                    await self.clock.sleep_ms(m.deadline_ms)
                    raise TimeoutError
                await self.gpu.acquire(deadline)
        except (TimeoutError, asyncio.TimeoutError):
            engine.finish("abort")
            raise RequestFailedError(
                504, f"scheduler: context deadline exceeded after {m.deadline_ms:.0f}ms waiting for a GPU slot"
            ) from None
        engine.schedule()
        try:
            chars = sum(len(msg.get("content", "")) for msg in chat.messages)
            chat.prompt_tokens = chars // 4 + round(context_kb * m.context_tokens_per_kb)
            with stage("prefill", chat.stages):
                record_cache("kv", prompt_hit)
                uncached = chat.prompt_tokens * (m.kv_uncached_on_hit if prompt_hit else 1.0)
                await self.clock.sleep_ms(1000.0 * uncached / m.prefill_tokens_per_second)
                record_prefill(chat.prompt_tokens)
                engine.prefill(chat.prompt_tokens, cached_tokens=chat.prompt_tokens - round(uncached))
                if rng.random() < m.oom_rate:
                    engine.finish("error")
                    raise RequestFailedError(503, "decoder worker OOMKilled (exit code 137); request aborted")
        finally:
            self.gpu.release()

    async def decode(self, chat: Chat, emit: Callable[[str], Awaitable[None]]) -> None:
        """Decode the reply, calling ``emit`` with the first token, then every few tokens."""
        m, rng, gpu = self.m, self.rng, self.gpu
        engine = chat.engine
        if engine is None:
            raise RuntimeError("Pipeline.decode: the request was not prepared (call prepare() first)")
        total = chat.reply_tokens = m.reply_length(rng, chat.max_tokens)
        warm = rng.randint(3, 5)
        gpu.decoding += 1
        gpu.kv_tokens += chat.prompt_tokens + total
        engine.hold_kv(chat.prompt_tokens + total)
        set_gpu_memory_utilization(gpu.memory_utilization())
        reason = "abort"  # unless the reply is complete
        try:
            with stage("decode", chat.stages) as s:
                start = time.perf_counter()
                produced = 0
                pending: list[str] = []
                while produced < total:
                    per_token = m.decode_ms_per_token * (1.0 + gpu.decoding / m.decode_batch_knee)
                    step = 1 if produced < warm else min(m.stream_chunk_tokens, total - produced)
                    await self.clock.sleep_ms(per_token * step * (m.warmup_factor if produced < warm else 1.0))
                    pending.extend(WORDS[(produced + i) % len(WORDS)] for i in range(step))
                    produced += step
                    engine.tokens(step)
                    if produced == warm:
                        record_decode_warmup(time.perf_counter() - start)
                    if produced == 1 or produced >= warm:
                        await emit("".join(pending))
                        pending.clear()
                if pending:
                    await emit("".join(pending))
            record_decode(total, s.seconds)
            reason = "length" if total >= m.reply_limit(chat.max_tokens) else "stop"
        finally:
            engine.finish(reason)
            gpu.decoding -= 1
            gpu.kv_tokens -= chat.prompt_tokens + total
            set_gpu_memory_utilization(gpu.memory_utilization())
