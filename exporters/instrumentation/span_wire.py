"""OTLP protobuf wire encoding of SDK spans, written directly as bytes.

The SDK's encoder (``encode_spans`` from ``opentelemetry-exporter-otlp-proto-common``, then
``SerializeToString``) builds a protobuf ``Span`` and a ``KeyValue`` plus an ``AnyValue`` per
attribute in Python, then serializes them: 24-27 µs per span of the middleware's shape. This
encoder writes the same ``ExportTraceServiceRequest`` as bytes, in field-number order (about 3 µs
a span), and encodes what repeats once: the ``Resource`` and ``InstrumentationScope`` fragments,
the attribute keys, and str and int attributes seen before. The layout follows
opentelemetry/proto/trace/v1/trace.proto and common/v1/common.proto; the tests decode every
request with the official ``opentelemetry-proto`` messages and compare it, field by field, with
what the SDK's encoder makes of the same spans.

What it writes is what the SDK's encoder writes, including its choices: ``flags`` carries the
"has is_remote" bit and the "is remote" bit of the parent (of the linked context, for links) and
not the W3C trace flags; a link's ``trace_state`` is not written; a status is always present; an
attribute the SDK could not encode (an int outside int64, a value of an unknown type, a string that
is not valid Unicode) is logged and left out, as the SDK does.
"""

from __future__ import annotations

import itertools
import logging
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, StatusCode
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

from obsbox.protowire import _SMALL, field, varint

_logger = logging.getLogger(__name__)

_DOUBLE = struct.Struct("<d").pack
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT64 = (1 << 64) - 1

# Span.flags (fixed32, field 16): SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, | IS_REMOTE when remote
_FLAGS_LOCAL = b"\x85\x01" + (0x100).to_bytes(4, "little")
_FLAGS_REMOTE = b"\x85\x01" + (0x300).to_bytes(4, "little")
# Span.Link.flags (fixed32, field 6)
_LINK_FLAGS_LOCAL = b"\x35" + (0x100).to_bytes(4, "little")
_LINK_FLAGS_REMOTE = b"\x35" + (0x300).to_bytes(4, "little")
_KINDS = [b"\x30" + _SMALL[kind + 1] for kind in range(5)]  # SDK SpanKind 0..4 -> proto SPAN_KIND_* 1..5
# Enum members looked up by id(): an Enum's ``value`` and its hash are Python-level calls
_KIND_BY_ID = {id(kind): _KINDS[kind.value] for kind in SpanKind}
_CODE_BY_ID = {id(code): code.value for code in StatusCode}

# Reading a span through its public properties costs more than encoding most of it: ``attributes``
# is a MappingProxyType over BoundedAttributes, whose items() is a Python generator (about 1 µs for
# 8 attributes), and ``events`` and ``links`` copy their lists into tuples even when empty. So the
# encoder reads an ended span's BoundedAttributes dict and its event and link lists directly when
# they are there (the SDK has kept these fields since 1.0), and the public properties otherwise.
_BOUNDED_DICT = type(getattr(BoundedAttributes(), "_dict", None)) is dict

# caches of encoded fragments keyed by id() keep a reference to the object, so an id is never reused
# while its entry lives; past this many entries a cache starts afresh (a leak guard, not a tuning knob)
_CACHE_LIMIT = 1024
_PAIR_MAX_CHARS = 256  # longer strings (a query, a prompt) are rarely repeated: not worth keeping
_BLOCK_MAX_BYTES = 2048  # a span's attributes encoded larger than this are not kept either


# (group id, encoded field, encoded schema_url field) of a resource or an instrumentation scope
Group = tuple[int, bytes, bytes]
# a span encoded on its own: its resource's group, its scope's group, its ScopeSpans.spans field
EncodedSpan = tuple[Group, Group, bytes]


class _Groups:
    """Resources or scopes: each one's encoded fields, kept by ``id()`` (the entry holds the object,
    so its id is not reused while it lives), and a group id shared by equal ones."""

    def __init__(self, group_ids: Iterator[int], encode: Callable[[Any], tuple[bytes, bytes]]) -> None:
        self.group_ids = group_ids
        self.encode = encode
        self.by_id: dict[int, tuple[Any, Group]] = {}  # id -> (object, (group id, field, schema field))
        self.groups: dict[Any, int] = {}  # object (by equality) -> group id

    def of(self, obj: Any) -> Group:
        """(group id, encoded field, encoded schema_url field) of ``obj``."""
        cached = self.by_id.get(id(obj))
        if cached is None:
            if len(self.by_id) >= _CACHE_LIMIT:
                self.by_id.clear()
                self.groups.clear()
            group = self.groups.get(obj)
            if group is None:
                group = self.groups[obj] = next(self.group_ids)
            cached = self.by_id[id(obj)] = (obj, (group, *self.encode(obj)))
        return cached[1]


class SpanEncoder:
    """Encodes SDK spans into an ``ExportTraceServiceRequest``, grouped by resource, then by
    instrumentation scope, in the order each first appears (as the SDK's encoder groups them).

    Not thread-safe: it keeps caches; its users call it under a lock of their own.
    """

    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}  # attribute key -> encoded KeyValue.key field
        self._pairs: dict[tuple[int, str, str | int], bytes] = {}  # (tag, key, str or int value) -> field
        self._blocks: dict[tuple[tuple[Any, ...], tuple[type, ...]], bytes] = {}  # a span's attributes -> fields
        group_ids = itertools.count()  # never reused, even across a cache reset within a batch
        # ResourceSpans.resource and schema_url fields; equal resources share one ResourceSpans
        self._resources = _Groups(group_ids, self._resource_fields)
        self._scopes = _Groups(group_ids, self._scope_fields)  # ScopeSpans.scope and schema_url fields

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        """The serialized request for ``spans``."""
        return self.assemble([self.piece(span) for span in spans])

    def piece(self, span: ReadableSpan) -> EncodedSpan:
        """One span encoded on its own, with its resource's and scope's fragments: what a processor
        can queue instead of the span object, for ``assemble`` to put into a request later."""
        return self._resources.of(span.resource), self._scopes.of(span.instrumentation_scope), self._span(span)

    @staticmethod
    def assemble(pieces: Iterable[EncodedSpan]) -> bytes:
        """The serialized request for spans encoded by ``piece``, grouped by resource, then by scope."""
        groups: dict[int, tuple[bytes, bytes, dict[int, tuple[bytes, bytes, list[bytes]]]]] = {}
        for (resource_group, resource_field, resource_schema), (scope_group, scope_field, scope_schema), span in pieces:
            group = groups.get(resource_group)
            if group is None:
                group = groups[resource_group] = (resource_field, resource_schema, {})
            scope_spans = group[2].get(scope_group)
            if scope_spans is None:
                scope_spans = group[2][scope_group] = (scope_field, scope_schema, [])
            scope_spans[2].append(span)
        out = []
        for resource_field, resource_schema, scope_groups in groups.values():
            scope_spans_fields = [
                field(0x12, scope_field + b"".join(encoded) + scope_schema)  # ResourceSpans.scope_spans (2)
                for scope_field, scope_schema, encoded in scope_groups.values()
            ]
            out.append(field(0x0A, resource_field + b"".join(scope_spans_fields) + resource_schema))
        return b"".join(out)  # ExportTraceServiceRequest.resource_spans (1), one per resource

    def _resource_fields(self, resource: Resource) -> tuple[bytes, bytes]:
        return (
            field(0x0A, self._attributes(resource.attributes, 0x0A)),  # ResourceSpans.resource (1)
            field(0x1A, resource.schema_url.encode()) if resource.schema_url else b"",  # schema_url (3)
        )

    def _scope_fields(self, scope: InstrumentationScope | None) -> tuple[bytes, bytes]:
        message = b""
        schema = b""
        if scope is not None:
            message = b"".join(
                (
                    field(0x0A, scope.name.encode()) if scope.name else b"",  # name (1)
                    field(0x12, scope.version.encode()) if scope.version else b"",  # version (2)
                    self._attributes(scope.attributes, 0x1A),  # attributes (3)
                )
            )
            schema = field(0x1A, scope.schema_url.encode()) if scope.schema_url else b""  # ScopeSpans.schema_url (3)
        return field(0x0A, message), schema  # ScopeSpans.scope (1), present even when empty

    def _span(self, span: ReadableSpan) -> bytes:
        """One Span, wrapped as a ScopeSpans.spans field (2)."""
        context: SpanContext = span.context
        parent = span.parent
        parts = [
            b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),  # trace_id (1)
            b"\x12\x08" + context.span_id.to_bytes(8, "big"),  # span_id (2)
        ]
        trace_state = context.trace_state
        if trace_state is not DEFAULT_TRACE_STATE and trace_state:  # len() of a TraceState is a Python call
            encoded_state = ",".join([f"{key}={value}" for key, value in trace_state.items()]).encode()
            parts.append(field(0x1A, encoded_state))  # trace_state (3)
        if parent is not None:
            parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))  # parent_span_id (4)
        name = span.name
        if name:
            parts.append(field(0x2A, name.encode()))  # name (5)
        kind = span.kind
        parts.append(_KIND_BY_ID.get(id(kind)) or _KINDS[kind.value])  # kind (6)
        start, end = span.start_time, span.end_time
        if start:
            parts.append(b"\x39" + start.to_bytes(8, "little"))  # start_time_unix_nano (7), fixed64
        if end:
            parts.append(b"\x41" + end.to_bytes(8, "little"))  # end_time_unix_nano (8), fixed64
        stored = getattr(span, "_attributes", None)
        attributes: Mapping[str, Any] | None
        if type(stored) is BoundedAttributes and _BOUNDED_DICT:  # see _BOUNDED_DICT
            attributes, dropped = stored._dict, stored.dropped
        else:
            attributes, dropped = span.attributes, span.dropped_attributes
        if attributes:
            parts.append(self._span_attributes(attributes))  # attributes (9)
        if dropped:
            parts.append(b"\x50" + varint(dropped))  # dropped_attributes_count (10)
        if getattr(span, "_events", True) or getattr(span, "_links", True):  # the properties copy even empty lists
            parts.append(self._events_and_links(span))
        status = span.status
        if status is not None:
            code = status.status_code
            value = _CODE_BY_ID.get(id(code))
            parts.append(_status(code.value if value is None else value, status.description))  # status (15)
        parts.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)  # flags (16)
        body = b"".join(parts)
        return b"\x12" + varint(len(body)) + body

    def _span_attributes(self, attributes: Mapping[str, Any]) -> bytes:
        """A span's attributes (9), from the cache when a span had the same ones before: the server
        spans of one route mostly do, and looking the whole set up costs a tenth of encoding it."""
        values = attributes.values()
        try:
            key = (tuple(attributes.items()), tuple(map(type, values)))  # types too: 1, 1.0 and True are equal
            encoded = self._blocks.get(key)
        except TypeError:  # an unhashable value (a list): encoded every time
            return self._attributes(attributes, 0x4A)
        if encoded is None:
            encoded = self._attributes(attributes, 0x4A)
            if len(encoded) <= _BLOCK_MAX_BYTES:
                if len(self._blocks) >= _CACHE_LIMIT:
                    self._blocks.clear()
                self._blocks[key] = encoded
        return encoded

    def _events_and_links(self, span: ReadableSpan) -> bytes:
        """Span.events (11), dropped_events_count (12), links (13), dropped_links_count (14)."""
        parts = [self._event(event) for event in span.events]
        if span.dropped_events:
            parts.append(b"\x60" + varint(span.dropped_events))
        parts.extend([self._link(link) for link in span.links])
        if span.dropped_links:
            parts.append(b"\x70" + varint(span.dropped_links))
        return b"".join(parts)

    def _event(self, event: Any) -> bytes:
        """A Span.Event, wrapped as a Span.events field (11)."""
        body = b"".join(
            (
                b"\x09" + event.timestamp.to_bytes(8, "little") if event.timestamp else b"",  # time_unix_nano (1)
                field(0x12, event.name.encode()) if event.name else b"",  # name (2)
                self._attributes(event.attributes, 0x1A) if event.attributes else b"",  # attributes (3)
                b"\x20" + varint(event.dropped_attributes) if event.dropped_attributes else b"",  # dropped (4)
            )
        )
        return field(0x5A, body)

    def _link(self, link: Link) -> bytes:
        """A Span.Link, wrapped as a Span.links field (13)."""
        context = link.context
        body = b"".join(
            (
                b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),  # trace_id (1)
                b"\x12\x08" + context.span_id.to_bytes(8, "big"),  # span_id (2)
                self._attributes(link.attributes, 0x22) if link.attributes else b"",  # attributes (4)
                b"\x28" + varint(link.dropped_attributes) if link.dropped_attributes else b"",  # dropped (5)
                _LINK_FLAGS_REMOTE if context.is_remote else _LINK_FLAGS_LOCAL,  # flags (6)
            )
        )
        return field(0x6A, body)

    def _attributes(self, attributes: Mapping[str, Any] | None, tag: int) -> bytes:
        """Every attribute as a KeyValue field with ``tag``; one the SDK could not encode is left out.

        Most values repeat from span to span (a method, a route, a status code): an int or short
        str attribute is encoded once per (tag, key, value) and then taken from the cache.
        """
        if not attributes:
            return b""
        pairs = self._pairs
        out = []
        for key, value in attributes.items():
            kind = type(value)
            if kind is int or (kind is str and len(value) <= _PAIR_MAX_CHARS):
                pair = (tag, key, value)
                encoded = pairs.get(pair)
                if encoded is None:
                    encoded = self._key_value(key, value, tag)
                    if encoded:
                        if len(pairs) >= _CACHE_LIMIT:
                            pairs.clear()
                        pairs[pair] = encoded
                out.append(encoded)
            else:
                out.append(self._key_value(key, value, tag))
        return b"".join(out)

    def _key_value(self, key: str, value: Any, tag: int) -> bytes:
        """One KeyValue field with ``tag``, or nothing (logged) when the SDK could not encode it either."""
        encoded_key = self._keys.get(key)
        if encoded_key is None:
            if len(self._keys) >= _CACHE_LIMIT:
                self._keys.clear()
            encoded_key = self._keys[key] = field(0x0A, key.encode())  # KeyValue.key (1)
        try:
            kv = encoded_key + field(0x12, _any_value(value))  # KeyValue.value (2)
        except Exception as error:  # as the SDK's encoder: log, leave the attribute out, go on
            _logger.exception("Failed to encode key %s: %s", key, error)
            return b""
        return _SMALL[tag] + varint(len(kv)) + kv


def _status(code: int, description: str | None) -> bytes:
    """A Span.status field (15): present even for an UNSET status without a message, as the SDK writes it."""
    if not code and not description:
        return b"\x7a\x00"
    message = field(0x12, description.encode()) if description else b""  # message (2)
    return field(0x7A, message + (b"\x18" + _SMALL[code] if code else b""))  # code (3)


def _string_value(value: str) -> bytes:
    return field(0x0A, value.encode())  # string_value (1)


def _bool_value(value: bool) -> bytes:
    return b"\x10\x01" if value else b"\x10\x00"  # bool_value (2)


def _int_value(value: int) -> bytes:
    """int_value (3): an int64 varint, a negative one as its 64-bit two's complement (10 bytes)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"Value out of range: {value}")
    return b"\x18" + varint(value & _UINT64)


def _double_value(value: float) -> bytes:
    return b"\x21" + _DOUBLE(value)  # double_value (4), fixed64


def _array_value(values: Sequence[Any]) -> bytes:
    return field(0x2A, b"".join([field(0x0A, _any_value(item)) for item in values]))  # array_value (5): values (1)


def _kvlist_value(values: Mapping[Any, Any]) -> bytes:
    pairs = [
        field(0x0A, field(0x0A, str(key).encode()) + field(0x12, _any_value(item))) for key, item in values.items()
    ]
    return field(0x32, b"".join(pairs))  # kvlist_value (6): values (1), each a KeyValue


def _bytes_value(value: bytes) -> bytes:
    return field(0x3A, value)  # bytes_value (7)


def _no_value(value: None) -> bytes:
    return b""  # an AnyValue with no value set


# the common exact types first; otherwise isinstance in the SDK's order (a bool is an int, a str a sequence)
_BY_TYPE: dict[type, Callable[[Any], bytes]] = {
    str: _string_value,
    int: _int_value,
    float: _double_value,
    bool: _bool_value,
    bytes: _bytes_value,
    list: _array_value,
    tuple: _array_value,
    type(None): _no_value,
}
_BY_INSTANCE: tuple[tuple[type, Callable[[Any], bytes]], ...] = (
    (bool, _bool_value),
    (str, _string_value),
    (int, _int_value),
    (float, _double_value),
    (bytes, _bytes_value),
    (Sequence, _array_value),
    (Mapping, _kvlist_value),
)


def _any_value(value: Any) -> bytes:
    """The body of an AnyValue for an attribute value, as the SDK's ``_encode_value`` makes it."""
    encode = _BY_TYPE.get(type(value))
    if encode is not None:
        return encode(value)
    for kind, encode in _BY_INSTANCE:
        if isinstance(value, kind):
            return encode(value)
    raise TypeError(f"Invalid type {type(value)} of value {value}")
