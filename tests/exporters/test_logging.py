"""Python logging with trace context: the JSON formatter, and the Loki handler pushing to a real
HTTP receiver from its queue thread."""

from __future__ import annotations

import json
import logging
from datetime import datetime

import pytest
from opentelemetry.sdk.trace import TracerProvider

from obsbox.exporters import JsonFormatter, LokiTraceHandler, TraceContextFilter
from tests.exporters.servers import Receiver

tracer = TracerProvider().get_tracer("test")


def make_logger(name: str, handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_json_formatter_adds_the_current_span():
    handler = ListHandler()
    handler.setFormatter(JsonFormatter("checkout", static_fields={"env": "test"}))
    logger = make_logger("obsbox.test.json", handler)
    with tracer.start_as_current_span("work") as span:
        logger.info("paid %s", "42 EUR", extra={"order": 7})
        ctx = span.get_span_context()
    logger.warning("outside")
    try:
        raise KeyError("card")
    except KeyError:
        logger.exception("failed")
    inside, outside, failed = (json.loads(line) for line in handler.lines)
    assert inside["trace_id"] == format(ctx.trace_id, "032x")
    assert inside["span_id"] == format(ctx.span_id, "016x")
    assert inside["message"] == "paid 42 EUR"
    assert inside["order"] == 7 and inside["env"] == "test" and inside["service.name"] == "checkout"
    assert inside["level"] == "INFO" and inside["timestamp"].endswith("Z")
    assert "trace_id" not in outside
    assert "KeyError: 'card'" in failed["exception"]


def test_trace_context_filter_stamps_records():
    handler = ListHandler()
    handler.setFormatter(logging.Formatter("%(trace_id)s %(span_id)s %(message)s"))
    handler.addFilter(TraceContextFilter())
    logger = make_logger("obsbox.test.filter", handler)
    with tracer.start_as_current_span("work") as span:
        logger.info("hello")
    assert handler.lines == [f"{span.get_span_context().trace_id:032x} {span.get_span_context().span_id:016x} hello"]


def test_loki_handler_carries_trace_ids_without_making_them_labels():
    receiver = Receiver()
    handler = LokiTraceHandler(f"{receiver.url}/loki/api/v1/push", "checkout", tags={"env": "test"})
    logger = make_logger("obsbox.test.loki", handler)
    try:
        with tracer.start_as_current_span("pay") as span:
            logger.error("card declined")
            ctx = span.get_span_context()
        logger.info("no span here")
    finally:
        handler.close()  # drains the queue: both records are pushed before close() returns
        receiver.close()
    values = receiver.loki_values()
    assert len(values) == 2
    (labels, (ts, line, metadata)), (_, untraced) = values
    assert labels == {"service_name": "checkout", "env": "test", "severity": "error", "logger": "obsbox.test.loki"}
    assert metadata == {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}
    body = json.loads(line)
    assert body["trace_id"] == metadata["trace_id"] and body["message"] == "card declined"
    assert len(untraced) == 2  # no structured metadata when there is no span
    assert "trace_id" not in json.loads(untraced[1])
    # The entry's time is the record's own (nanoseconds), the same instant the JSON line states.
    stated = datetime.fromisoformat(body["timestamp"].replace("Z", "+00:00")).timestamp()
    assert abs(int(ts) / 1e9 - stated) < 1e-5


def test_loki_handler_refuses_unbounded_labels():
    with pytest.raises(ValueError, match=r"\['trace_id'\] cannot be labels"):
        LokiTraceHandler("http://127.0.0.1:9/loki/api/v1/push", "svc", tags={"trace_id": "x"})
