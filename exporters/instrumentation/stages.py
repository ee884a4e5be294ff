"""``stage("prefill")``: time one stage of a request, as a context manager or a decorator.

Each stage observes ``gateway_stage_duration_seconds{stage}`` (with the trace ID as exemplar),
adds to the request's ``stages`` breakdown and, unless turned off, opens a child span named after
the stage so the trace shows the same waterfall as the dashboard.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from contextvars import Token
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context

from obsbox.exporters.instrumentation import request as _request

F = TypeVar("F", bound=Callable[..., Any])


def record_stage(name: str, seconds: float) -> None:
    """Report a stage timed elsewhere (for example a simulated or remote one)."""
    scope = _request.current_request()
    if not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"record_stage: seconds must be >= 0, got {seconds!r}")
    if scope is not None:
        _observe(scope, name, seconds)


def _observe(scope: _request.RequestScope, name: str, seconds: float) -> None:
    inst = scope.instrumentation
    if name not in inst.stage_set:
        raise ValueError(
            f"unknown stage {name!r}: expected one of {', '.join(inst.stages)} (add it to InstrumentConfig.stages)"
        )
    scope.stages[name] = scope.stages.get(name, 0.0) + seconds
    m = inst.metrics
    m.observe(m.stage_duration, (name,), seconds, scope.make_exemplar)


class stage:  # noqa: N801  (reads as a function at the call site: ``with stage("prefill"):``)
    """Time a block or a function as one stage of the current request.

    ``with stage("retrieval") as s: ...`` leaves the duration in ``s.seconds``, and adds it to
    ``into[name]`` when a dict is given (for apps that log their own latency breakdown). As a
    decorator it times every call of a sync or async function. Outside an instrumented request it
    only measures.
    """

    __slots__ = ("_scope", "_span", "_start", "_token", "into", "name", "seconds")

    def __init__(self, name: str, into: dict[str, float] | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"stage: the name must be a non-empty string, got {name!r}")
        self.name = name
        self.into = into
        self.seconds = 0.0
        self._span: trace.Span | None = None
        self._token: Token[Context] | None = None

    def __enter__(self) -> stage:
        scope = self._scope = _request.current_request()
        if scope is not None and scope.instrumentation.config.stage_spans:
            if self.name not in scope.instrumentation.stage_set:
                _observe(scope, self.name, 0.0)  # raises the error that names the known stages
            self._span = scope.instrumentation.tracer.start_span(self.name)
            self._token = otel_context.attach(trace.set_span_in_context(self._span))
        self._start = time.perf_counter()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self.seconds = time.perf_counter() - self._start
        if self.into is not None:
            self.into[self.name] = self.into.get(self.name, 0.0) + self.seconds
        scope = self._scope
        if scope is None:
            return
        span, token = self._span, self._token
        if span is not None and token is not None:  # set together by __enter__
            otel_context.detach(token)
            if exc is not None:
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
            span.end()
            self._span = self._token = None
        _observe(scope, self.name, self.seconds)

    async def __aenter__(self) -> stage:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)

    def __call__(self, func: F) -> F:
        name = self.name
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                with stage(name):
                    return await func(*args, **kwargs)

            return timed_async  # type: ignore[return-value]

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with stage(name):
                return func(*args, **kwargs)

        return timed  # type: ignore[return-value]
