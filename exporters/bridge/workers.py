"""Worker processes: the per-line work of a pipeline (parse, trace, redact, and the sinks' encoding)
spread over the machine's cores, with the reader and the committer staying in order in the bridge.

The bridge's Python is held to one core by the GIL. Reading (a few byte splits per line) and
delivering (socket writes, which release the GIL) are cheap; parsing, finding trace IDs, redacting
and encoding OTLP are not. So the pipeline thread reads a batch, hands it to a worker process, and
reads the next one while the workers run. Results come back in the order the batches were read;
each is delivered to every sink and committed in that order, one batch in flight at the sinks, as
without workers. A ``kill -9`` therefore still duplicates at most the batch being delivered: the
batches still in the workers were never written anywhere.

What crosses the process boundary is small: a batch goes out as runs of lines of one file (the
bytes as read, with each file's :class:`Origin` written once), through a shared-memory slot
(``slots``); what comes back is,
per record, what the processors changed (IDs, a redacted line, a parse error), and for each sink
that can encode in advance (OTLP, file, stdout) its ready request bodies or bytes. Only when a sink
needs whole records (Loki, memory, plugins) do the parsed fields travel back too. With the standard
processors and sinks, a worker runs its lines through one loop instead of the stages (``fused``).

A worker that dies (SIGKILL, the OOM killer, a crash in a C extension) breaks the pool: the bridge
logs it, counts ``obsbox_bridge_errors_total{kind="worker_crash"}``, starts new workers and hands
them every batch not yet delivered, in order. Nothing was committed for those batches, so nothing
is lost. A batch that kills its worker three times is processed in the bridge itself.

Workers are started fresh (``spawn``: about 0.2 s of imports each), not forked: a fork copies a
process whose other threads (the tail watcher, the export thread, the metrics server) may hold a
lock at that instant, and the child can hang on it for good. They are the bridge's children, joined
when it stops (so its ``rusage`` counts their CPU), ignore SIGINT (the bridge stops them), and die
with the bridge (``PR_SET_PDEATHSIG`` on Linux, else a watchdog thread), so a ``kill -9`` of the
bridge leaves none behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import itertools
import logging
import math
import multiprocessing
import os
import re
import resource
import signal
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from obsbox.exporters.bridge import slots
from obsbox.exporters.bridge.component import ComponentSpec, Context, Encoding, Processor, Sink
from obsbox.exporters.bridge.deferred import Changes, Deferred
from obsbox.exporters.bridge.fused import ExpandingLineError, FusedPath
from obsbox.exporters.bridge.record import Block, Lines, Record, records_in
from obsbox.exporters.bridge.tally import Increment, Tally

if TYPE_CHECKING:  # a worker imports this module, and keeps its counts without prometheus-client (``tally``)
    from obsbox.exporters.bridge.metrics import BridgeMetrics

log = logging.getLogger(__name__)

# processors whose only effects are on the records and on these counters: safe to run in a worker
WORKER_PROCESSORS = frozenset({"parse", "trace", "redact"})
MAX_CRASHES_PER_BATCH = 3
# Records run through every processor and encoder a chunk at a time: a chunk's parsed lines still
# sit in the CPU's cache when the next stage reads them, where a whole batch's (megabytes) would not.
# 1024 measured best (scripts/bench_bridge, BENCHMARKS.md); 64 loses to per-call costs.
CHUNK = 1024
PR_SET_PDEATHSIG = 1


@dataclass
class Packed:
    """A batch on its way to a worker, as a few objects rather than several per line: per run of
    lines from one file, the file's origin, the lines, and where they start; and the rare per-line
    extras (truncated, attributes, a multiline record's ``rest``) by index.

    A run is (origin, data, lengths, offsets): a :class:`Block` as read, (origin, its bytes, None,
    its offset); or Records, (origin, their lines joined, their lengths, their offsets), the
    lengths and offsets as arrays of int64. ``data`` is a ``slots.Part`` while in a slot."""

    runs: list[tuple[Any, Any, bytes | None, bytes | int]]
    extras: dict[int, tuple[bool, dict[str, str] | None, bytes]]
    slot: str | None = None  # the shared-memory slot holding the lines (see ``slots``)


def available_cores(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The cores this process may use: its affinity mask (``taskset``, cpusets), capped by a cgroup v2
    CPU quota (``docker run --cpus``, Kubernetes limits), which the mask does not show."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, math.ceil(int(quota) / int(period))))


def default_workers() -> int:
    """One worker per available core; none on a single core, where a worker only adds copying."""
    cores = available_cores()
    return cores if cores > 1 else 0


# What one worker costs: its peak RSS (41 MiB measured with the default batch in parts, BENCHMARKS.md;
# longer lines or several sinks take more), and two shared-memory slots' worth of /dev/shm (each
# holds only the part written to it, far less than its size: a bound, not an estimate).
WORKER_RSS_BYTES = 48 * 1024 * 1024
SLOTS_PER_WORKER = 2
_MEM_AVAILABLE = re.compile(r"^MemAvailable:\s+(\d+) kB$", re.MULTILINE)


def available_memory(root: Path = Path("/")) -> int | None:
    """Bytes this process may still take: the kernel's ``MemAvailable``, capped by what its cgroup's
    memory limit leaves (v2 ``memory.max`` - ``memory.current``, v1 ``memory.limit_in_bytes`` -
    ``memory.usage_in_bytes``: ``docker run -m``, Kubernetes limits). None where none can be read.
    ``root``: where ``/proc`` and ``/sys`` are (tests)."""
    figures = []
    found = _MEM_AVAILABLE.search(_text(root / "proc/meminfo"))
    if found:
        figures.append(int(found.group(1)) * 1024)
    for line in _text(root / "proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, names = root / "sys/fs/cgroup", ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            base, names = root / "sys/fs/cgroup/memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        limit, usage = (_text(base / path.lstrip("/") / name).strip() for name in names)
        if limit.isdigit() and usage.isdigit():  # v2 writes "max" for no limit
            figures.append(max(0, int(limit) - int(usage)))
    return min(figures) if figures else None


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def worker_bytes(slot_bytes: int) -> int:
    """The memory one worker takes with slots of ``slot_bytes``."""
    return WORKER_RSS_BYTES + SLOTS_PER_WORKER * slot_bytes


class MemoryBudget:
    """What the bridge's workers may still take, shared by its pipelines.

    A pipeline gets the workers it asks for, or as many as the rest of the memory holds, and a log
    line says so: 1000 workers on a small host would take minutes to start, then meet the OOM
    killer. Lowered, not refused, as a runtime sizes its threads to its host: one config then
    serves a large host and a small container."""

    def __init__(self, available: int | None) -> None:
        self.left = available  # None: unknown, no cap

    @classmethod
    def here(cls) -> MemoryBudget:
        """The memory available to this process now."""
        return cls(available_memory())

    def workers(self, count: int, slot_bytes: int, pipeline: str) -> int:
        each = worker_bytes(slot_bytes)
        if self.left is None:
            return count
        fits = min(count, self.left // each)
        if fits < count:
            log.warning(
                "pipeline %s: %d workers instead of %d: each takes about %d MiB (%d MiB of memory and %d "
                "shared-memory slots of %d MiB), and %d MiB are available%s",
                pipeline,
                fits,
                count,
                each >> 20,
                WORKER_RSS_BYTES >> 20,
                SLOTS_PER_WORKER,
                slot_bytes >> 20,
                self.left >> 20,
                "; it runs without workers" if fits == 0 else "",
            )
        self.left -= fits * each
        return fits


def why_not(processors: Sequence[ComponentSpec]) -> str | None:
    """None when a pipeline's processors can run in workers, else the reason they cannot."""
    others = [spec.key for spec in processors if spec.key.split("/", 1)[0] not in WORKER_PROCESSORS]
    if others:
        return f"processors {others} keep state or metrics of their own and run in the bridge"
    return None


# ---------------------------------------------------------------- packing


def pack(lines: Lines) -> Packed:
    runs: list[tuple[Any, Any, bytes | None, bytes | int]] = []
    extras: dict[int, tuple[bool, dict[str, str] | None, bytes]] = {}
    index = 0
    for is_block, group in itertools.groupby(lines.items, key=lambda item: type(item) is Block):
        if is_block:
            for block in group:
                runs.append((block.origin, block.data, None, block.offset))  # type: ignore[union-attr] # a Block
                index += block.count  # type: ignore[union-attr] # a Block
            continue
        records: list[Record] = list(group)  # type: ignore[arg-type] # not Blocks
        for origin, run in itertools.groupby(records, key=attrgetter("origin")):
            same = list(run)
            raws = [rec.raw for rec in same]
            runs.append(
                (
                    origin,
                    b"".join(raws),
                    array("q", [len(raw) for raw in raws]).tobytes(),
                    array("q", [rec.offset for rec in same]).tobytes(),
                )
            )
        extras.update(
            (index + at, (rec.truncated, rec.attributes, rec.rest))
            for at, rec in enumerate(records)
            if rec.truncated or rec.attributes is not None or rec.rest
        )
        index += len(records)
    return Packed(runs, extras)


def unpack(packed: Packed) -> list[Record]:
    records: list[Record] = []
    for origin, data, lengths, offsets in packed.runs:
        if lengths is None:  # a Block: whole lines as read
            records += records_in(data, origin, offsets)  # type: ignore[arg-type] # a Block's offset
            continue
        sizes, where = array("q"), array("q")
        sizes.frombytes(lengths)
        where.frombytes(offsets)  # type: ignore[arg-type] # Records' offsets
        lines = [data[start:end] for start, end in itertools.pairwise(itertools.accumulate(sizes, initial=0))]
        records.extend(map(Record, lines, itertools.repeat(origin), where))
    for index, (truncated, attributes, rest) in packed.extras.items():
        rec = records[index]
        rec.truncated, rec.attributes, rec.rest = truncated, attributes, rest
    return records


@dataclass
class WorkResult:
    """What a worker sends back for one batch.

    ``changes`` when the processors kept the batch's records, else ``records``: each record's state
    as a tuple. ``payloads``: per sink, what it encoded in advance, or None. ``counters``: increments
    of the bridge's counters. ``pid``, ``max_rss`` (KiB) and ``cpu`` (seconds): the worker so far."""

    changes: Changes | None
    records: list[tuple] | None
    payloads: list[Any]
    counters: list[Increment]
    pid: int
    max_rss: int
    cpu: float

    def applied(self, lines: Lines, whole: bool) -> Sequence[Record]:
        """The bridge's lines as the worker's processors left them: Records made and changed at once
        when a sink needs whole records, else when first read (see :class:`Deferred`)."""
        if self.changes is None:
            out = []
            for raw, offset, origin, truncated, *rest in self.records or []:
                rec = Record(raw, origin, offset, truncated)
                rec.trace_id, rec.span_id, rec.parent_span_id, rec.parse_error, rec.attributes = rest[:5]
                fields, line, rec.rest = rest[5:]
                if fields is not None:
                    rec.fields = fields
                rec.out = line
                out.append(rec)
            return out
        if whole:
            records = lines.records()
            self.changes.apply(records)
            return records
        return Deferred(lines, self.changes)


# ---------------------------------------------------------------- the worker side


@dataclass
class Plan:
    """What a worker builds at start: the pipeline's processors and the sinks' encoders."""

    pipeline: str
    processors: list[ComponentSpec]
    sinks: list[ComponentSpec | None]  # None: the sink needs whole records, and encodes in the bridge
    state_dir: Any
    once: bool
    poll_interval: float
    retry: Any


@dataclass
class Worker:
    processors: list[Processor]
    encoders: list[Callable[[], Encoding] | None]  # per sink, a batch's encoding; None: encoded in the bridge
    metrics: Tally
    whole: bool  # some sink needs whole records
    fused: FusedPath | None = None  # the standard pipeline's one loop per line (see ``fused``)


_here: dict[str, Worker] = {}  # in a worker process: "worker" → its processors and encoders


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) == 0:
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)
            return
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass

    def watch() -> None:  # pragma: no cover - not Linux
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _start(plan: Plan, parent: int) -> None:
    """Worker initializer: signals, parent watch, then the processors and encoders of ``plan``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group: the bridge stops us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent(parent)
    worker = build(plan)
    gc.freeze()  # as the bridge does (runner.py): the per-line objects hold no cycles
    gc.set_threshold(50_000, 20, 20)
    _here["worker"] = worker


def build(plan: Plan) -> Worker:
    """The processors and encoders of ``plan``, counting into a :class:`Tally` whose increments go
    back with each result (see ``run``)."""
    metrics = Tally()

    def context(spec: ComponentSpec) -> Context:
        return Context(
            name=spec.key,
            metrics=cast("BridgeMetrics", metrics),  # these processors touch only the counters a Tally has
            state_dir=plan.state_dir,
            pipeline=plan.pipeline,
            once=plan.once,
            poll_interval=plan.poll_interval,
            retry=plan.retry,
        )

    processors = [spec.cls(spec.config, context(spec)) for spec in plan.processors]
    encoders = [encoder_of(spec.cls, spec.config, context(spec)) if spec else None for spec in plan.sinks]
    return Worker(
        processors, encoders, metrics, whole=any(e is None for e in encoders), fused=FusedPath.of(processors, encoders)
    )


def encoder_of(cls: type[Sink], config: Any, context: Context) -> Callable[[], Encoding] | None:
    """The sink's maker of batch encodings (``make_encoder``), or None when it needs whole records in
    the bridge."""
    make = getattr(cls, "make_encoder", None)
    return make(config, context) if make is not None else None


def process(packed: Packed) -> WorkResult:
    """Run in a worker: one batch, handed over through a slot or the pipe (see ``run``)."""
    return run(_here["worker"], slots.lines_from(packed))  # _here: set by _start, every worker's initializer


def run(worker: Worker, packed: Packed) -> WorkResult:
    """The fused path where it serves (see ``fused``), else the processors, then every sink's
    encoder, over one batch."""
    if worker.fused is not None:
        encodings = [make() if make is not None else None for make in worker.encoders]
        try:
            changes = worker.fused.run(packed.runs, packed.extras, encodings)
        except ExpandingLineError:
            worker.metrics.drain()  # the fused attempt's counts: dropped, the stage path counts again
        else:
            return _result(worker, changes, None, encodings, packed.slot)
    return _staged(worker, packed)


def _staged(worker: Worker, packed: Packed) -> WorkResult:
    """The processors, then every sink's encoder, over a batch of Records."""
    encodings = [make() if make is not None else None for make in worker.encoders]
    originals = unpack(packed)
    raws = [rec.raw for rec in originals]
    records: list[Record] = []
    for start in range(0, len(originals), CHUNK):
        chunk = originals[start : start + CHUNK]
        for processor in worker.processors:
            chunk = processor.process(chunk)
        for encoding in encodings:
            if encoding is not None:
                encoding.add(chunk)
        records += chunk
    whole = worker.whole
    changes = full = None
    if len(records) == len(originals) and all(a is b for a, b in zip(records, originals, strict=True)):
        changes = Changes.of(records, raws, whole)
    else:
        full = [
            (
                rec.raw,
                rec.offset,
                rec.origin,
                rec.truncated,
                rec.trace_id,
                rec.span_id,
                rec.parent_span_id,
                rec.parse_error,
                rec.attributes,
                rec.fields if whole else None,
                rec.line() if whole and rec.injector is not None else None,
                rec.rest,
            )
            for rec in records
        ]
    return _result(worker, changes, full, encodings, packed.slot)


def _result(
    worker: Worker, changes: Changes | None, full: list[tuple] | None, encodings: list, slot: str | None
) -> WorkResult:
    payloads = slots.put([encoding.payload() if encoding is not None else None for encoding in encodings], slot)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    return WorkResult(changes, full, payloads, worker.metrics.drain(), os.getpid(), peak_rss(usage), cpu)


def peak_rss(usage: resource.struct_rusage) -> int:
    """This process's peak RSS in KiB: ``VmHWM`` where ``/proc`` has it. Not ``ru_maxrss``, which a
    process keeps across fork and exec: a worker's would be at least the bridge's RSS when it
    started the worker, a bridge's at least that of whatever started it."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        pass
    return usage.ru_maxrss  # pragma: no cover - not Linux


def _ready(hold: float) -> int:
    """Run in a worker: answer once started; holding it a moment makes the pool start the others."""
    time.sleep(hold)
    return os.getpid()


def add_counters(metrics: BridgeMetrics, increments: list[Increment]) -> None:
    """Add a worker's counter increments to the bridge's own metrics."""
    for attr, values, delta in increments:
        counter = getattr(metrics, attr)
        (counter.labels(*values) if values else counter).inc(delta)


# ---------------------------------------------------------------- the bridge side


def _unblock_call_queue(executor: ProcessPoolExecutor | None) -> None:
    """Let a broken pool's queue feeder thread finish (CPython gh-94777, fixed in 3.12 and later 3.11
    releases, not in Debian 12's 3.11.2): a batch it was writing when its worker died is never read,
    the write blocks for good, and joining the pool's threads at exit hangs the bridge. With the read
    end closed the write fails instead (the batch is handed to the new workers anyway)."""
    queue = getattr(executor, "_call_queue", None)
    if queue is None or hasattr(queue, "_terminate_broken"):  # this Python does it itself
        return
    reader = getattr(queue, "_reader", None)
    if reader is not None:
        with contextlib.suppress(OSError):
            reader.close()


@dataclass
class Work:
    """A batch handed to the workers, kept until it is delivered (a crash hands it out again)."""

    lines: Lines
    packed: Packed | None
    checkpoints: dict
    started: float
    future: Future | None = None
    crashes: int = 0
    slot: slots.Slot | None = None  # holds its lines, then its payloads, until its result is collected
    done: tuple[Sequence[Record], list | None] | None = None  # processed in the bridge: records, payloads


class InProcess:
    """A worker's fused path run in the bridge process itself, for a pipeline without worker
    processes (one core, ``workers: 0``, too little memory): the same loop and the same bytes, with
    nothing handed over. Through the stages instead, a line cost the bridge 1.2 CPU-s per 100k
    lines against 0.8-0.9 in workers (BENCHMARKS.md, scaling).

    Threading: used from the pipeline thread only."""

    def __init__(self, worker: Worker, metrics: BridgeMetrics) -> None:
        self.worker = worker
        self.metrics = metrics

    @classmethod
    def of(cls, plan: Plan, metrics: BridgeMetrics) -> InProcess | None:
        """None when the pipeline does not take the fused path: a sink needs whole records, or the
        processors are not the standard set (see ``FusedPath.of``)."""
        if any(spec is None for spec in plan.sinks):
            return None
        worker = build(plan)
        return cls(worker, metrics) if worker.fused is not None else None

    def process(self, lines: Lines) -> tuple[Sequence[Record], list | None]:
        """The batch's records as the processors leave them (made only when a sink reads them), and
        what each sink encoded in advance; the counts go to the bridge's metrics."""
        result = run(self.worker, pack(lines))
        add_counters(self.metrics, result.counters)
        return result.applied(lines, whole=False), result.payloads


class WorkerPool:
    """``count`` worker processes for one pipeline; batches in, results in submission order.

    Threading: used from the pipeline thread only."""

    def __init__(self, count: int, plan: Plan, metrics: BridgeMetrics, slot_bytes: int = 0) -> None:
        if count < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.count = count
        self.plan = plan
        self.whole = any(spec is None for spec in plan.sinks)  # a sink needs whole records
        self.metrics = metrics
        self.executor: ProcessPoolExecutor | None = None
        self.peak_rss: dict[int, int] = {}  # worker pid → peak RSS in KiB
        self.cpu: dict[int, float] = {}  # worker pid → CPU seconds
        self.crashes = 0
        self.slots = slots.Slots(slot_bytes, enabled=None if slot_bytes > 0 else False)

    def _executor(self) -> ProcessPoolExecutor:
        if self.executor is None:
            self.executor = ProcessPoolExecutor(
                self.count,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=(self.plan, os.getpid()),
            )
        return self.executor

    def start(self) -> None:
        """Start every worker now rather than on demand: one started mid-stream (about 0.2 s of
        imports, seconds on a loaded machine) held up the batches behind it. Not waited for: the
        source must start following its files at once (a rotation meanwhile would go unseen)."""
        executor = self._executor()
        for _ in range(self.count):  # each ping holds its worker a moment, so the pool starts the next
            executor.submit(_ready, 0.05)

    def submit(self, work: Work) -> None:
        if work.packed is None:  # processed in the bridge (no pool): nothing to hand out
            return
        if work.slot is None:
            work.slot = self.slots.take()
        shipped = slots.lines_into(work.packed, work.slot) if work.slot is not None else None
        if shipped is None:  # too big for a slot: through the pipe
            self._release(work)
        try:
            work.future = self._executor().submit(process, shipped or work.packed)
        except BrokenProcessPool:
            work.future = None  # picked up by result(), which restarts the pool

    def result(self, work: Work, pending: Sequence[Work]) -> WorkResult | None:
        """The worker's result for ``work`` (the oldest batch), restarting crashed workers as needed.

        ``pending`` are the later batches, handed out again after a restart. None: this batch
        crashed its worker too often; the caller processes it in the bridge."""
        while True:
            try:
                if work.future is None:
                    raise BrokenProcessPool("the pool was broken when the batch was handed out")
                result = work.future.result()
            except BrokenProcessPool as exc:
                work.crashes += 1
                self._restart(exc, [work, *pending])
                if work.crashes >= MAX_CRASHES_PER_BATCH:
                    log.error("a batch crashed its worker %d times: processing it in the bridge", work.crashes)
                    return None
                continue
            if work.slot is not None:
                result.payloads = slots.taken(result.payloads, work.slot)
                self._release(work)
            self.peak_rss[result.pid] = max(self.peak_rss.get(result.pid, 0), result.max_rss)
            self.cpu[result.pid] = result.cpu
            add_counters(self.metrics, result.counters)
            return result

    def _release(self, work: Work) -> None:
        if work.slot is not None:
            self.slots.give(work.slot)
            work.slot = None

    def _restart(self, exc: BaseException, pending: Sequence[Work]) -> None:
        self.crashes += 1
        self.metrics.errors.labels("worker_crash").inc()
        log.error(
            "a worker process died (%s); starting new workers and handing them the %d batches not yet delivered",
            exc,
            len(pending),
        )
        _unblock_call_queue(self.executor)
        self.shutdown(wait=False)
        for work in pending:
            if work.slot is not None:  # the old pool's workers may not be gone yet (see ``slots``)
                self.slots.discard(work.slot)
                work.slot = None
            if work.crashes < MAX_CRASHES_PER_BATCH:
                self.submit(work)

    def pids(self) -> list[int]:
        executor = self.executor
        processes = getattr(executor, "_processes", None) or {}
        return list(processes)

    def shutdown(self, wait: bool = True) -> None:
        executor, self.executor = self.executor, None
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)

    def close(self) -> None:
        """Stop the workers and remove the shared-memory slots."""
        self.shutdown()
        self.slots.close()

    def report(self) -> str:
        """Workers, their peak RSS, the bridge process's own, crashes, and the slots (in /dev/shm,
        counted in no process's RSS: see ``slots``)."""
        rss = sorted(self.peak_rss.values(), reverse=True)
        mib = ", ".join(f"{kib / 1024:.1f}" for kib in rss) or "none"
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = ", ".join(f"{seconds:.2f}" for seconds in sorted(self.cpu.values(), reverse=True)) or "none"
        return (
            f"{self.count} workers; peak RSS MiB: workers [{mib}], bridge {peak_rss(usage) / 1024:.1f}; "
            f"CPU s: workers [{cpu}], bridge {usage.ru_utime + usage.ru_stime:.2f}; crashes: {self.crashes}; "
            f"{self.slots.report()}"
        )
