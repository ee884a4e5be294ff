"""``SpanBatcher``: the span processor ``instrument()`` exports through, in place of the SDK's
``BatchSpanProcessor``.

It does what the SDK's does (a bounded queue, batches exported from a thread of its own, the same
``OTEL_BSP_*`` settings, ``force_flush`` exporting everything queued, ``shutdown`` exporting what is
left first), with two differences:

- Every span it could not deliver is counted, by reason (``on_drop``): ``queue_full`` (a burst the
  exporter could not keep up with), ``export_failed`` (the exporter gave up on a batch),
  ``encode_failed`` and ``shutdown`` (ended after shutdown, or still queued when shutdown timed
  out). ``instrument()`` counts them in ``obsbox_instrumentation_spans_dropped_total{reason}``;
  the SDK's processor only logs ``Queue full, dropping Span.``. A drop is logged too, at most once
  every ``LOG_INTERVAL`` seconds, with the count since the last line.
- With an exporter that can encode a span on its own (obsbox's ``OtlpHttpSpanExporter``:
  ``encode_span`` and ``export_encoded``), each span is encoded when it ends and only its bytes are
  queued, up to ``ENCODED_QUEUE_SIZE`` of them unless ``OTEL_BSP_MAX_QUEUE_SIZE`` says otherwise.
  Up to a queue's worth of ended spans kept alive, each with its attribute dict, lists and locks,
  made the cyclic garbage collector run every few dozen requests; bytes are not tracked by it.
  Any other exporter (the SDK's, the console's) gets the span objects, as from the SDK's processor.

Threading: ``on_end`` may be called from any thread; exports run in the worker thread, or in the
caller's on ``force_flush`` and ``shutdown``, one at a time.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

_logger = logging.getLogger(__name__)

QUEUE_FULL = "queue_full"
EXPORT_FAILED = "export_failed"
ENCODE_FAILED = "encode_failed"
SHUTDOWN = "shutdown"
REASONS = (QUEUE_FULL, EXPORT_FAILED, ENCODE_FAILED, SHUTDOWN)
LOG_INTERVAL = 10.0  # seconds between two log lines about drops of one reason
# The queue's default length when it holds encoded spans: a server span is 200-400 bytes, so 8192 of
# them are 2-3 MB, where 2048 span objects (the SDK's default, kept for them) weigh about as much.
# A burst of child spans (stage_spans=True: ten spans a request) outran 2048 on a loaded machine.
ENCODED_QUEUE_SIZE = 8192

# the SDK's defaults and variables (opentelemetry.sdk.environment_variables)
DEFAULTS = {
    "OTEL_BSP_MAX_QUEUE_SIZE": 2048,
    "OTEL_BSP_SCHEDULE_DELAY": 5000,
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512,
}


def _setting(given: int | float | None, variable: str) -> float:
    """An argument, else the variable, else the SDK's default; an invalid variable is one warning."""
    if given is not None:
        return given
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return DEFAULTS[variable]
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        _logger.warning("%s=%r is not a valid number; using %s", variable, raw, DEFAULTS[variable])
        return DEFAULTS[variable]
    return value


class SpanBatcher(SpanProcessor):
    """Batches sampled spans to ``exporter``; see the module doc. ``on_drop(reason, count)`` is
    called for every span given up on."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int | None = None,
        schedule_delay_millis: float | None = None,
        max_export_batch_size: int | None = None,
        on_drop: Callable[[str, int], None] | None = None,
    ) -> None:
        self.span_exporter = exporter
        encode_span = getattr(exporter, "encode_span", None)
        export_encoded = getattr(exporter, "export_encoded", None)
        if max_queue_size is None and export_encoded is not None and not os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE"):
            max_queue_size = ENCODED_QUEUE_SIZE
        self.max_queue_size = int(_setting(max_queue_size, "OTEL_BSP_MAX_QUEUE_SIZE"))
        self.schedule_delay = _setting(schedule_delay_millis, "OTEL_BSP_SCHEDULE_DELAY") / 1000
        self.max_export_batch_size = int(_setting(max_export_batch_size, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"))
        if self.max_queue_size <= 0 or self.max_export_batch_size <= 0:
            raise ValueError("max_queue_size and max_export_batch_size must be > 0")
        if self.max_export_batch_size > self.max_queue_size:
            raise ValueError("max_export_batch_size must be less than or equal to max_queue_size")
        self.on_drop = on_drop
        self._encode: Callable[[ReadableSpan], Any] | None = encode_span if export_encoded else None
        self._export_items: Callable[[list[Any]], SpanExportResult] = export_encoded or exporter.export
        self._queue: collections.deque[Any] = collections.deque()
        self._export_lock = threading.Lock()
        self._wake = threading.Event()
        self._shutdown = False
        self._logged: dict[str, tuple[float, int]] = {}  # reason -> (last log time, drops not logged yet)
        self._log_lock = threading.Lock()
        self._start_worker()
        if hasattr(os, "register_at_fork"):  # a forked child (gunicorn --preload) needs a worker of its own
            ref = weakref.WeakMethod(self._after_fork)
            os.register_at_fork(after_in_child=lambda: (method := ref()) and method())

    def _start_worker(self) -> None:
        self._worker = threading.Thread(target=self._run, name="ObsboxSpanBatcher", daemon=True)
        self._worker.start()

    def _after_fork(self) -> None:
        self._queue.clear()  # the parent's spans are the parent's to export
        self._export_lock = threading.Lock()
        self._wake = threading.Event()
        self._start_worker()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if not span.context.trace_flags.sampled:
            return
        if self._shutdown:
            self._drop(SHUTDOWN, 1)
            return
        item: Any = span
        if self._encode is not None:
            try:
                item = self._encode(span)
            except Exception as error:  # a span the encoder cannot read is dropped and counted, not raised
                self._drop(ENCODE_FAILED, 1, error)
                return
        queue = self._queue
        if len(queue) >= self.max_queue_size:
            self._drop(QUEUE_FULL, 1)
            return
        queue.append(item)
        if len(queue) >= self.max_export_batch_size and not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while not self._shutdown:
            woken = self._wake.wait(self.schedule_delay)
            self._wake.clear()
            if self._shutdown:
                break
            self._export(everything=not woken)  # woken: full batches; on the timer, what is there
        self._export(everything=True)

    def _export(self, *, everything: bool) -> None:
        queue, size = self._queue, self.max_export_batch_size
        with self._export_lock:
            while queue and (everything or len(queue) >= size):
                batch = [queue.popleft() for _ in range(min(size, len(queue)))]
                token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))  # no spans about exporting spans
                try:
                    result = self._export_items(batch)
                except Exception as error:  # an exporter that raises fails its batch, not the thread
                    _logger.exception("Exception while exporting spans: %s", error)
                    result = SpanExportResult.FAILURE
                finally:
                    detach(token)
                if result is not SpanExportResult.SUCCESS:
                    self._drop(EXPORT_FAILED, len(batch))

    def _drop(self, reason: str, count: int, error: BaseException | None = None) -> None:
        if self.on_drop is not None:
            self.on_drop(reason, count)
        now = time.monotonic()
        with self._log_lock:
            last, pending = self._logged.get(reason, (-LOG_INTERVAL, 0))
            if now - last < LOG_INTERVAL:
                self._logged[reason] = (last, pending + count)
                return
            self._logged[reason] = (now, 0)
        detail = f" ({type(error).__name__}: {error})" if error is not None else ""
        earlier = f", and {pending} since the last such line" if pending else ""
        _logger.warning("Dropped %d span(s): %s%s%s", count, reason, detail, earlier)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export every span queued now, in this thread; False after shutdown."""
        if self._shutdown:
            return False
        self._export(everything=True)
        return True

    def shutdown(self) -> None:
        """Export what is queued (the worker does, within 30 s), then shut the exporter down. Spans
        still queued after that are counted as dropped (``shutdown``)."""
        if self._shutdown:
            return
        self._shutdown = True
        self._wake.set()
        self._worker.join(30)
        left = len(self._queue)
        if left:
            self._queue.clear()
            self._drop(SHUTDOWN, left)
        self.span_exporter.shutdown()
