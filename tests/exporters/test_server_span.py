"""The server span's fast start gives the span the SDK's own ``start_span`` gives: same class, same
fields, same processors called; and it steps aside whenever the SDK would decide otherwise."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider, _Span
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from obsbox.exporters.instrumentation.propagation import FORCED_TRACE_ID, ActivityIdGenerator, extract_w3c
from obsbox.exporters.instrumentation.server_span import ServerSpans, set_attributes

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ATTRIBUTES = {"http.request.method": "POST", "url.path": "/v1/chat", "url.scheme": "http"}


class Recorder(SpanProcessor):
    def __init__(self) -> None:
        self.started: list[tuple[Any, Any]] = []
        self.ended: list[ReadableSpan] = []

    def on_start(self, span, parent_context=None):
        self.started.append((span, parent_context))

    def on_end(self, span):
        self.ended.append(span)


def provider(**kwargs: Any) -> tuple[TracerProvider, Recorder]:
    tp = TracerProvider(id_generator=ActivityIdGenerator(), **kwargs)
    recorder = Recorder()
    tp.add_span_processor(recorder)
    return tp, recorder


def comparable(span: Any) -> dict[str, Any]:
    """A span's fields, with what differs between any two spans (IDs, times, locks) left out."""
    fields = dict(vars(span))
    for name in ("_lock", "_start_time", "_end_time"):
        fields.pop(name)
    context = fields.pop("_context")
    fields["trace_flags"], fields["trace_state"], fields["is_remote"] = (
        context.trace_flags,
        context.trace_state,
        context.is_remote,
    )
    attributes = fields.pop("_attributes")
    fields["attributes"] = (type(attributes), dict(attributes), attributes.maxlen, attributes._immutable)
    for name in ("_events", "_links"):
        kept = fields.pop(name)
        fields[name] = (type(kept), list(kept), kept._dq.maxlen)
    return fields


def both(tp: TracerProvider, headers: dict[str, str], forced: int | None = None) -> tuple[Any, Any]:
    """(the SDK's span, the fast one) for the same request; each ended after the same attributes."""
    tracer = tp.get_tracer("obsbox.exporters", "1")
    parent, parent_span = extract_w3c(headers) if headers else (None, trace.INVALID_SPAN_CONTEXT)
    token = FORCED_TRACE_ID.set(forced)
    try:
        sdk = tracer.start_span("POST", parent, trace.SpanKind.SERVER, dict(ATTRIBUTES))
    finally:
        FORCED_TRACE_ID.reset(token)
    fast = ServerSpans(tracer).start("POST", parent_span, parent, dict(ATTRIBUTES), forced)
    finished = {"http.route": "/v1/chat", "http.response.status_code": 200, "url.path": "/v1/chat"}
    sdk.update_name("POST /v1/chat")
    sdk.set_attributes(finished)
    set_attributes(fast, finished, name="POST /v1/chat")
    return sdk, fast


@pytest.mark.parametrize(
    "headers, forced",
    [({}, None), ({"traceparent": TRACEPARENT}, None), ({}, 0x0AF7651916CD43DD8448EB211C80319C)],
    ids=["root", "w3c-parent", "x-activity-id"],
)
def test_the_fast_span_is_the_sdk_span(headers, forced):
    tp, recorder = provider()
    sdk, fast = both(tp, headers, forced)
    assert ServerSpans(tp.get_tracer("x")).fast
    assert type(fast) is type(sdk) is _Span
    assert comparable(fast) == comparable(sdk)
    assert list(fast.attributes) == [
        "http.request.method",
        "url.scheme",
        "http.route",
        "http.response.status_code",
        "url.path",
    ]
    assert fast.parent == sdk.parent
    if headers or forced:  # a root's trace ID is random, otherwise the parent's or the forced one
        assert fast.context.trace_id == sdk.context.trace_id
    if forced:
        assert fast.context.trace_id == forced and fast.parent is None
    assert [span for span, _ in recorder.started] == [sdk, fast]  # on_start with the same parent context
    assert recorder.started[0][1] is recorder.started[1][1]
    sdk.end()
    fast.end()
    ended_sdk, ended_fast = recorder.ended
    assert type(ended_fast) is type(ended_sdk) is ReadableSpan
    assert ended_fast.attributes == ended_sdk.attributes and ended_fast.name == ended_sdk.name == "POST /v1/chat"
    set_attributes(fast, {"late": 1})  # after end: refused, as the SDK refuses it
    assert "late" not in fast.attributes


def test_the_sdk_decides_whenever_it_would_decide_otherwise():
    unsampled = {"traceparent": TRACEPARENT[:-2] + "00"}
    tp, _ = provider()
    _, span = both(tp, unsampled)
    assert not span.is_recording() and span.get_span_context().trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736

    ratio, _ = provider(sampler=TraceIdRatioBased(0.5))
    assert not ServerSpans(ratio.get_tracer("x")).fast  # any sampler but parent-based always-on

    limited, _ = provider(span_limits=SpanLimits(max_span_attribute_length=4))
    assert not ServerSpans(limited.get_tracer("x")).fast
    sdk, fast = both(limited, {})
    assert fast.attributes["url.path"] == sdk.attributes["url.path"] == "/v1/"  # truncated by the SDK

    tp, _ = provider()
    tracer = tp.get_tracer("x")
    span = ServerSpans(tracer).start("GET", None, None, {"list": ["a", "b"]})  # not a plain value: the SDK's path
    assert span.attributes["list"] == ("a", "b")
    set_attributes(span, {"tuple": ["x"]})
    assert span.attributes["tuple"] == ("x",)


def test_an_sdk_whose_span_has_other_fields_is_left_to_the_sdk(monkeypatch):
    original = _Span.__init__

    def with_one_more(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._new_field = None

    monkeypatch.setattr(_Span, "__init__", with_one_more)
    tp, _ = provider()
    assert not ServerSpans(tp.get_tracer("x")).fast


def test_extract_w3c_agrees_with_the_propagator():
    w3c = TraceContextTextMapPropagator()
    for value in (
        TRACEPARENT,
        "  " + TRACEPARENT,
        TRACEPARENT + "-extra",  # version 00 takes no more fields
        "01" + TRACEPARENT[2:] + "-extra",  # a later version may
        "ff" + TRACEPARENT[2:],
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        TRACEPARENT.upper(),
        TRACEPARENT[:-2] + "03",
        "garbage",
    ):
        for headers in ({"traceparent": value}, {"traceparent": value, "tracestate": "a=1"}):
            context, span_context = extract_w3c(headers)
            expected = trace.get_current_span(w3c.extract(headers)).get_span_context()
            assert span_context == expected, value
            assert trace.get_current_span(context).get_span_context() == expected
            assert isinstance(context, Context)


def test_set_attributes_is_safe_from_threads():
    tp, _ = provider()
    span = ServerSpans(tp.get_tracer("x")).start("GET", None, None, {})

    def fill(prefix: str) -> None:
        for i in range(200):
            set_attributes(span, {f"{prefix}{i}": i})

    threads = [threading.Thread(target=fill, args=(p,)) for p in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(span.attributes) == 128  # the SDK's default limit: the oldest make room, as in the SDK
    assert type(span._attributes) is BoundedAttributes and type(span._events) is BoundedList
