"""Trace context in and out of a request: W3C ``traceparent``, the legacy ``X-Activity-ID`` GUID,
and the ``X-Span-ID`` / ``traceresponse`` response headers.

A legacy client that sends only ``X-Activity-ID`` gets a trace whose ID *is* that GUID. The server
span is then a true root of that trace (no invented remote parent): ``ActivityIdGenerator`` hands
the GUID to the SDK as the new trace ID while the server span is being started.
"""

from __future__ import annotations

import re
from contextvars import ContextVar

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import SpanContext

_GUID = re.compile(r"\{?([0-9a-fA-F]{8})-?([0-9a-fA-F]{4})-?([0-9a-fA-F]{4})-?([0-9a-fA-F]{4})-?([0-9a-fA-F]{12})\}?")
# Set around ``tracer.start_span`` to make that root span use a given trace ID (see ActivityIdGenerator).
FORCED_TRACE_ID: ContextVar[int | None] = ContextVar("obsbox_forced_trace_id", default=None)


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
