"""Trace context in and out of a request: W3C ``traceparent``, the legacy ``X-Activity-ID`` GUID,
and the ``X-Span-ID`` / ``traceresponse`` response headers.

A legacy client that sends only ``X-Activity-ID`` gets a trace whose ID *is* that GUID. The server
span is then a true root of that trace (no invented remote parent): ``ActivityIdGenerator`` hands
the GUID to the SDK as the new trace ID while the server span is being started.
"""

from __future__ import annotations

import re
from contextvars import ContextVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_GUID = re.compile(r"\{?([0-9a-fA-F]{8})-?([0-9a-fA-F]{4})-?([0-9a-fA-F]{4})-?([0-9a-fA-F]{4})-?([0-9a-fA-F]{12})\}?")
# the W3C propagator's own pattern and limit (opentelemetry.trace.propagation.tracecontext)
_TRACEPARENT = re.compile("^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:(-.*)|[ \t]*)$")
_TRACEPARENT_MAX = 512
_W3C = TraceContextTextMapPropagator()
# Set around ``tracer.start_span`` to make that root span use a given trace ID (see ActivityIdGenerator).
FORCED_TRACE_ID: ContextVar[int | None] = ContextVar("obsbox_forced_trace_id", default=None)


def extract_w3c(headers: dict[str, str]) -> tuple[Context, SpanContext]:
    """What ``TraceContextTextMapPropagator().extract(headers)`` returns, for a dict with lowercase
    names and one value each, and the span context in it (invalid when there is none). A
    ``traceparent`` alone is parsed here, by the same rules, for half the propagator's cost (its
    getter, its second regex lookup, and looking the span context up again); with a ``tracestate``
    the propagator itself does the work."""
    value = headers.get("traceparent")
    match = None
    if value and "tracestate" not in headers and len(value) <= _TRACEPARENT_MAX:
        match = _TRACEPARENT.search(value)
    if match is None:  # the propagator logs what it logs
        context = _W3C.extract(headers)
        return context, trace.get_current_span(context).get_span_context()
    version, trace_id, span_id, flags, rest = match.groups()
    if trace_id == "0" * 32 or span_id == "0" * 16 or version == "ff" or (version == "00" and rest):
        return Context(), trace.INVALID_SPAN_CONTEXT
    parent = SpanContext(int(trace_id, 16), int(span_id, 16), True, TraceFlags(int(flags, 16)))
    return trace.set_span_in_context(NonRecordingSpan(parent), Context()), parent


def trace_id_from_guid(value: str) -> int | None:
    """``X-Activity-ID`` (a GUID, with or without dashes or braces) → a 128-bit trace ID, or None
    when the value is not a GUID or is all zeros."""
    match = _GUID.fullmatch(value.strip())
    if match is None:
        return None
    trace_id = int("".join(match.groups()), 16)
    return trace_id or None


def guid_from_trace_id(trace_id: int) -> str:
    """The trace ID written as a GUID (8-4-4-4-12, lowercase), the form legacy logs use."""
    h = format(trace_id, "032x")
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def traceresponse(context: SpanContext) -> str:
    """The W3C ``traceresponse`` header value: ``00-<trace>-<span>-<flags>``."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def response_headers(context: SpanContext) -> list[tuple[bytes, bytes]]:
    """``X-Span-ID`` and ``traceresponse`` for a server span, as ASGI header pairs."""
    span_id = b"%016x" % context.span_id
    flags = context.trace_flags
    return [(b"x-span-id", span_id), (b"traceresponse", b"00-%032x-%s-%02x" % (context.trace_id, span_id, flags))]


class ActivityIdGenerator(IdGenerator):
    """Random IDs, except that a root span started while ``FORCED_TRACE_ID`` holds ``x``
    gets trace ID ``x``.

    Wraps another generator (the SDK's random one by default), so sampling by trace ID ratio keeps
    working for every other request.
    """

    def __init__(self, inner: IdGenerator | None = None) -> None:
        self.inner = inner or RandomIdGenerator()

    def generate_span_id(self) -> int:
        return self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        forced = FORCED_TRACE_ID.get()
        return forced if forced is not None else self.inner.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        # A GUID from a legacy client carries no promise about its random bits.
        return FORCED_TRACE_ID.get() is None and self.inner.is_trace_id_random()
