"""Run bridge pipelines: read a batch, process it, hand it to every sink, then save positions.

One batch is in flight per pipeline, and its positions are saved only after every sink has
acknowledged it: a ``kill -9`` can therefore duplicate at most the batch in flight, and never lose a
line. While it is exported (on the pipeline's export thread: network waits release the GIL, and the
receiver works on another core), the pipeline thread reads and processes the next batch, which is
handed over only once the first is acknowledged and committed. A sink that is down blocks the
pipeline (the files are the buffer; memory stays bounded to two batches).

With worker processes (``settings.workers``, by default one per available core; see ``workers``),
processing moves out of the pipeline thread: it hands each batch to the workers in parts
(``PART_LINES``), reads ahead while fewer than two parts per worker wait, and takes the results in
the order read; each part is delivered as above, one at a time at the sinks, and the batch's
positions are committed with its last part. The batches ahead were never written
anywhere, so a ``kill -9`` still duplicates at most the batch in flight.
Without worker processes, a pipeline whose processors and sinks the workers' fused path takes runs
that path in the pipeline thread (``workers.InProcess``); any other runs its processors here.

Shutdown (SIGTERM, Ctrl-C): stop reading, let the batch in flight finish for up to
``shutdown_timeout`` seconds, flush, save positions, exit 0. What could not be delivered by then
is read again at the next start.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs
from prometheus_client import start_http_server

from obsbox.config import ConfigError
from obsbox.exporters.bridge import statedir
from obsbox.exporters.bridge.component import Component, Context, ExportResult, Processor, Sink, Source
from obsbox.exporters.bridge.config import BatchConfig, BridgeConfig, ComponentSpec
from obsbox.exporters.bridge.deadletter import DeadLetter, default_path
from obsbox.exporters.bridge.deferred import complete
from obsbox.exporters.bridge.metrics import BridgeMetrics
from obsbox.exporters.bridge.progress import Progress
from obsbox.exporters.bridge.record import Lines, Record
from obsbox.exporters.bridge.retry import Attempt, RetryPolicy
from obsbox.exporters.bridge.workers import (
    InProcess,
    MemoryBudget,
    Plan,
    Work,
    WorkerPool,
    default_workers,
    pack,
    why_not,
)

log = logging.getLogger(__name__)
MIN_SHARED_LINES = 512  # a batch cut by its timeout is shared among the workers from this many lines each
# A batch goes to the workers in parts of at most this many lines (the default batch in three): a
# worker's memory, and a slot's pages, follow the part it works on (a whole batch of 8,192 lines
# took 24 MiB in a worker, a third of it 8), and the workers share even a single file's batch.
# Each part costs the bridge process a hand-over, a result and an export request (BENCHMARKS.md).
PART_LINES = 3072


def default_state_dir() -> Path:
    return Path(platformdirs.user_state_dir("obsbox"))


def _ready(work: Work) -> bool:
    return work.future is None or work.future.done()


@dataclass
class InFlight:
    """A processed batch on the export thread, and the positions to save once it is acknowledged."""

    future: Future
    checkpoints: dict
    started: float
    count: int


@dataclass
class Pipeline:
    name: str
    sources: list[Source]
    processors: list[Processor]
    sinks: list[Sink]
    batch: BatchConfig
    metrics: BridgeMetrics
    stop: threading.Event
    abort: threading.Event
    retry: RetryPolicy
    once: bool = False
    poll_interval: float = 0.1
    progress: Progress | None = None
    pool: WorkerPool | None = None
    in_process: InProcess | None = None  # without a pool: the workers' fused path, run here
    # with workers, the processors are made here only if a batch has to be processed here after all
    # (it crashed its workers): the redact processor alone takes 7 MiB (hyperscan's database)
    make_processors: Callable[[], list[Processor]] | None = None
    delivered: bool = field(default=True, init=False)
    in_flight: InFlight | None = field(default=None, init=False)  # the batch at the sinks
    exporter: ThreadPoolExecutor = field(init=False)  # the sinks' thread: one batch at a time
    wakeup: threading.Event = field(default_factory=threading.Event, init=False)  # a batch is ready

    def run(self) -> None:
        self.exporter = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"export-{self.name}")
        pool = self.pool
        limit = 2 * pool.count if pool else 1  # batches read ahead of the one being delivered
        ahead: deque[Work] = deque()
        try:
            if pool is not None:
                pool.start()
            while not self.stop.is_set():
                gathered = self._read_ahead(ahead) if len(ahead) < limit else None
                waiting = gathered is None or len(ahead) >= limit  # nothing else to do but wait
                if not self._tend(ahead, wait=waiting) or self.stop.is_set():
                    break
                if gathered is None and self.in_flight is None and not ahead:
                    if self.once and all(source.exhausted() for source in self.sources):
                        break
                    self.stop.wait(self.poll_interval)
        finally:
            if self.in_flight is not None:
                self._settle(self.in_flight)  # stopping: the batch in flight may still finish (abort bounds it)
            self.exporter.shutdown(wait=True)
            if pool is not None:
                pool.close()
                log.info("pipeline %s: %s", self.name, pool.report())  # scripts/bench_bridge reads it
            if self.progress:
                self.progress.finish()

    def _tend(self, ahead: deque[Work], wait: bool = False) -> bool:
        """Settle the batch in flight once it is done, then send the oldest batch once it is
        processed; with ``wait``, wait for both. False: a delivery failed, the pipeline stops.

        With workers this also runs while a batch is gathered, so a batch processed meanwhile goes
        out at once rather than when the next one is cut: gathering for ``batch.timeout`` then adds
        nothing to the latency of the batches before it."""
        if not self.delivered:
            return False
        flight = self.in_flight
        if flight is not None and (wait or flight.future.done()):
            self.in_flight = None
            if not self._settle(flight):
                return False
        if self.in_flight is None and ahead and (wait or _ready(ahead[0])):
            work = ahead.popleft()
            records, payloads = self._processed(work, ahead)
            future = self.exporter.submit(self._export, records, payloads)
            future.add_done_callback(self._wake)
            self.in_flight = InFlight(future, work.checkpoints, work.started, len(records))
        return True

    def _wake(self, _future: Future) -> None:
        self.wakeup.set()

    def _read_ahead(self, ahead: deque[Work]) -> Work | None:
        """Read the next batch: process it here, or hand it to the workers; queue it for delivery."""
        gathered = self._gather((lambda: self._tend(ahead)) if self.pool else None)
        if gathered is None:
            return None
        lines, checkpoints, started, full = gathered
        if self.pool is None:
            done = self.in_process.process(lines) if self.in_process else (self._process(lines), None)
            work = Work(lines, None, checkpoints, started, done=done)
            ahead.append(work)
            return work
        # A batch goes out in parts (PART_LINES), and one cut by its timeout is shared out among the
        # workers, so its lines wait for a part of it to be processed, not all of it. The parts go
        # out in order, and only the last one carries the positions to save: saving them says every
        # part before was acknowledged.
        count = -(-len(lines) // PART_LINES)
        if not full and len(lines) >= MIN_SHARED_LINES * self.pool.count:
            count = max(count, self.pool.count)
        parts = lines.parts(count) if count > 1 else [lines]
        for index, part in enumerate(parts):
            work = Work(part, pack(part), checkpoints if index == len(parts) - 1 else {}, started)
            self.pool.submit(work)
            if work.future is not None:
                work.future.add_done_callback(self._wake)
            ahead.append(work)
        return work

    def _process(self, lines: Lines) -> list[Record]:
        if self.make_processors is not None:
            self.processors, self.make_processors = self.make_processors(), None
        records = lines.records()
        for processor in self.processors:
            records = processor.process(records)
        return records

    def _processed(self, work: Work, later: deque[Work]) -> tuple[Sequence[Record], list | None]:
        """The oldest batch as the processors left it, and what the sinks encoded in advance."""
        if work.done is not None:  # processed in the bridge when read (no pool)
            return work.done
        assert self.pool is not None  # without a pool every batch is ``done`` when read
        result = self.pool.result(work, later)
        if result is None:  # it crashed its workers repeatedly: process it here
            return self._process(work.lines), None
        return result.applied(work.lines, self.pool.whole), result.payloads

    def _settle(self, flight: InFlight) -> bool:
        """Wait for the batch in flight; commit its positions when every sink acknowledged it."""
        if not flight.future.result():
            self.delivered = False
            return False
        for source, checkpoint in flight.checkpoints.items():
            source.commit(checkpoint)
        self.metrics.batch_duration.labels(self.name).observe(time.perf_counter() - flight.started)
        if self.progress:
            self.progress.update(flight.count)
        return True

    def _gather(self, tend: Callable[[], bool] | None = None) -> tuple[Lines, dict[Source, dict], float, bool] | None:
        """Poll the sources until the batch is full, or ``batch.timeout`` after its first record.

        ``tend`` (with workers) delivers earlier batches meanwhile, after every poll and whenever a
        worker or the sinks finish (``wakeup``); when it fails the batch is cut, and the pipeline stops."""
        records = Lines()
        checkpoints: dict[Source, dict] = {}
        started = deadline = 0.0
        size = 0
        while True:
            progressed = False
            for source in self.sources:
                room = self.batch.max_records - len(records)
                if room <= 0 or size >= self.batch.max_bytes:
                    break
                batch = source.poll(room, self.batch.max_bytes - size)
                if batch is None:
                    continue
                progressed = True
                records.extend(batch.lines)
                size += batch.read_bytes
                checkpoints.setdefault(source, {}).update(batch.checkpoint or {})
            if not records:
                return None
            if not started:
                started = time.perf_counter()
                deadline = started + self.batch.timeout
            full = len(records) >= self.batch.max_records or size >= self.batch.max_bytes
            if full or self.stop.is_set() or (not progressed and (self.once or time.perf_counter() >= deadline)):
                return records, checkpoints, started, full
            if tend is not None:
                self.wakeup.clear()
                if not tend():
                    return records, checkpoints, started, full
            if not progressed:
                timeout = min(self.poll_interval, max(0.0, deadline - time.perf_counter()))
                (self.stop if tend is None else self.wakeup).wait(timeout)

    def _export(self, records: Sequence[Record], payloads: list | None = None) -> bool:
        """Every sink acknowledges the batch, or the pipeline is aborting (False).

        A sink that raises, or returns FAILURE, is tried again under the retry policy, never
        skipped; when the policy's maximum elapsed time runs out, the batch goes to that sink's
        dead-letter file with the last reason (counted), and the pipeline moves on."""
        for index, sink in enumerate(self.sinks):
            name = sink.context.name
            payload = payloads[index] if payloads is not None else None

            dead_in_attempt = [0]  # what the sink dead-lettered itself in its last attempt

            def attempt(sink: Sink = sink, payload: object = payload, dead: list[int] = dead_in_attempt) -> Attempt:
                before = self.metrics.dead_lettered_by_sink[sink.context.name]
                result = self._export_once(sink, records, payload)
                dead[0] = self.metrics.dead_lettered_by_sink[sink.context.name] - before
                return result

            def retried(attempt: Attempt, name: str = name) -> None:
                self.metrics.retries.labels(name, "export_failed").inc()
                log.warning("sink %s: %s; retrying", name, attempt.reason)

            outcome = self.retry.run(attempt, self.abort, retried)
            if outcome is None:  # stopping: nothing of this batch is committed
                log.warning(
                    "sink %s: stopping with %d records not delivered; they will be read again at the next start",
                    name,
                    len(records),
                )
                return False
            if outcome.kind != "ok":
                if not self._bury(sink, records, outcome.reason):
                    return False
            else:
                self.metrics.delivered(name, len(records) - dead_in_attempt[0])
        return True

    def _bury(self, sink: Sink, records: Sequence[Record], reason: str) -> bool:
        """The sink gave up on the batch: write it to the sink's dead-letter file, retrying that
        write under the retry policy while it fails (a full or read-only disk). False: the write
        never succeeded; the batch is not acknowledged and is read again at the next start."""
        name = sink.context.name
        dead = DeadLetter(default_path(sink.context.state_dir, name))

        def write() -> Attempt:
            try:
                dead.write(name, complete(records), f"gave up retrying: {reason}", None)
            except OSError as exc:
                self.metrics.errors.labels("dead_letter").inc()
                return Attempt("retry", f"cannot write the dead-letter file {dead.path}: {exc.strerror or exc}")
            return Attempt("ok")

        def retried(attempt: Attempt) -> None:
            log.warning("sink %s: %s; retrying", name, attempt.reason)

        outcome = self.retry.run(write, self.abort, retried)
        if outcome is None or outcome.kind != "ok":
            log.error("sink %s: %d records neither delivered nor dead-lettered; not acknowledged", name, len(records))
            return False
        self.metrics.dead_lettered(name, len(records))
        log.error("sink %s: gave up on %d records (%s); written to %s", name, len(records), reason, dead.path)
        return True

    def _export_once(self, sink: Sink, records: Sequence[Record], payload: object = None) -> Attempt:
        try:
            # payloads exist only for sinks with make_encoder, which define export_encoded
            result = sink.export(complete(records)) if payload is None else sink.export_encoded(payload, records)  # type: ignore[attr-defined]
        except OSError as exc:  # the disk or the network under a sink: one line, retried (the caller logs it)
            self.metrics.errors.labels("sink_io").inc()
            return Attempt("retry", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a sink bug must not lose the batch: log, count, retry
            log.exception("sink %s failed", sink.context.name)
            self.metrics.errors.labels("sink_exception").inc()
            return Attempt("retry", f"{type(exc).__name__}: {exc}")
        if result is ExportResult.SUCCESS:
            return Attempt("ok")
        if self.abort.is_set():
            return Attempt("retry", "aborting")
        return Attempt("retry", "the sink returned FAILURE")

    def components(self) -> list:
        return [*self.sources, *self.processors, *self.sinks]


class Bridge:
    """All pipelines of one config, their metrics endpoint, and the shutdown protocol."""

    def __init__(self, config: BridgeConfig, metrics: BridgeMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or BridgeMetrics()
        self.stop = threading.Event()
        self.abort = threading.Event()
        self.state_dir = config.settings.state_dir or default_state_dir()
        self.once = config.settings.once
        self.memory = MemoryBudget.here()
        self.pipelines = [self._pipeline(name) for name in config.pipelines]
        statedir.prepare(self.state_dir, [c for p in self.pipelines for c in p.components()])  # before shipping

    def _context(self, pipeline: str, spec: ComponentSpec) -> Context:
        return Context(
            name=spec.key,
            metrics=self.metrics,
            stop=self.stop,
            abort=self.abort,
            state_dir=self.state_dir,
            pipeline=pipeline,
            once=self.once,
            poll_interval=self.config.settings.poll_interval,
            retry=self.config.settings.retry,
        )

    def _build(self, pipeline: str, kind: str, keys: list[str]) -> list:
        specs = [self.config.components[kind][key] for key in keys]
        return [spec.cls(spec.config, self._context(pipeline, spec)) for spec in specs]

    def _pipeline(self, name: str) -> Pipeline:
        spec = self.config.pipelines[name]
        sources = self._build(name, "sources", spec.sources)
        progress = None
        if self.once and self.config.settings.progress and sys.stderr.isatty() and len(self.config.pipelines) == 1:
            progress = Progress(sources)
        plan = self._plan(name)
        pool = self._pool(name, plan) if plan is not None else None
        in_process = InProcess.of(plan, self.metrics) if plan is not None and pool is None else None
        if in_process is not None:
            log.info("pipeline %s runs without workers, on the fused path in the bridge process", name)

        def processors() -> list[Processor]:
            return self._build(name, "processors", spec.processors)

        return Pipeline(
            name,
            sources,
            [] if pool or in_process else processors(),
            self._build(name, "sinks", spec.sinks),
            spec.batch,
            self.metrics,
            self.stop,
            self.abort,
            self.config.settings.retry,
            once=self.once,
            poll_interval=self.config.settings.poll_interval,
            progress=progress,
            pool=pool,
            in_process=in_process,
            make_processors=processors if pool or in_process else None,
        )

    def _plan(self, name: str) -> Plan | None:
        """What a worker builds for a pipeline, or None when its processors must stay in the bridge."""
        settings = self.config.settings
        spec = self.config.pipelines[name]
        processors = [self.config.components["processors"][key] for key in spec.processors]
        reason = why_not(processors)
        if reason is not None:
            log.info("pipeline %s runs without workers: %s", name, reason)
            return None
        sinks: list[ComponentSpec | None] = [
            spec_ if hasattr(spec_.cls, "make_encoder") else None
            for spec_ in (self.config.components["sinks"][key] for key in spec.sinks)
        ]
        return Plan(name, processors, sinks, self.state_dir, self.once, settings.poll_interval, settings.retry)

    def _pool(self, name: str, plan: Plan) -> WorkerPool | None:
        """Worker processes for a pipeline, as many as ``workers`` asks and the memory allows."""
        settings = self.config.settings
        count = default_workers() if settings.workers is None else settings.workers
        if count < 1:
            return None
        # a slot holds a batch's lines, then its payloads: OTLP without compression adds ~30%
        slot_bytes = 2 * self.config.pipelines[name].batch.max_bytes
        count = self.memory.workers(count, slot_bytes, name)
        if count < 1:
            return None
        return WorkerPool(count, plan, self.metrics, slot_bytes=slot_bytes)

    def serve_metrics(self) -> None:
        """Serve /metrics, or raise a ConfigError naming the address and why it cannot be had."""
        port, host = self.config.settings.metrics_port, self.config.settings.metrics_host
        if port is None:
            return
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.metrics.registry)
        except OSError as exc:  # in use, not an address of this host, a name that does not resolve
            raise ConfigError(
                f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}; choose another "
                "--metrics-port / settings.metrics_port, or --metrics-host / settings.metrics_host"
            ) from None
        log.info("metrics on http://%s:%d/metrics", host, server.server_port)  # port 0: the one it was given

    def request_stop(self, *_args: object) -> None:
        """First signal: stop reading and finish in-flight work. Second: give up at once."""
        if self.stop.is_set():
            self.abort.set()
            return
        self.stop.set()
        timer = threading.Timer(self.config.settings.shutdown_timeout, self.abort.set)
        timer.daemon = True
        timer.start()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    def run(self) -> bool:
        """Run every pipeline to completion; True when every read batch was delivered."""
        # Every line allocates a few dicts and strings, none of them in reference cycles; the default
        # gen-0 threshold (700) spends ~10% of the CPU on collections that find nothing.
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)
        threads = [threading.Thread(target=p.run, name=f"pipeline-{p.name}", daemon=True) for p in self.pipelines[1:]]
        for thread in threads:
            thread.start()
        try:
            self.pipelines[0].run()
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        finally:
            self.close()
        return all(p.delivered for p in self.pipelines)

    def close(self) -> None:
        timeout = self.config.settings.shutdown_timeout
        for pipeline in self.pipelines:
            for component in pipeline.components():
                _close(component, timeout)


def _close(component: Component, timeout: float) -> None:
    try:
        component.flush(timeout)
        component.shutdown()
    except Exception:  # one component failing to close must not keep the others open
        log.exception("shutting down %s", component.context.name)
