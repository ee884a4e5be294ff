"""``trace``: give every record a W3C trace ID and span ID, and inject them into the line.

An ID the line already carries wins, in any legacy form (see ``traceforms``); without one, an ID in
the JSON object a message field holds as a string (``inner``: journald's ``MESSAGE``, an app's
``message``). Otherwise the IDs are derived, deterministically: the trace ID from the first
configured correlation key the line has (``request_id``, ``session_id``...), else from the line's
identity (file fingerprint + byte offset); the span ID always from the line's identity. Two runs over
the same file therefore give the same IDs, which makes duplicates after a crash recognisable.

Injection appends the two fields to the line's bytes (as ``key=value`` pairs to a logfmt line), so
every original field stays exactly as it was (number formats, key order, escapes); an ID field the line
already has with another value stays, and the bridge's goes beside it as ``obsbox.<field>``.
Threading: pipeline thread only; the key caches are per instance.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from obsbox.exporters.bridge import logfmt
from obsbox.exporters.bridge.component import Processor
from obsbox.exporters.bridge.logfmt import LogfmtFields
from obsbox.exporters.bridge.processors import traceforms
from obsbox.exporters.bridge.processors.inner import inner_object
from obsbox.exporters.bridge.processors.parse import exact_json
from obsbox.exporters.bridge.record import Record

OWN_PREFIX = "obsbox."  # the bridge's ID beside an app's own field of the configured name
_CACHE_LIMIT = 50_000
_PLAN_LIMIT = 4096
_STRONG = frozenset({"traceparent", "traceid", "activityid"})  # found at top level: no need to look deeper
_BREADTH = 16  # elements of a list searched below the top level
_LEVEL = 256  # objects searched per level: a bound for lines that are mostly data
# Per key shape: (raw key, normalized key) of its ID keys; whether nested objects are searched; the
# forms its keys trigger, by priority (when not nested; else found per line).
Plan = tuple[tuple[tuple[str, str], ...], bool, tuple[int, ...]]


@dataclass
class TraceConfig:
    trace_id_field: str = "trace_id"
    span_id_field: str = "span_id"
    correlation_keys: list[str] = field(default_factory=list)
    forms: list[str] = field(default_factory=lambda: list(traceforms.FORMS))
    inject: bool = True
    max_depth: int = 4
    request_id_correlation: bool = True  # x-request-id, in any spelling, derives the trace ID (TRACE_IDS.md)

    def __post_init__(self) -> None:
        unknown = [f for f in self.forms if f not in traceforms.FORMS]
        if unknown:
            raise ValueError(f"unknown trace forms {unknown} (known: {', '.join(traceforms.FORMS)})")
        if self.trace_id_field == self.span_id_field:
            raise ValueError("trace_id_field and span_id_field must differ")


# Keyed once; ``copy()`` of a started hash is cheaper than a new personalised one per line.
_TRACE_HASH = hashlib.blake2b(digest_size=16, person=b"obsbox-trace")
_SPAN_HASH = hashlib.blake2b(digest_size=8, person=b"obsbox-span")


def line_ids(origin_key: bytes, offset: int, part: int = 0) -> tuple[str, str]:
    """The IDs of a line derived from its identity: (trace ID, span ID).

    ``part`` tells apart the records expanded from one line (an OTLP/JSON export line holds many):
    the identity gains a 4-byte big-endian index; part 0 is the line itself.
    """
    identity = _identity(origin_key, offset, part)
    trace = _TRACE_HASH.copy()
    trace.update(identity)
    return nonzero_id(trace.hexdigest()), line_span_id(origin_key, offset, identity)


def _identity(origin_key: bytes, offset: int, part: int) -> bytes:
    identity = origin_key + offset.to_bytes(8, "big")
    return identity + part.to_bytes(4, "big") if part else identity


def line_span_id(origin_key: bytes, offset: int, identity: bytes | None = None, part: int = 0) -> str:
    """The line's own span ID: blake2b-64 of (file fingerprint digest, 8-byte big-endian offset[,
    4-byte big-endian part])."""
    span = _SPAN_HASH.copy()
    span.update(identity or _identity(origin_key, offset, part))
    return nonzero_id(span.hexdigest())


def file_hashes(origin_key: bytes) -> tuple[Any, Any]:
    """The trace and span hashes with a file's key absorbed: copied, with a line's 8-byte big-endian
    offset added, they give that line's derived IDs (``line_ids``), without joining the two per line."""
    trace, span = _TRACE_HASH.copy(), _SPAN_HASH.copy()
    trace.update(origin_key)
    span.update(origin_key)
    return trace, span


def correlation_trace_id(value: str) -> str:
    """The trace ID shared by every line with the same correlation value."""
    return nonzero_id(
        hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=16, person=b"obsbox-corr").hexdigest()
    )


def nonzero_id(text: str) -> str:
    """A digest as an ID: W3C forbids all zeros."""
    return text if traceforms.nonzero(text, len(text)) else text[:-1] + "1"


def _below(obj: dict, level: list[tuple[dict, str]]) -> None:
    """Queue ``obj``'s object values, and the objects in its list values, each with its key."""
    for key, value in obj.items():
        if type(value) is dict:
            level.append((value, key))
        elif type(value) is list:
            level.extend((item, key) for item in value[:_BREADTH] if type(item) is dict)


def _completed(ctx: traceforms.Context, found: dict[str, Any]) -> traceforms.Context:
    """Fill a span ID the form lacked from ``spanId``, else Elastic APM's ``transaction.id``; and a
    missing parent from .NET's ``ParentId``."""
    trace, span, parent = ctx
    if span is None and "spanid" in found:
        span = traceforms.hex_id(found["spanid"], 16)
    if span is None and "transactionid" in found:
        span = traceforms.hex_id(found["transactionid"], 16)
    if parent is None and "parentid" in found:
        parent = traceforms.parent_span(found["parentid"])
        parent = None if parent == span else parent  # Application Insights' ParentId named the span
    return (trace, span, parent)


class TraceProcessor(Processor):
    type = "trace"
    Config = TraceConfig

    def __init__(self, config: TraceConfig, context) -> None:
        super().__init__(config, context)
        self.forms = [(name, traceforms.FORMS[name]) for name in config.forms]
        # normalized key → indexes (priority order) of the enabled forms it can trigger
        self.key_forms: dict[str, tuple[int, ...]] = {}
        for index, name in enumerate(config.forms):
            for key in traceforms.TRIGGERS[name]:
                self.key_forms[key] = (*self.key_forms.get(key, ()), index)
        self.norm: dict[str, str] = {}  # raw key → normalized key, for every key seen
        self.id_spellings: set[str] = set()  # raw keys whose normalized form a trace form reads
        self.plans: dict[tuple[str, ...], Plan] = {}  # key shape → plan
        self.tf, self.sf = config.trace_id_field, config.span_id_field
        self.splice_trace = b',"' + orjson.dumps(self.tf)[1:-1] + b'":"'
        self.splice_span = b'","' + orjson.dumps(self.sf)[1:-1] + b'":"'
        self.correlation = [(key, tuple(key.split("."))) for key in config.correlation_keys]

    # ---------------------------------------------------------------- finding IDs

    def _learn(self, keys: Any) -> None:
        if len(self.norm) > _CACHE_LIMIT:
            self.norm.clear()
            self.id_spellings = {k for k in self.id_spellings if len(k) < 64}
        for key in keys:
            if key not in self.norm:
                normalized = traceforms.normalize_key(key)
                self.norm[key] = normalized
                if normalized in traceforms.KEYS:
                    self.id_spellings.add(key)

    def _found(self, fields: dict[str, Any]) -> tuple[dict[str, Any], tuple[int, ...]]:
        """The ID keys a line has (normalized → value), and the forms they can trigger, in order.

        Lines from one logger have the same keys in the same order: which keys a form reads, which
        forms those trigger, and whether nested objects must be searched is planned once per key
        shape."""
        shape = tuple(fields)
        plan = self.plans.get(shape)
        if plan is None:
            plan = self._plan(fields.keys(), shape)
        id_keys, nested, candidates = plan
        found = {normalized: fields[key] for key, normalized in id_keys}
        if nested:
            self._nested(fields, found)
            candidates = self._candidates(found)
        return found, candidates

    def _plan(self, keys: Any, shape: tuple[str, ...]) -> Plan:
        if not keys <= self.norm.keys():
            self._learn(keys)
        id_keys = tuple((key, self.norm[key]) for key in keys if key in self.id_spellings)
        nested = _STRONG.isdisjoint(normalized for _, normalized in id_keys)
        plan = (id_keys, nested, () if nested else self._candidates(normalized for _, normalized in id_keys))
        if len(self.plans) >= _PLAN_LIMIT:  # lines whose keys are data (maps keyed by IDs): start over
            self.plans.clear()
        self.plans[shape] = plan
        return plan

    def shape_reader(
        self, shape: tuple[str, ...], fields: dict[str, Any]
    ) -> tuple[Callable[[dict[str, Any]], traceforms.Context | None] | None, str]:
        """For the fused path: what reads the trace context of a line of this key shape whose ID
        keys are at top level and trigger one form, and that form's name; (None, "") when the
        shape's lines take ``trace_context`` (IDs that may be nested, several forms). The reader
        gives None for a line it reads no ID from; ``trace_context`` decides that one."""
        id_keys, nested, candidates = self.plans.get(shape) or self._plan(fields.keys(), shape)
        if nested or len(candidates) != 1:
            return None, ""
        name, form = self.forms[candidates[0]]
        keys = {normalized: key for key, normalized in id_keys}
        if name == "activity_id" and "activityid" in keys and set(keys) <= {"activityid", "parentid"}:
            return traceforms.quick_activity(keys["activityid"], keys.get("parentid")), name
        completes = not {"spanid", "transactionid", "parentid"}.isdisjoint(keys)

        def read(fields: dict[str, Any]) -> traceforms.Context | None:
            found = {normalized: fields[key] for key, normalized in id_keys}
            ctx = form(found)
            if (
                ctx is not None
                and completes
                and (
                    (ctx[1] is None and ("spanid" in found or "transactionid" in found))
                    or (ctx[2] is None and "parentid" in found)
                )
            ):
                return _completed(ctx, found)
            return ctx

        return read, name

    def _candidates(self, found: Any) -> tuple[int, ...]:
        """The enabled forms the normalized keys in ``found`` can trigger, by priority."""
        key_forms = self.key_forms
        return tuple(sorted({index for key in found for index in key_forms.get(key, ())}))

    def _read_forms(self, found: dict[str, Any], candidates: tuple[int, ...]) -> tuple[traceforms.Context | None, str]:
        """The first enabled form, by priority, that reads a valid trace ID from ``found``."""
        for index in candidates:
            name, read = self.forms[index]
            ctx = read(found)
            if ctx is not None:
                return ctx, name
        return None, "derived_line"

    def _nested(self, fields: dict[str, Any], found: dict[str, Any]) -> None:
        """Breadth-first through nested objects and lists of objects (.NET's ``Scopes``), at most
        ``_BREADTH`` elements of a list and ``_LEVEL`` objects of a level; a shallower key wins over a
        deeper one."""
        level: list[tuple[dict, str]] = []
        _below(fields, level)
        keys = traceforms.KEYS
        for _ in range(self.config.max_depth):
            if not level:
                return
            below: list[tuple[dict, str]] = []
            for obj, parent in level[:_LEVEL]:
                prefix = self.norm.get(parent) or traceforms.normalize_key(parent)
                for key, value in obj.items():
                    name = self.norm.get(key) or traceforms.normalize_key(key)
                    if prefix + name in keys or name in keys:
                        # a header logged as Go's http.Header holds it, {"Traceparent": ["00-..."]}: its one value
                        item = value[0] if type(value) is list and len(value) == 1 else value
                        found.setdefault(prefix + name if prefix + name in keys else name, item)
                _below(obj, below)
            level = below

    def _beyond_forms(
        self, raw: bytes, fields: dict[str, Any], found: dict[str, Any]
    ) -> tuple[traceforms.Context | None, str, dict[str, Any], dict[str, Any], dict[str, Any] | None]:
        """After the forms found nothing: an exact re-read, an X-Ray header, then the object a message
        field holds as a string. Also the keys found (outer first), the line's object (the exact
        re-read when there was one) and the inner one."""
        ctx, source, found, fields = self._exact_or_xray(fields, raw, found)
        inner: dict[str, Any] | None = None
        if ctx is None and (wrapped := inner_object(fields)) is not None:
            inner, text = wrapped
            inner_found, candidates = self._found(inner)
            ctx, source = self._read_forms(inner_found, candidates) if candidates else (None, source)
            if ctx is None:
                ctx, source, inner_found, inner = self._exact_or_xray(inner, text, inner_found)
            if ctx is not None or not found:
                found = inner_found
            elif inner_found:
                found = {**inner_found, **found}  # x-request-id and the span keys: the outer's first
        return ctx, source, found, fields, inner

    def _exact_or_xray(
        self, fields: dict[str, Any], text: bytes | str, found: dict[str, Any]
    ) -> tuple[traceforms.Context | None, str, dict[str, Any], dict[str, Any]]:
        """The forms again over an exact reading when an ID value came back a float, else an X-Ray
        header in any value; with the keys found and the object (the exact one when read again)."""
        ctx, source = None, "derived_line"
        if float in map(type, found.values()) and (exact := exact_json(text)):
            # an integer ID above 2**64 (the OTel SDK's 128-bit trace_id), which orjson read as a
            # float: read again, exactly; only lines whose forms found nothing pay for this
            fields = exact
            found, candidates = self._found(fields)
            ctx, source = self._read_forms(found, candidates)
        if ctx is None and (b"Root=1-" in text if isinstance(text, bytes) else "Root=1-" in text):
            ctx = traceforms.xray_in(fields, self.config.max_depth + 1, _BREADTH, _LEVEL)
            source = "xray_value" if ctx else source
        return ctx, source, found, fields

    def _request_id(self, found: dict[str, Any]) -> str | None:
        """``x-request-id``, else Kubernetes' ``auditID``: values that name one request."""
        if not self.config.request_id_correlation:
            return None
        for key in traceforms.CORRELATION_HEADERS:
            value = found.get(key)
            if isinstance(value, str) and value.strip():
                return value
        return None

    def _correlation(self, fields: dict[str, Any]) -> str | None:
        for key, path in self.correlation:
            value = fields.get(key)
            if value is None and len(path) > 1:
                value = fields
                for part in path:
                    value = value.get(part) if isinstance(value, dict) else None
            if isinstance(value, str | int | float) and not isinstance(value, bool) and value != "":
                return str(value)
        return None

    def trace_context(
        self, raw: bytes, fields: dict[str, Any]
    ) -> tuple[traceforms.Context | None, str, dict[str, Any]]:
        """The line's trace context and where it came from, in priority order: a form over the keys
        found, an X-Ray header in any value, the same two in a JSON object a message field holds as a
        string (``inner``), a configured correlation key, ``x-request-id`` (each: outer, then inner).
        Also the line's object: ``fields``, or its exact re-read when an ID needed one."""
        found, candidates = self._found(fields)
        ctx, source = self._read_forms(found, candidates) if candidates else (None, "derived_line")
        inner: dict[str, Any] | None = None
        if ctx is None:  # the rest is for lines without a form's ID: a line with one pays nothing more
            ctx, source, found, fields, inner = self._beyond_forms(raw, fields, found)
        if ctx is None and self.correlation:
            value = self._correlation(fields)
            if value is None and inner is not None:
                value = self._correlation(inner)
            if value is not None:
                ctx, source = (correlation_trace_id(value), None, None), "derived_key"
        if ctx is None and found and (value := self._request_id(found)) is not None:
            ctx, source = (correlation_trace_id(value), None, None), "derived_key"
        if ctx is not None and (
            (ctx[1] is None and ("spanid" in found or "transactionid" in found))
            or (ctx[2] is None and "parentid" in found)
        ):
            ctx = _completed(ctx, found)
        return ctx, source, fields

    # ---------------------------------------------------------------- the batch

    def process(self, records: list[Record]) -> list[Record]:
        sources: list[str] = []
        found_in = sources.append
        inject, enriched = self.config.inject, self.enriched
        for rec in records:
            fields = rec.fields
            ctx, source = None, "derived_line"
            if fields is not None:
                ctx, source, own = self.trace_context(rec.raw, fields)
                if own is not fields:
                    rec.fields = own
            part = 0 if type(rec) is Record else getattr(rec, "part", 0)
            if ctx is None:
                rec.trace_id, rec.span_id = line_ids(rec.origin.key, rec.offset, part)
            else:
                rec.trace_id, rec.span_id, rec.parent_span_id = ctx
                if rec.span_id is None:
                    rec.span_id = line_span_id(rec.origin.key, rec.offset, part=part)
            found_in(source)
            if inject and fields is not None:
                rec.injector = enriched
        for source, count in Counter(sources).items():
            self.context.metrics.trace_ids.labels(source).inc(count)
        return records

    def enriched(self, rec: Record) -> bytes | None:
        """The line with the IDs appended to its own bytes (None: it already carries them as they are).

        No byte of the line changes: an ID field the line already has with another value (Kong's
        object, uppercase hex, a number) is kept as it is, and the bridge's ID is appended beside it
        under ``obsbox.<field>`` (TRACE_IDS.md, "The app's own ID fields"). Called on first use, by
        sinks that write lines; ``rec.fields`` is read then, so a redacted line gives a redacted result.
        """
        fields, trace_id, span_id = rec.fields, rec.trace_id, rec.span_id
        if fields is None or trace_id is None or span_id is None:
            return None  # not a JSON object nor logfmt: written as it is (the injector is set for those only)
        return self.enriched_line(rec.raw, fields, trace_id, span_id)

    def enriched_line(self, raw: bytes, fields: dict[str, Any], trace_id: str, span_id: str) -> bytes | None:
        """``raw`` with the IDs appended (see ``enriched``), from its parsed ``fields``."""
        tf, sf = self.tf, self.sf
        if type(fields) is LogfmtFields:  # pairs appended as pairs; the same rule for the app's own
            pairs = self._beside(fields, ((tf, trace_id), (sf, span_id)))
            return logfmt.appended(raw, pairs) if pairs else None
        end = raw.rfind(b"}")
        if tf not in fields and sf not in fields:
            return b"".join(
                (
                    raw[:end],
                    self.splice_trace if fields else self.splice_trace[1:],
                    trace_id.encode(),
                    self.splice_span,
                    span_id.encode(),
                    b'"',
                    raw[end:],
                )
            )
        added = [
            orjson.dumps(name) + b":" + orjson.dumps(value)
            for name, value in self._beside(fields, ((tf, trace_id), (sf, span_id)))
        ]
        return b"".join((raw[:end], b",", b",".join(added), raw[end:])) if added else None

    @staticmethod
    def _beside(fields: dict[str, Any], ids: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
        """The (name, ID) pairs to append: under the configured name when the line lacks it, under
        ``obsbox.<name>`` when the line holds another value there; none when it holds the ID."""
        pairs = []
        for name, value in ids:
            if name not in fields:
                pairs.append((name, value))
            elif fields[name] != value and OWN_PREFIX + name not in fields:
                pairs.append((OWN_PREFIX + name, value))  # with both taken, the line stays as it is
        return pairs
