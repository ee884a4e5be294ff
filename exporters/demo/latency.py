"""The demo gateway's latency model: one distribution per stage, in milliseconds.

Service times are log-normal (``Dist(median, sigma)``), the usual shape of network and service
latency: most requests near the median, a long right tail. Queueing (scheduler wait, connection
pool waits) is not drawn from a distribution at all: it emerges from real bounded capacity in
``backends``. Each scenario switch picks one of two distributions; nothing else differs.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from obsbox.exporters.demo.scenarios import Scenario


@dataclass(frozen=True)
class Dist:
    """Log-normal with the given median (ms) and shape ``sigma``."""

    median: float
    sigma: float

    def draw(self, rng: random.Random) -> float:
        return self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))


@dataclass(frozen=True)
class LatencyModel:
    network: Dist = Dist(6.0, 0.5)
    tls_handshake: Dist = Dist(30.0, 0.35)  # a new connection: full TLS handshake
    tls_resumed: Dist = Dist(0.8, 0.3)  # a pooled connection
    jwt_single: Dist = Dist(24.0, 0.6)  # per-request verification, key set fetched each time
    jwt_batch: Dist = Dist(2.5, 0.3)  # one verification pass for a batch, cached key set
    jwt_batch_window_ms: float = 2.0
    jwt_batch_size: int = 16
    cache_connect: Dist = Dist(20.0, 0.4)  # opening a connection to the validation cache
    cache_lookup: Dist = Dist(2.0, 0.4)
    cache_pool_size: int = 16  # connections the gateway may hold to the cache at once
    context_kb: Dist = Dist(230.0, 0.5)  # editor context with full AST metadata
    trimmed_fraction: float = 0.2  # left after dropping sourceMap and comments
    serialize_ms_per_kb: float = 1.05
    retrieval_hit: Dist = Dist(3.0, 0.3)
    retrieval_miss: Dist = Dist(75.0, 0.5)  # embedding + vector search
    retrieval_timeout_ms: float = 450.0
    embedding_window: int = 16  # sequence lengths of the current embedding batch
    embedding_std_limit: float = 12.0  # above this, padding stalls the batch
    embedding_stall: Dist = Dist(40.0, 0.4)
    context_tokens_per_kb: float = 6.0
    prefill_tokens_per_second: float = 16_000.0
    prefill_slots: int = 4  # sequences the GPU prefills at once; the rest queue (scheduler wait)
    kv_uncached_on_hit: float = 0.35  # share of the prompt still prefilled on a KV prefix hit
    deadline_ms: float = 3000.0  # scheduler wait beyond this: "context deadline exceeded"
    decode_ms_per_token: float = 2.5
    decode_batch_knee: int = 64  # per-token time doubles at this many sequences decoding
    warmup_factor: float = 3.0  # the first 3-5 tokens are this much slower
    reply_tokens: Dist = Dist(24.0, 0.6)  # completions are short
    max_reply_tokens: int = 400
    stream_chunk_tokens: int = 8
    kv_capacity_tokens: int = 400_000  # GPU memory for KV cache, in tokens
    gpu_base_utilization: float = 0.30  # weights and activations
    # seeded rates of the failures the bridge's log rules look for
    retrieval_timeout_rate: float = 0.01
    deadline_rate: float = 0.003
    oom_rate: float = 0.0008

    def tls(self, s: Scenario) -> Dist:
        return self.tls_resumed if s.pooled_connections else self.tls_handshake

    def context_size_kb(self, s: Scenario, rng: random.Random) -> float:
        size = self.context_kb.draw(rng)
        return size * self.trimmed_fraction if s.trimmed_context else size

    def reply_limit(self, max_tokens: int | None) -> int:
        """The most tokens a reply may have: the request's ``max_tokens`` or the model's own limit."""
        return min(self.max_reply_tokens, max_tokens or self.max_reply_tokens)

    def reply_length(self, rng: random.Random, max_tokens: int | None) -> int:
        return max(4, min(self.reply_limit(max_tokens), round(self.reply_tokens.draw(rng))))
