"""``spans``: request records from legacy logs become OTLP spans, so uninstrumented services show
waterfalls in Tempo.

A record with a trace ID, a timestamp and a duration (``DurationMs``...) becomes a SERVER span: its
ID is the record's span ID, its parent the line's ``ParentId`` (or B3/Jaeger parent), its end the
line's timestamp (logs are written when a request completes; ``timestamp_marks: start`` says
otherwise). Each ``LatencyBreakdown`` component becomes a child span, laid end to end from the
request's start. Every ID and time comes from the line itself, so a second run over the same line
sends identical spans, and a receiver deduplicates them.

This is a sink, not a processor: spans are shipped, and a shipped batch must be acknowledged
before the positions advance, like any other sink's. Records without what a span needs are
acknowledged and counted in ``obsbox_bridge_spans_skipped_total{reason}``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from obsbox import __version__, conventions, logfields
from obsbox.exporters.bridge.record import Record
from obsbox.exporters.bridge.sinks.http import Response
from obsbox.exporters.bridge.sinks.otlp import SCOPE_NAME, OtlpConfig, OtlpHttpSink, ResourceKey
from obsbox.logfields import lookup, number
from obsbox.logrules import stage_name

SCOPE = InstrumentationScope(name=SCOPE_NAME, version=__version__)


def string_attr(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


DEFAULT_ATTRIBUTES = {
    "http.route": ["Route", "route", "http.route", "Path", "path"],
    "http.request.method": ["Method", "method", "http.method", "http.request.method"],
    "http.response.status_code": ["StatusCode", "status_code", "status", "http.status_code"],
    "gen_ai.request.model": ["Model", "model", "gen_ai.request.model"],
}
INT_ATTRIBUTES = {"http.response.status_code"}


@dataclass
class SpansConfig(OtlpConfig):
    duration_fields: list[str] = field(
        default_factory=lambda: ["DurationMs", "duration_ms", "ElapsedMs", "elapsed_ms", "LatencyMs", "latency_ms"]
    )
    name_fields: list[str] = field(
        default_factory=lambda: ["Route", "route", "http.route", "Operation", "operation", "Path", "path"]
    )
    breakdown_field: str | None = "LatencyBreakdown"
    timestamp_marks: Literal["end", "start"] = "end"
    attributes: dict[str, list[str]] = field(default_factory=lambda: dict(DEFAULT_ATTRIBUTES))


SPAN_SOURCE = "obsbox.span.source"


def child_span_id(parent: bytes, stage: str) -> bytes:
    """A breakdown child's ID: derived from its parent and stage, so it is the same on every run."""
    digest = hashlib.blake2b(parent + stage.encode(), digest_size=8, person=b"obsbox-stage").digest()
    return digest if any(digest) else b"\x00" * 7 + b"\x01"


class SpansSink(OtlpHttpSink):
    type = "spans"
    url_option = "endpoint"  # --to spans:ENDPOINT
    Config = SpansConfig
    signal = "traces"

    def __init__(self, config: SpansConfig, context) -> None:
        super().__init__(config, context)
        # spans derived from log lines share service and span names with the SDK's own spans: this
        # resource attribute keeps their span metrics apart (collector spanmetrics, Tempo's generator)
        self.resource_attrs = {SPAN_SOURCE: "logs", **self.resource_attrs}
        self.skipped = context.telemetry.counter(
            conventions.BRIDGE_SPANS_SKIPPED,
            "Records the spans sink could not turn into a span, by reason.",
            ["reason"],
        )

    def resource(self, key: ResourceKey) -> Resource:
        return Resource(attributes=[string_attr(k, v) for k, v in self.resource_attributes(key).items()])

    def _first(self, fields: dict[str, Any], selectors: list[str]) -> Any:
        for selector in selectors:
            value = lookup(fields, selector)
            if value is not None and value != "":
                return value
        return None

    def items(self, rec: Record, now: int) -> list[Span]:
        fields = rec.fields
        if fields is None or not rec.trace_id or not rec.span_id:
            self.skipped.labels("not_json").inc()
            return []
        duration_ms = number(self._first(fields, self.config.duration_fields))
        if duration_ms is None or duration_ms < 0:
            self.skipped.labels("no_duration").inc()
            return []
        stamp = rec.time_ns()
        if stamp is None:
            self.skipped.labels("no_timestamp").inc()
            return []
        duration = int(duration_ms * 1_000_000)
        start = stamp - duration if self.config.timestamp_marks == "end" else stamp
        trace_id, span_id = bytes.fromhex(rec.trace_id), bytes.fromhex(rec.span_id)
        request = Span(
            trace_id=trace_id,
            span_id=span_id,
            name=self._name(fields),
            kind=Span.SPAN_KIND_SERVER,
            start_time_unix_nano=start,
            end_time_unix_nano=start + duration,
            attributes=self._attributes(fields, rec),
            status=self._status(fields),
        )
        if rec.parent_span_id:
            request.parent_span_id = bytes.fromhex(rec.parent_span_id)
        return [request, *self._children(fields, trace_id, span_id, start)]

    def _name(self, fields: dict[str, Any]) -> str:
        target = self._first(fields, self.config.name_fields)
        method = self._first(fields, DEFAULT_ATTRIBUTES["http.request.method"])
        if isinstance(target, str) and target:
            return f"{method} {target}" if isinstance(method, str) and method else target
        return logfields.message(fields) or "request"

    def _attributes(self, fields: dict[str, Any], rec: Record) -> list[KeyValue]:
        attrs = [string_attr("log.file.path", rec.origin.path)]
        for key, selectors in self.config.attributes.items():
            value = self._first(fields, selectors)
            if value is None:
                continue
            if key in INT_ATTRIBUTES and (code := number(value)) is not None:
                attrs.append(KeyValue(key=key, value=AnyValue(int_value=int(code))))
            else:
                attrs.append(string_attr(key, str(value)))
        return attrs

    def _status(self, fields: dict[str, Any]) -> Status:
        code = number(self._first(fields, DEFAULT_ATTRIBUTES["http.response.status_code"]))
        if (code is not None and code >= 500) or logfields.severity(fields)[0] >= 17:
            return Status(code=Status.STATUS_CODE_ERROR, message=logfields.message(fields) or "")
        return Status()

    def _children(self, fields: dict[str, Any], trace_id: bytes, parent: bytes, start: int) -> list[Span]:
        breakdown = fields.get(self.config.breakdown_field) if self.config.breakdown_field else None
        if not isinstance(breakdown, dict):
            return []
        children, cursor = [], start
        for key, value in breakdown.items():
            stage, ms = stage_name(key), number(value)
            if stage is None or ms is None or ms < 0:
                continue
            end = cursor + int(ms * 1_000_000)
            children.append(
                Span(
                    trace_id=trace_id,
                    span_id=child_span_id(parent, stage),
                    parent_span_id=parent,
                    name=stage,
                    kind=Span.SPAN_KIND_INTERNAL,
                    start_time_unix_nano=cursor,
                    end_time_unix_nano=end,
                    attributes=[string_attr("obsbox.stage", stage)],
                )
            )
            cursor = end
        return children

    def body(self, by_service: dict[ResourceKey, list[Span]]) -> bytes:
        request = ExportTraceServiceRequest()
        for key, spans in by_service.items():
            scope_spans = [ScopeSpans(scope=SCOPE, spans=spans)]
            request.resource_spans.append(ResourceSpans(resource=self.resource(key), scope_spans=scope_spans))
        return request.SerializeToString()

    def accepted(self, response: Response, records: Sequence[Record]) -> None:
        if response.body and "protobuf" in response.headers.get("content-type", ""):
            partial = ExportTraceServiceResponse.FromString(response.body).partial_success
            self.rejected(partial.rejected_spans, partial.error_message, records, response.status)
