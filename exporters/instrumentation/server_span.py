"""The middleware's server span, started and filled without the SDK's general path when it can be.

Why: ``Tracer.start_span`` is written for any sampler, any parent and any attributes, and pays for
that on every span: the sampler's result object, each attribute checked and copied twice, the span
built through three ``__init__`` levels. For the one span a request always has, with the sampler
``instrument()`` sets up by default (``parentbased_always_on``), most of it is known in advance.
``ServerSpans.start`` makes the same SDK ``Span`` (same class, same fields, the same processors
called with the same arguments) with that work done once; ``set_attributes`` stores attribute
values that need no cleaning directly. Together they halve what the span costs a request (see
BENCHMARKS.md, "Instrumentation overhead").

Anything else goes through the SDK as before: another sampler or a parent that is not sampled, a
tracer that is disabled or counts its spans (the SDK's own metrics), span limits on attribute
length, values other than str, int, float and bool, or an SDK whose spans do not have the fields
this module sets (checked once, against a span the SDK builds itself).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping
from time import time_ns
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Tracer, _Span
from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Decision, ParentBased
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from obsbox.exporters.instrumentation.propagation import FORCED_TRACE_ID, ActivityIdGenerator

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SAMPLED_RANDOM = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_PLAIN = frozenset({str, int, float, bool})  # attribute value types the SDK stores as given


def _parent_based_always_on(sampler: Any) -> bool:
    """Whether ``sampler`` samples exactly as ``ParentBased(ALWAYS_ON)``: every root and every
    child of a sampled parent (the children of unsampled parents take the SDK's path)."""
    if sampler is ALWAYS_ON:
        return True
    return (
        type(sampler) is ParentBased
        and getattr(sampler, "_root", None) is ALWAYS_ON
        and getattr(sampler, "_remote_parent_sampled", None) is ALWAYS_ON
        and getattr(sampler, "_local_parent_sampled", None) is ALWAYS_ON
        and getattr(sampler, "_remote_parent_not_sampled", None) is ALWAYS_OFF
        and getattr(sampler, "_local_parent_not_sampled", None) is ALWAYS_OFF
    )


class ServerSpans:
    """Starts server spans for one tracer; see the module doc. Thread-safe."""

    def __init__(self, tracer: trace.Tracer, kind: SpanKind = SpanKind.SERVER) -> None:
        self.tracer = tracer
        self.kind = kind
        sdk = tracer if type(tracer) is Tracer else None
        self._sdk = sdk
        self.fast = (
            sdk is not None
            and _parent_based_always_on(sdk.sampler)
            and isinstance(sdk.id_generator, ActivityIdGenerator)
            and isinstance(getattr(sdk, "_tracer_metrics", None), NoOpTracerMetrics)
            and sdk._span_limits.max_span_attribute_length is None
        )
        if sdk is not None and self.fast:
            limits = sdk._span_limits
            self._max_attributes = limits.max_span_attributes
            self._max_events = limits.max_events
            self._max_links = limits.max_links
            self._processor = sdk.span_processor
            ids = sdk.id_generator
            assert isinstance(ids, ActivityIdGenerator)  # checked above; said again for the type checker
            self._ids = ids
            self._fixed = {
                "_kind": kind,
                "_instrumentation_info": sdk.instrumentation_info,
                "_instrumentation_scope": sdk._instrumentation_scope,
                "_status": inspect.signature(ReadableSpan.__init__).parameters["status"].default,  # the SDK's own
                "_sampler": sdk.sampler,
                "_trace_config": None,
                "_record_exception": True,
                "_set_status_on_exception": True,
                "_span_processor": sdk.span_processor,
                "_limits": limits,
                "_record_end_metrics": sdk._tracer_metrics.start_span(None, Decision.RECORD_AND_SAMPLE),  # a no-op
                "_end_time": None,
            }
            self.fast = self._same_fields_as_the_sdk(sdk)

    def _same_fields_as_the_sdk(self, sdk: Tracer) -> bool:
        """Whether the SDK's own span has exactly the fields ``start`` sets (a newer SDK may add one)."""
        probe = _Span(
            "probe",
            trace.INVALID_SPAN_CONTEXT,
            sampler=sdk.sampler,
            resource=sdk.resource,
            kind=self.kind,
            span_processor=sdk.span_processor,  # __init__ only keeps it; start() would call it
            instrumentation_info=sdk.instrumentation_info,
            limits=sdk._span_limits,
            instrumentation_scope=sdk._instrumentation_scope,
        )
        ours = {
            *self._fixed,
            "_resource",
            "_name",
            "_context",
            "_parent",
            "_start_time",
            "_lock",
            "_attributes",
            "_events",
            "_links",
        }
        return set(vars(probe)) == ours

    def start(
        self,
        name: str,
        parent: SpanContext | None,
        parent_context: Context | None,
        attributes: dict[str, Any],
        forced_trace_id: int | None = None,
    ) -> trace.Span:
        """Start a span of ``self.kind`` named ``name``: a child of ``parent`` (the span context of
        ``parent_context``, given so as not to look it up twice) when it is valid, else a root whose
        trace ID is ``forced_trace_id`` when given (``X-Activity-ID``). ``attributes`` must not be
        used by the caller afterwards (the span may keep the dict)."""
        sdk = self._sdk
        if parent is not None and not parent.is_valid:
            parent = None
        if (
            not self.fast
            or (parent is not None and not parent.trace_flags.sampled)
            or sdk is None
            or not sdk._is_enabled()
            or not _PLAIN.issuperset(map(type, attributes.values()))
            or (self._max_attributes is not None and len(attributes) > self._max_attributes)
        ):
            return self._sdk_start(name, parent_context, attributes, forced_trace_id)
        if parent is None:
            trace_id = forced_trace_id or self._ids.inner.generate_trace_id()
            random = forced_trace_id is None and self._ids.inner.is_trace_id_random()
            trace_state = None
        else:
            trace_id = parent.trace_id
            random = parent.trace_flags.random_trace_id
            trace_state = parent.trace_state
        context = SpanContext(
            trace_id, self._ids.generate_span_id(), False, _SAMPLED_RANDOM if random else _SAMPLED, trace_state
        )
        bounded = BoundedAttributes(self._max_attributes, None, immutable=False)
        bounded._dict = attributes
        span = _Span.__new__(_Span)
        span.__dict__ = {
            **self._fixed,
            "_resource": sdk.resource,  # the provider may update it
            "_name": name,
            "_context": context,
            "_parent": parent,
            "_start_time": time_ns(),
            "_lock": threading.Lock(),
            "_attributes": bounded,
            "_events": BoundedList(self._max_events),
            "_links": BoundedList(self._max_links),
        }
        self._processor.on_start(span, parent_context=parent_context)
        return span

    def _sdk_start(
        self, name: str, parent_context: Context | None, attributes: dict[str, Any], forced: int | None
    ) -> trace.Span:
        if forced is None:
            return self.tracer.start_span(name, parent_context, self.kind, attributes)
        token = FORCED_TRACE_ID.set(forced)
        try:
            return self.tracer.start_span(name, parent_context, self.kind, attributes)
        finally:
            FORCED_TRACE_ID.reset(token)


def set_attributes(span: trace.Span, attributes: Mapping[str, Any], name: str | None = None) -> None:
    """``span.set_attributes(attributes)`` (and ``span.update_name(name)`` when given), storing str,
    int, float and bool values as they are when the span is the SDK's with no limit on attribute
    length (the SDK would store them unchanged), under one lock."""
    bounded = getattr(span, "_attributes", None)
    if (
        type(span) is not _Span
        or type(bounded) is not BoundedAttributes
        or bounded.max_value_len is not None
        or (bounded.maxlen is not None and len(bounded) + len(attributes) > bounded.maxlen)
        or not _PLAIN.issuperset(map(type, attributes.values()))
    ):
        if name is not None:
            span.update_name(name)
        span.set_attributes(attributes)
        return
    stored = bounded._dict
    with span._lock:
        ended = span._end_time is not None or bounded._immutable
        if not ended:
            if name is not None:
                span._name = name
            for key, value in attributes.items():  # keys: the caller's non-empty str constants
                if key in stored:  # a key set again moves to the end, as in the SDK
                    del stored[key]
                stored[key] = value
    if ended:  # logs what the SDK logs about an ended span
        if name is not None:
            span.update_name(name)
        span.set_attributes(attributes)
