"""What the app tells the instrumentation about the request it is serving.

The middleware opens a ``RequestScope`` per request and makes it current (a contextvar, so it
follows asyncio tasks and threads). The functions here report into the current scope: the model,
the route template, the GenAI operation and its token usage, cache results, decode speed. Outside
an instrumented request they validate their input and record nothing, like the OpenTelemetry API
without an SDK, so the same app code runs with and without ``instrument()``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry.trace import Span, Tracer

from obsbox import conventions
from obsbox.exporters.instrumentation.gateway_metrics import GatewayMetrics


class StageSettings(Protocol):
    """The part of the app's ``InstrumentConfig`` that ``stage()`` reads."""

    @property
    def stage_spans(self) -> bool: ...


class Instruments(Protocol):
    """What a request reports into: the app's ``Instrumentation`` (which imports this module).

    Every member that ``request`` and ``stages`` read is listed here, read-only (so the app may
    hold a subtype, e.g. a ``BoundedLabel`` where a label function is expected)."""

    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def model_label(self) -> Callable[[str | None], str]: ...
    @property
    def gpu_label(self) -> Callable[[str | None], str]: ...
    @property
    def config(self) -> StageSettings: ...
    @property
    def tracer(self) -> Tracer: ...
    @property
    def stages(self) -> tuple[str, ...]: ...
    @property
    def stage_set(self) -> frozenset[str]: ...


_current: ContextVar[RequestScope | None] = ContextVar("obsbox_request", default=None)


@dataclass(eq=False)
class RequestScope:
    """One request in flight. ``stages`` accumulates seconds per stage, for apps that also log a
    latency breakdown."""

    instrumentation: Instruments
    span: Span
    otel_context: Any
    start: float
    method: str
    path: str
    worker_pool: str
    model: str | None = None
    route: str | None = None
    server: tuple[str, int] | None = None  # the address the request came in on (server.address/port)
    operation: str | None = None  # gen_ai.operation.name, when the app names it
    provider: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    response_model: str | None = None
    finish_reasons: tuple[str, ...] | None = None
    stages: dict[str, float] = field(default_factory=dict)
    in_flight: Any = None  # the in-flight gauge's child for this request's worker pool
    _exemplar: dict[str, str] | None = None

    @property
    def exemplar(self) -> dict[str, str] | None:
        """``{"trace_id": ...}`` for a sampled span, else None (an exemplar must point at a trace
        that exists)."""
        if self._exemplar is None:
            ctx = self.span.get_span_context()
            if ctx.trace_flags.sampled:
                self._exemplar = {"trace_id": format(ctx.trace_id, "032x")}
        return self._exemplar

    def make_exemplar(self) -> dict[str, str] | None:
        """``exemplar``, as a function: what ``GatewayMetrics.observe`` calls when it keeps one."""
        return self.exemplar

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def current_request() -> RequestScope | None:
    """The instrumented request being served in this context, if any."""
    return _current.get()


def set_model(name: str) -> None:
    """The model this request asks for (``gen_ai.request.model``; unknown ones fold into ``other``)."""
    if not isinstance(name, str):
        raise TypeError(f"set_model: the model name must be a string, got {type(name).__name__}")
    scope = _current.get()
    if scope is not None:
        scope.model = name


def set_route(template: str) -> None:
    """The route template that served this request, for apps without a router that says so."""
    if not isinstance(template, str) or not template.startswith("/"):
        raise ValueError(f"set_route: a route template starts with '/', got {template!r}")
    scope = _current.get()
    if scope is not None:
        scope.route = template


def set_operation(name: str, provider: str | None = None) -> None:
    """The GenAI operation this request performs (``gen_ai.operation.name``: ``chat``,
    ``embeddings``, ...) and, when it is not ``InstrumentConfig.genai_provider``, its provider.
    Needed only where the route is not one of ``genai_routes``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"set_operation: the operation must be a non-empty string, got {name!r}")
    if provider is not None and (not isinstance(provider, str) or not provider):
        raise ValueError(f"set_operation: the provider must be a non-empty string, got {provider!r}")
    scope = _current.get()
    if scope is not None:
        scope.operation = name
        if provider is not None:
            scope.provider = provider


def record_usage(
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    *,
    response_model: str | None = None,
    finish_reasons: Sequence[str] | None = None,
) -> None:
    """The reply's usage, as an OpenAI-style ``usage`` object and choices say: the token counts
    (they replace what ``record_prefill``/``record_decode`` added up), the model that answered and
    why it stopped. Feeds the GenAI span attributes and metrics only, not the ``gateway_*`` counters."""
    if input_tokens is not None:
        _check_count("record_usage", "input_tokens", input_tokens)
    if output_tokens is not None:
        _check_count("record_usage", "output_tokens", output_tokens)
    if response_model is not None and not isinstance(response_model, str):
        raise TypeError(f"record_usage: response_model must be a string, got {type(response_model).__name__}")
    if finish_reasons is not None and (
        isinstance(finish_reasons, str) or not all(isinstance(r, str) for r in finish_reasons)
    ):
        raise TypeError(f"record_usage: finish_reasons must be a sequence of strings, got {finish_reasons!r}")
    scope = _current.get()
    if scope is None:
        return
    if input_tokens is not None:
        scope.input_tokens = input_tokens
    if output_tokens is not None:
        scope.output_tokens = output_tokens
    if response_model is not None:
        scope.response_model = response_model
    if finish_reasons is not None:
        scope.finish_reasons = tuple(finish_reasons)


def record_cache(cache: str, hit: bool) -> None:
    """A lookup in one of ``conventions.CACHES``: ``gateway_cache_requests_total{cache,result}``."""
    if cache not in conventions.CACHES:
        raise ValueError(f"record_cache: unknown cache {cache!r}; expected one of {', '.join(conventions.CACHES)}")
    scope = _current.get()
    if scope is not None:
        m = scope.instrumentation.metrics
        m.child(m.cache_requests, cache, "hit" if hit else "miss").inc()


def record_prefill(tokens: int) -> None:
    """Prompt tokens prefilled for this request (also its ``gen_ai.usage.input_tokens``)."""
    _check_count("record_prefill", "tokens", tokens)
    scope = _current.get()
    if scope is not None:
        scope.input_tokens = (scope.input_tokens or 0) + tokens
        m = scope.instrumentation.metrics
        m.child(m.prefill_tokens, scope.instrumentation.model_label(scope.model)).inc(tokens)


def record_decode(tokens: int, seconds: float) -> None:
    """A finished decode: the token count (also ``gen_ai.usage.output_tokens``) and the decode
    speed (tokens per second)."""
    _check_count("record_decode", "tokens", tokens)
    _check_seconds("record_decode", seconds)
    scope = _current.get()
    if scope is not None:
        scope.output_tokens = (scope.output_tokens or 0) + tokens
        m = scope.instrumentation.metrics
        model = scope.instrumentation.model_label(scope.model)
        m.child(m.decode_tokens, model).inc(tokens)
        if tokens and seconds > 0:
            m.observe(m.decode_tokens_per_second, (model,), tokens / seconds, scope.make_exemplar)


def record_decode_warmup(seconds: float) -> None:
    """Time spent decoding the first, slower tokens of a reply."""
    _check_seconds("record_decode_warmup", seconds)
    scope = _current.get()
    if scope is not None:
        m = scope.instrumentation.metrics
        m.observe(m.decode_warmup, (), seconds, scope.make_exemplar)


def record_embedding_stall() -> None:
    """An embedding batch stalled (padding to the longest of uneven sequences)."""
    scope = _current.get()
    if scope is not None:
        scope.instrumentation.metrics.embedding_batch_stalls.inc()


def set_gpu_memory_utilization(ratio: float, gpu: str = "0") -> None:
    """GPU memory in use as a ratio (0..1), for apps that know it. When the NVML exporter is loaded
    the real reading owns the gauge and this call records nothing."""
    if not isinstance(ratio, int | float) or not 0.0 <= ratio <= 1.0:
        raise ValueError(f"set_gpu_memory_utilization: ratio must be within 0..1, got {ratio!r}")
    scope = _current.get()
    if scope is not None and (gauge := scope.instrumentation.metrics.gpu_memory) is not None:
        scope.instrumentation.metrics.child(gauge, scope.instrumentation.gpu_label(gpu)).set(ratio)


def _check_count(where: str, name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{where}: {name} must be a non-negative integer, got {value!r}")


def _check_seconds(where: str, value: float) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: seconds must be a finite number >= 0, got {value!r}")
