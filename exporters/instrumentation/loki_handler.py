"""A ready, non-blocking Loki handler for Python logging, built on python-logging-loki's
``LokiQueueHandler``, that carries ``trace_id``/``span_id``.

What python-logging-loki does and does not do, and what this adds:

- The library sends one HTTP request per record from a ``QueueListener`` thread: logging never
  blocks on the network, but there is no batching and no retry. A failed push goes to logging's
  ``handleError`` (a traceback on stderr) and that record is lost; the queue is bounded here
  (``max_queue``) and records refused by a full queue are counted in ``dropped`` and reported the
  same way.
- Its only metadata are labels (``tags``, plus ``severity`` and ``logger``, which it always adds).
  A trace ID must never be a label (one stream per request), so the IDs travel in the JSON line
  (``JsonFormatter``) and, with ``structured_metadata=True``, as Loki structured metadata (the third
  element of a pushed value; Loki 2.9+ with structured metadata allowed; set it False for older
  Loki, which rejects such pushes).
- The library stamps each line with the time it is *sent*; this handler uses the record's time.
"""

from __future__ import annotations

import logging
import queue
from logging.handlers import QueueListener
from typing import Any

from logging_loki import LokiQueueHandler
from logging_loki.emitter import BasicAuth, LokiEmitterV1

from obsbox.exporters.instrumentation.jsonlog import JsonFormatter, stamp_trace_context

UNBOUNDED_LABELS = frozenset({"trace_id", "span_id", "traceid", "spanid"})


class TraceLokiEmitter(LokiEmitterV1):
    """Loki push v1 with the record's own timestamp and, optionally, structured metadata."""

    def __init__(self, url: str, tags: dict[str, str], auth: BasicAuth, structured_metadata: bool) -> None:
        super().__init__(url, tags, auth)
        self.structured_metadata = structured_metadata

    def build_payload(self, record: logging.LogRecord, line: str) -> dict[str, Any]:
        value: list[Any] = [str(int(record.created * 1e9)), line]
        if self.structured_metadata:
            metadata = {key: getattr(record, key) for key in ("trace_id", "span_id") if getattr(record, key, None)}
            if metadata:
                value.append(metadata)
        return {"streams": [{"stream": self.build_tags(record), "values": [value]}]}


class LokiTraceHandler(LokiQueueHandler):
    """Queue records (never blocking the caller) and push them to Loki from a worker thread.

    ``url`` is the push endpoint (``http://loki:3100/loki/api/v1/push``). Labels are
    ``service_name`` plus ``tags`` (keep them low-cardinality) and the library's ``severity`` and
    ``logger``. Call ``close()`` (logging.shutdown does) to send what is queued before exit.
    """

    # started by LokiQueueHandler.__init__; None once close() has stopped it
    listener: QueueListener | None

    def __init__(
        self,
        url: str,
        service_name: str,
        *,
        tags: dict[str, str] | None = None,
        auth: BasicAuth = None,
        structured_metadata: bool = True,
        max_queue: int = 10_000,
    ) -> None:
        labels = {"service_name": service_name, **(tags or {})}
        bad = sorted(UNBOUNDED_LABELS & {k.lower() for k in labels})
        if bad:
            raise ValueError(
                f"LokiTraceHandler: {bad} cannot be labels (one stream per request); they are sent as "
                "structured metadata and in the JSON line already"
            )
        if max_queue <= 0:
            raise ValueError(f"LokiTraceHandler: max_queue must be > 0, got {max_queue}")
        super().__init__(queue.Queue(max_queue), url=url, tags=labels, auth=auth, version="1")
        self.handler.emitter = TraceLokiEmitter(url, labels, auth, structured_metadata)
        self.setFormatter(JsonFormatter(service_name))
        self.dropped = 0

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        stamp_trace_context(record)  # here, in the caller's thread, where the span is current
        return super().prepare(record)

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
            raise

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()  # drains the queue first
            self.listener = None
            self.handler.close()
        super().close()
