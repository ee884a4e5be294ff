"""Python logging with trace context: a JSON formatter and a filter that stamp ``trace_id`` and
``span_id`` of the current span on every record, in the W3C hex form the rest of obsbox uses.

The IDs are read when the record is *created* or *stamped* (the filter, or the Loki handler before
it queues the record), because a queue's worker thread has no current span of its own.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import orjson
from opentelemetry import trace

# Attributes every LogRecord has; anything else came from ``extra=`` and is kept as a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_STAMPED = ("trace_id", "span_id")


def stamp_trace_context(record: logging.LogRecord) -> None:
    """Set ``record.trace_id`` / ``record.span_id`` from the current span, unless already set."""
    if getattr(record, "trace_id", None):
        return
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        record.trace_id = format(ctx.trace_id, "032x")
        record.span_id = format(ctx.span_id, "016x")


class TraceContextFilter(logging.Filter):
    """Stamps the current span's IDs on each record (attach to a handler or a logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        stamp_trace_context(record)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``timestamp`` (ISO 8601, UTC), ``level``, ``logger``,
    ``message``, ``trace_id``/``span_id`` when a span is current, ``service.name`` if given, the
    fields passed with ``extra=``, and ``exception``/``stack`` when present."""

    def __init__(self, service_name: str | None = None, static_fields: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.static = dict(static_fields or {})
        if service_name:
            self.static["service.name"] = service_name

    def format(self, record: logging.LogRecord) -> str:
        stamp_trace_context(record)
        moment = datetime.fromtimestamp(record.created, timezone.utc)
        doc: dict[str, Any] = {
            "timestamp": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in _STAMPED:
            value = getattr(record, key, None)
            if value:
                doc[key] = value
        doc.update(self.static)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in doc and key not in _STAMPED:
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(doc, default=str).decode()
