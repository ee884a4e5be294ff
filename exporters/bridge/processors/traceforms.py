"""Legacy trace-context forms, each read into W3C IDs (32 / 16 lowercase hex, never all zeros).

A line's keys are matched case- and punctuation-insensitively (``X-B3-TraceId``, ``x_b3_traceid``
and ``xB3TraceId`` are one key), at top level or nested (``{"trace": {"id": ...}}`` is ECS's
``trace.id``; ``{"dd": {"trace_id": ...}}`` is Datadog's ``dd.trace_id``). Every value is
validated; a malformed one is ignored, so the next form, or derivation, takes over.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

_HEX = re.compile(r"[0-9a-f]+")
_ZEROS = {16: "0" * 16, 32: "0" * 32}
_GUID = re.compile(r"\{?([0-9a-f]{8})-?([0-9a-f]{4})-?([0-9a-f]{4})-?([0-9a-f]{4})-?([0-9a-f]{12})\}?")
# Lowercase only, as the W3C Trace Context spec requires; a version other than 00 may carry more
# fields after the flags (the spec's rule for future versions), version 00 may not.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_HIERARCHICAL = re.compile(r"\|([0-9a-f]{32})\.(?:([0-9a-f]{16})[._])?.*")
_XRAY_ID = re.compile(r"1-([0-9a-f]{8})-([0-9a-f]{24})")
_GCP_TRACE = re.compile(r"(?:projects/[^/]+/traces/)?([0-9a-f]{32})")
_CLOUD_TRACE = re.compile(r"([0-9a-f]{32})(?:/([0-9]+))?(?:;o=[0-9]+)?")
_U64 = 1 << 64
_INT_ID = 1 << 32  # the smallest integer read as a hex ID's value


# Request headers an access log may keep as fields, and the prefixes proxies put before them:
# Traefik ``request_<Header>`` (accessLog.fields.headers), nginx ``$http_<header>`` variables.
HEADERS = (
    "traceparent",
    "b3",
    "xb3traceid",
    "xb3spanid",
    "xb3parentspanid",
    "ubertraceid",
    "xamzntraceid",
    "xdatadogtraceid",
    "xdatadogparentid",
    "xrequestid",
    "xcloudtracecontext",
    "auditid",
)
HEADER_PREFIXES = ("request", "http", "header")
HEADER_ALIASES = {prefix + header: header for prefix in HEADER_PREFIXES for header in HEADERS}

# What a form found: (trace ID, span ID or None, parent span ID or None). A plain tuple: this is built
# for every line, and a NamedTuple costs several times more.
Context = tuple[str, str | None, str | None]


def normalize_key(key: str) -> str:
    """``X-B3-TraceId`` → ``xb3traceid``: the spelling-independent name of a key.

    A request header kept as a field under a prefix (Traefik's ``request_Traceparent``, nginx's
    ``http_traceparent``) is the header itself; see ``HEADER_ALIASES``.
    """
    name = key.lower().replace("-", "").replace("_", "").replace(".", "").replace(" ", "")
    return HEADER_ALIASES.get(name, name)


def hex_id(value: Any, width: int) -> str | None:
    """A hex ID of up to ``width`` digits, left-padded with zeros (64-bit trace IDs become 128-bit).

    Python's ``hex()`` output (``0x``, no padding) counts; so does a JSON integer from ``2**32`` to
    ``2**(4*width)`` (the OTel SDK's ``trace_id``/``span_id`` logged as they are; a smaller one is a
    count, not a random ID: see TRACE_IDS.md)."""
    if type(value) is int:
        return format(value, f"0{width}x") if _INT_ID <= value < 1 << (4 * width) else None
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if not 0 < len(text) <= width or not _HEX.fullmatch(text):
        return None
    text = text.rjust(width, "0")
    return None if text == _ZEROS[width] else text


def hex_bytes(text: str, size: int) -> str | None:
    """``text`` in lowercase when it is exactly ``size`` nonzero bytes of hex, else None; at C speed:
    ``bytes.fromhex`` rejects any other character but skips whitespace, which the lengths give away."""
    text = text.lower()
    if len(text) != 2 * size or text == _ZEROS[2 * size]:
        return None
    try:
        return text if len(bytes.fromhex(text)) == size else None
    except ValueError:
        return None


def trace_hex(value: Any) -> str | None:
    """A trace ID in plain hex (32 or 16 digits) or as a GUID."""
    if type(value) is str and len(value) == 36 and value[8] == "-" and value[23] == "-":  # the common GUID
        return hex_bytes(value.replace("-", ""), 16)
    if isinstance(value, str) and len(value) > 32 and value[1:2] not in ("x", "X"):
        guid = _GUID.fullmatch(value.strip().lower())
        return nonzero("".join(guid.groups()), 32) if guid else None
    return hex_id(value, 32)


def nonzero(text: str, width: int) -> str | None:
    return None if text == _ZEROS[width] else text


def decimal_u64(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and 0 < value < _U64:
        return value
    return None


# ---------------------------------------------------------------- the forms


def traceparent(value: Any) -> Context | None:
    """W3C ``traceparent``: ``00-<32hex trace>-<16hex span>-<flags>``.

    One the spec calls invalid (uppercase hex, version ff, more fields after version 00's flags,
    wrong lengths, an all-zero ID) is ignored: a receiver following the spec started a new trace."""
    if not isinstance(value, str):
        return None
    m = _TRACEPARENT.fullmatch(value.strip())
    if not m or m.group(1) == "ff" or (m.group(5) is not None and m.group(1) == "00"):
        return None
    trace, span = nonzero(m.group(2), 32), nonzero(m.group(3), 16)
    return (trace, span, None) if trace and span else None


def request_id(value: Any) -> Context | None:
    """.NET hierarchical ``Request-Id``: ``|<32hex>.<16hex>.`` (the span part may be absent)."""
    if not isinstance(value, str):
        return None
    m = _HIERARCHICAL.fullmatch(value.strip().lower())
    if not m or not nonzero(m.group(1), 32):
        return None
    return (m.group(1), hex_id(m.group(2), 16) if m.group(2) else None, None)


def activity_id(value: Any) -> Context | None:
    """.NET ``ActivityId``: a GUID (EventSource), or a W3C or hierarchical Activity.Id."""
    if type(value) is str and len(value) == 36 and value[8] == "-":  # the usual GUID, without detours
        trace = trace_hex(value)
        return (trace, None, None) if trace else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.startswith("|"):
        return request_id(text)
    if len(text) >= 55 and text[2:3] == "-":
        return traceparent(text)
    trace = trace_hex(text) if len(text) >= 32 else None
    return (trace, None, None) if trace else None


def parent_span(value: Any) -> str | None:
    """.NET ``ParentId``: a W3C traceparent, a hierarchical ID, or a bare 16-hex span ID."""
    if type(value) is str and len(value) == 16:  # the usual bare span ID
        return hex_bytes(value, 8)
    found = activity_id(value) if isinstance(value, str) and len(value) > 16 else None
    if found is not None:
        return found[1]
    return hex_id(value, 16) if isinstance(value, str) and len(value.strip()) == 16 else None


def b3_single(value: Any) -> Context | None:
    """Zipkin single ``b3`` header: ``{trace}-{span}[-{sampled}[-{parent}]]``."""
    if not isinstance(value, str):
        return None
    parts = value.strip().lower().split("-")
    if len(parts) < 2:
        return None  # "0", "1", "d": a sampling decision only
    trace, span = hex_id(parts[0], 32), hex_id(parts[1], 16)
    if not trace or not span or len(parts[0]) not in (16, 32) or len(parts[1]) != 16:
        return None
    parent = hex_id(parts[3], 16) if len(parts) > 3 else None
    return (trace, span, parent)


def uber_trace_id(value: Any) -> Context | None:
    """Jaeger ``uber-trace-id``: ``{trace}:{span}:{parent}:{flags}`` (also URL-encoded)."""
    if not isinstance(value, str):
        return None
    parts = value.strip().lower().replace("%3a", ":").split(":")
    if len(parts) != 4:
        return None
    trace, span = hex_id(parts[0], 32), hex_id(parts[1], 16)
    if not trace or not span:
        return None
    return (trace, span, hex_id(parts[2], 16))


def xray(value: Any) -> Context | None:
    """AWS X-Ray: ``Root=1-<8hex>-<24hex>;Parent=<16hex>;Sampled=1`` or a bare ``1-<8hex>-<24hex>``.

    As in the OTel X-Ray propagator, ``Parent`` is the span context the line was logged in.
    """
    if not isinstance(value, str):
        return None
    fields = {}
    for part in value.strip().split(";"):
        key, _, item = part.partition("=")
        fields[key.strip().lower()] = item.strip().lower()
    root = fields.get("root") if "root" in fields else value.strip().lower()
    m = _XRAY_ID.fullmatch(root or "")
    if not m:
        return None
    trace = nonzero(m.group(1) + m.group(2), 32)
    return (trace, hex_id(fields.get("parent"), 16), None) if trace else None


def datadog(trace_value: Any, span_value: Any) -> Context | None:
    """Datadog ``dd.trace_id`` / ``dd.span_id``: decimal 64-bit, the low half of the W3C trace ID
    (the OTel-Datadog mapping). A 32-hex ``dd.trace_id`` (128-bit mode) is taken as it is."""
    low = decimal_u64(trace_value)
    trace: str | None
    if low is not None:
        trace = format(low, "032x")
    elif isinstance(trace_value, str) and len(trace_value.strip()) == 32:
        trace = hex_id(trace_value, 32)
    else:
        return None
    span = decimal_u64(span_value)
    return (trace, format(span, "016x") if span is not None else None, None) if trace else None


def xray_in(obj: Mapping[str, Any], depth: int, breadth: int, per_level: int) -> Context | None:
    """The first string value, at any key, that is an X-Ray header (``Root=1-...``), breadth first
    (``breadth`` elements of a list, ``per_level`` containers of a level).

    Beside a ``spanId`` in the same object (the Lambda Telemetry API's ``tracing`` object:
    ``{"spanId", "type": "X-Amzn-Trace-Id", "value"}``) that ``spanId`` is the line's span and the
    header's ``Parent`` its parent; otherwise ``Parent`` is the span, as in ``xray``.
    """
    level: list[Any] = [obj]
    for _ in range(depth):
        below: list[Any] = []
        for item in level[:per_level]:
            values = item.values() if isinstance(item, dict) else item[:breadth]
            for value in values:
                if type(value) is str:
                    if "Root=1-" in value and (ctx := xray(value)):
                        if type(item) is dict:
                            span = next((hex_id(v, 16) for k, v in item.items() if normalize_key(k) == "spanid"), None)
                            if span:
                                return (ctx[0], span, ctx[1])
                        return ctx
                elif type(value) is dict or type(value) is list:
                    below.append(value)
        if not below:
            return None
        level = below
    return None


def gcp(trace_value: Any, span_value: Any) -> Context | None:
    """Google Cloud ``logging.googleapis.com/trace`` (``projects/P/traces/<32hex>``) and ``/spanId``:
    16 hex digits as documented, or the decimal span of ``X-Cloud-Trace-Context`` copied as it is."""
    if not isinstance(trace_value, str):
        return None
    m = _GCP_TRACE.fullmatch(trace_value.strip().lower())
    trace = nonzero(m.group(1), 32) if m else None
    return (trace, gcp_span(span_value), None) if trace else None


def gcp_span(value: Any) -> str | None:
    """A Cloud Logging span ID: 16 hex digits; any other all-digit string is the header's decimal."""
    if isinstance(value, str) and len(value.strip()) != 16 and value.strip().isdigit():
        span = decimal_u64(value)
        return format(span, "016x") if span is not None else None
    return hex_id(value, 16)


def cloud_trace_context(value: Any) -> Context | None:
    """Google Cloud's ``X-Cloud-Trace-Context: TRACE_ID/SPAN_ID;o=OPTIONS``: the span ID is decimal
    64-bit (Kong's gcp injector writes ``bn.from_binary(span_id):to_dec()``), absent or 0 for none."""
    if not isinstance(value, str):
        return None
    m = _CLOUD_TRACE.fullmatch(value.strip().lower())
    trace = nonzero(m.group(1), 32) if m else None
    if trace is None or m is None:
        return None
    span = decimal_u64(m.group(2)) if m.group(2) else None
    return (trace, format(span, "016x") if span is not None else None, None)


# Kong's ``trace_id`` log field is an object of the formats its propagation injected
# (kong/observability/tracing/propagation/injectors/*.lua, ``get_formatted_trace_id``): hex in
# each but ``datadog``, which is the decimal low 64 bits. Taken in this order (TRACE_IDS.md).
KONG_HEX = ("w3c", "gcp", "aws", "b3", "ot", "jaeger")


def kong_trace_id(value: dict) -> str | None:
    """The trace ID of Kong's ``{"w3c": ..., "datadog": ...}`` ``trace_id`` object."""
    for name in KONG_HEX:
        if name in value and (trace := hex_id(value[name], 32)):
            return trace
    low = decimal_u64(value.get("datadog"))
    return format(low, "032x") if low is not None else None


def _pair(trace_key: str, span_key: str, parent_key: str = "") -> Callable[[Mapping[str, Any]], Context | None]:
    def read(found: Mapping[str, Any]) -> Context | None:
        value = found.get(trace_key)
        trace = kong_trace_id(value) if type(value) is dict else trace_hex(value)
        if trace is None:
            return None
        parent = hex_id(found[parent_key], 16) if parent_key and parent_key in found else None
        return (trace, hex_id(found.get(span_key), 16), parent)

    return read


def _logentry(found: Mapping[str, Any]) -> Context | None:
    """A ``LogEntry``'s ``trace`` and ``spanId``; beside a bare ``trace``, logger_json's ``span``
    (its Basic formatter writes the OTel IDs as ``trace`` and ``span``: TRACE_IDS.md)."""
    if "trace" not in found:
        return None
    return gcp(found["trace"], found["spanid"] if "spanid" in found else found.get("span"))


def _one(key: str, parse: Callable[[Any], Context | None]) -> Callable[[Mapping[str, Any]], Context | None]:
    return lambda found: parse(found[key]) if key in found else None


def _activity(found: Mapping[str, Any]) -> Context | None:
    ctx = activity_id(found["activityid"]) if "activityid" in found else None
    parent = parent_span(found.get("parentid"))
    if ctx is None and isinstance(found.get("parentid"), str):
        ctx = activity_id(found["parentid"])  # a W3C ParentId names the trace as well
    return (ctx[0], ctx[1] if "activityid" in found else None, parent) if ctx else None


def quick_activity(activity_key: str, parent_key: str | None) -> Callable[[Mapping[str, Any]], Context | None]:
    """``_activity`` for the lines of one key shape, read straight from the line's object: None
    unless ``ActivityId`` is the usual GUID and ``ParentId``, if the shape has it, 16 characters;
    the general reader decides those lines (the same IDs, through more calls)."""

    def read(fields: Mapping[str, Any]) -> Context | None:
        value = fields[activity_key]
        if type(value) is not str or len(value) != 36 or value[8] != "-" or value[23] != "-":
            return None
        trace = hex_bytes(value.replace("-", ""), 16)
        parent = fields[parent_key] if parent_key is not None else ""
        if trace is None or type(parent) is not str or len(parent) not in (0, 16):
            return None
        if parent:  # ``hex_bytes(parent, 8)``, without the call
            parent = parent.lower()
            try:
                parent = parent if parent != _ZEROS[16] and len(bytes.fromhex(parent)) == 8 else None
            except ValueError:
                parent = None
        return (trace, None, parent or None)

    return read


def _b3(found: Mapping[str, Any]) -> Context | None:
    if "b3" in found and (ctx := b3_single(found["b3"])):
        return ctx
    trace = found.get("xb3traceid")
    if not isinstance(trace, str) or len(trace.strip()) not in (16, 32):
        return None
    trace_id = hex_id(trace, 32)
    if not trace_id:
        return None
    return (trace_id, hex_id(found.get("xb3spanid"), 16), hex_id(found.get("xb3parentspanid"), 16))


def _datadog(found: Mapping[str, Any]) -> Context | None:
    if "ddtraceid" in found:
        return datadog(found["ddtraceid"], found.get("ddspanid"))
    if "xdatadogtraceid" in found:  # the propagation headers, kept by an access log
        return datadog(found["xdatadogtraceid"], found.get("xdatadogparentid"))
    return None


def _app_insights(found: Mapping[str, Any]) -> Context | None:
    """Application Insights ``operation_Id`` (the W3C trace ID) with the ID of the request or
    dependency the item was logged in: ``operation_ParentId`` (classic export, 16 hex or the legacy
    ``|trace.span.``), or ``ParentId`` (Log Analytics' ``AppTraces``). That item is the line's span.
    A request or dependency row (``AppRequests``, ``AppDependencies``) has an ``Id`` of its own: then
    that is the span and ``ParentId`` its caller's, the parent."""
    trace = trace_hex(found["operationid"]) if "operationid" in found else None
    if trace is None:
        return None
    parent = found.get("operationparentid", found.get("parentid"))
    parent = parent_span(parent) if isinstance(parent, str) else None
    own = parent_span(found["id"]) if isinstance(found.get("id"), str) else None
    return (trace, own, parent) if own else (trace, parent, None)


def _first(*keys: str, parse: Callable[[Any], Context | None]) -> Callable[[Mapping[str, Any]], Context | None]:
    def read(found: Mapping[str, Any]) -> Context | None:
        for key in keys:
            if key in found and (ctx := parse(found[key])):
                return ctx
        return None

    return read


GCP_TRACE = normalize_key("logging.googleapis.com/trace")
GCP_SPAN = normalize_key("logging.googleapis.com/spanId")

# Form name → reader over the normalized keys found in a line. Checked in this order, and only when
# the line has one of the form's keys (TRIGGERS).
FORMS: dict[str, Callable[[Mapping[str, Any]], Context | None]] = {
    "w3c": _one("traceparent", traceparent),
    "plain": _pair("traceid", "spanid"),
    "otel_logging": _pair("oteltraceid", "otelspanid", "otelparentid"),
    "clef": _pair("@tr", "@sp"),
    "request_id": _one("requestid", request_id),
    "activity_id": _activity,
    "b3": _b3,
    "jaeger": _one("ubertraceid", uber_trace_id),
    "xray": _first("xamzntraceid", "xraytraceid", "awsxraytraceid", parse=xray),
    "datadog": _datadog,
    "gcp": lambda found: gcp(found[GCP_TRACE], found.get(GCP_SPAN)) if GCP_TRACE in found else None,
    "gcp_logentry": _logentry,
    "gcp_header": _one("xcloudtracecontext", cloud_trace_context),
    "app_insights": _app_insights,
}

# The keys that make each form worth reading.
TRIGGERS: dict[str, tuple[str, ...]] = {
    "w3c": ("traceparent",),
    "plain": ("traceid",),
    "otel_logging": ("oteltraceid",),
    "clef": ("@tr",),
    "request_id": ("requestid",),
    "activity_id": ("activityid", "parentid"),
    "b3": ("b3", "xb3traceid"),
    "jaeger": ("ubertraceid",),
    "xray": ("xamzntraceid", "xraytraceid", "awsxraytraceid"),
    "datadog": ("ddtraceid", "xdatadogtraceid"),
    "gcp": (GCP_TRACE,),
    "gcp_logentry": ("trace",),
    "gcp_header": ("xcloudtracecontext",),
    "app_insights": ("operationid",),
}
SPAN_KEYS = (
    "spanid",
    "otelspanid",
    "@sp",
    "xb3spanid",
    "xb3parentspanid",
    "ddspanid",
    "xdatadogparentid",
    GCP_SPAN,
    "operationparentid",
    "otelparentid",  # nginx's ngx_otel_module: $otel_parent_id
    "span",  # logger_json's Basic formatter, beside its ``trace``
    "id",  # an Application Insights request or dependency row's own ID, beside its ``OperationId``
)
# Read besides the forms: Elastic APM's ``transaction.id`` (the span ID of a line logged in a
# transaction without a span); ``x-request-id`` and Kubernetes' ``auditID`` (correlation values,
# never trace IDs).
CORRELATION_HEADERS = ("xrequestid", "auditid")
EXTRA_KEYS = ("transactionid", *CORRELATION_HEADERS)

# Every normalized key any form reads.
KEYS = frozenset({key for keys in TRIGGERS.values() for key in keys} | set(SPAN_KEYS) | set(EXTRA_KEYS))
