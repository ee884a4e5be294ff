"""OTLP/JSON export lines (the collector's ``file`` exporter) read as the log records they hold.

One line ``{"resourceLogs": [{"resource": ..., "scopeLogs": [{"scope": ..., "logRecords": [...]}]}]}``
becomes one record per log record. Each record's line is its log record object as compact JSON, so
the trace processor reads its own ``traceId``/``spanId`` (hex in OTLP/JSON) with the plain form and a
byte sink keeps every field (severity, timestamps, attributes). Resource attributes, and the scope's
name and version, become the record's string attributes. The records share the line's origin and
offset (the batch's checkpoint is the line's); ``PartRecord.part`` keeps their derived IDs apart.
"""

from __future__ import annotations

from typing import Any

import orjson

from obsbox import logfields
from obsbox.exporters.bridge.record import Record


class PartRecord(Record):
    """A record expanded from one line that held several; ``part`` is its index in that line."""

    __slots__ = ("part",)

    def __init__(self, raw: bytes, parent: Record, part: int) -> None:
        super().__init__(raw, parent.origin, parent.offset)
        self.part = part


def plain(value: Any) -> str:
    """An OTLP/JSON ``AnyValue`` as a string: scalars as themselves, arrays and maps as JSON."""
    if type(value) is not dict or len(value) != 1:
        return logfields.json_text(value)
    kind, inner = next(iter(value.items()))
    if kind == "stringValue":
        return str(inner)
    if kind == "boolValue":
        return "true" if inner else "false"
    if kind in ("intValue", "doubleValue", "bytesValue"):
        return str(inner)
    return logfields.json_text(_unwrap(value))


def _unwrap(value: Any) -> Any:
    if type(value) is not dict or len(value) != 1:
        return value
    kind, inner = next(iter(value.items()))
    if kind == "arrayValue":
        return [_unwrap(item) for item in (inner or {}).get("values", [])]
    if kind == "kvlistValue":
        return {kv.get("key"): _unwrap(kv.get("value")) for kv in (inner or {}).get("values", []) if type(kv) is dict}
    return inner


def attributes(items: Any) -> dict[str, str]:
    """OTLP/JSON ``[{"key": k, "value": AnyValue}]`` as string pairs (entries without a key skipped)."""
    if type(items) is not list:
        return {}
    return {kv["key"]: plain(kv.get("value")) for kv in items if type(kv) is dict and type(kv.get("key")) is str}


def expand(rec: Record, obj: dict[str, Any]) -> list[Record]:
    """The log records of an OTLP/JSON export line; empty when it holds none (the line then stays)."""
    out: list[Record] = []
    resource_logs = obj.get("resourceLogs")
    if type(resource_logs) is not list:
        return out
    for resource_log in resource_logs:
        if type(resource_log) is not dict:
            continue
        resource = resource_log.get("resource")
        common = attributes(resource.get("attributes")) if type(resource) is dict else {}
        scope_logs = resource_log.get("scopeLogs")
        for scope_log in scope_logs if type(scope_logs) is list else ():
            if type(scope_log) is not dict:
                continue
            attrs = dict(common)
            scope = scope_log.get("scope")
            if type(scope) is dict:
                if scope.get("name"):
                    attrs["otel.scope.name"] = str(scope["name"])
                if scope.get("version"):
                    attrs["otel.scope.version"] = str(scope["version"])
            log_records = scope_log.get("logRecords")
            for log_record in log_records if type(log_records) is list else ():
                if type(log_record) is not dict:
                    continue
                part = PartRecord(orjson.dumps(log_record), rec, len(out))
                part.fields = log_record
                part.attributes = dict(attrs) if attrs else None
                out.append(part)
    return out
