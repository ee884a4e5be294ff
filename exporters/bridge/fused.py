"""A worker's fused path: parsing, trace IDs, the redaction check and every sink's encoding of a line
in one loop, with no Record for the lines that take it.

Through the processors and the encoders one after the other, a line costs a Record, a call per
stage and an attribute read or write for every value a stage hands to the next: about half of a
worker's time. Here a line is parsed, its IDs found (through the trace processor's plan for its key
shape), checked for secrets and encoded (through the OTLP sink's plan for the same shape) with its
values in local variables, and what the bridge needs back is gathered as columns.

Only the standard pipeline takes it: ``parse`` first, then ``trace`` and at most one ``redact``,
each of its own class, and sinks that encode in the worker as the OTLP logs sink and the line sinks
(file, stdout) do. A line that is anything but plain goes through the processors as before (as
Records, with the chunk's other such lines), and is encoded in its place: a line that does not parse
as a JSON object, one a rule redacts, one of a multiline record, a truncated one, one with attributes.
A batch whose lines a processor would expand into several records (OTLP/JSON, CloudWatch payloads)
is left to the stage path whole (``ExpandingLineError``), with nothing counted twice.
The result is the same bytes, changes and counters as the stage path's: tests/bridge/test_fused.py
runs both over the corpus and random lines.
"""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from operator import add
from typing import Any

import orjson

from obsbox import logfields
from obsbox.exporters.bridge.component import Encoding, Processor
from obsbox.exporters.bridge.deferred import Changes, column
from obsbox.exporters.bridge.processors.parse import ParseProcessor
from obsbox.exporters.bridge.processors.redact import RedactProcessor
from obsbox.exporters.bridge.processors.trace import TraceProcessor, file_hashes, nonzero_id
from obsbox.exporters.bridge.record import Origin, Record, context_service
from obsbox.exporters.bridge.sinks import file, otlp, wire

CHUNK = 1024  # lines worked on at a time: as workers.CHUNK, the chunk's objects stay in the CPU's cache


# Per key shape: the reader of its IDs and the form they come from, the keys of its time, level and
# service, and whether the IDs are spliced in (see ``FusedPath._plan``).
Plan = tuple[Callable[[dict[str, Any]], Any] | None, str, str | None, str | None, str | None, bool]
ZERO_TRACE, ZERO_SPAN = "0" * 32, "0" * 16


class ExpandingLineError(Exception):
    """The batch must take the stage path (a line expands into several records)."""


class FusedPath:
    """The fused path of one worker's pipeline. Threading: the worker's one thread."""

    def __init__(
        self, parse: ParseProcessor, trace: TraceProcessor, redact: RedactProcessor | None, order: list[Processor]
    ) -> None:
        self.parse, self.trace, self.redact, self.order = parse, trace, redact, order
        config = parse.config
        self.expanding = frozenset(
            key
            for key, on in (
                ("resourceLogs", config is None or config.expand_otlp),
                ("logEvents", config is None or config.expand_cloudwatch),
            )
            if on
        )
        self.hashes: dict[bytes, tuple[Any, Any]] = {}  # a file's key → its trace and span hashes
        self.plans: dict[tuple[str, ...], Plan] = {}  # key shape → what its lines share

    @classmethod
    def of(cls, processors: Sequence[Processor], encoders: Sequence[Callable[[], Encoding] | None]) -> FusedPath | None:
        """The fused path for these processors and encoders, or None when they are not the standard set."""
        kinds = [type(processor) for processor in processors]
        if not kinds or kinds[0] is not ParseProcessor or kinds.count(TraceProcessor) != 1:
            return None
        if any(kind not in (ParseProcessor, TraceProcessor, RedactProcessor) for kind in kinds):
            return None
        if kinds.count(ParseProcessor) != 1 or kinds.count(RedactProcessor) > 1:
            return None
        if not encoders or not all(make is file.LineEncoding or _otlp_sink(make) is not None for make in encoders):
            return None
        redact = next((p for p in processors if type(p) is RedactProcessor), None)
        trace = next(p for p in processors if type(p) is TraceProcessor)
        return cls(processors[0], trace, redact, list(processors))  # type: ignore[arg-type] # checked above

    def run(self, runs: list, extras: dict[int, Any], encodings: list) -> Changes:
        """Work a packed batch's lines (its ``runs`` and ``extras``, see ``workers.Packed``) into
        ``encodings``; the changes the bridge applies. Raises ``ExpandingLineError`` when the batch
        must take the stage path instead."""
        batch = _Batch(encodings)
        index = 0
        for origin, lines, offsets in run_lines(runs):
            for start in range(0, len(lines), CHUNK):
                chunk = lines[start : start + CHUNK]
                self._chunk(
                    batch, origin=origin, lines=chunk, offsets=offsets[start : start + CHUNK], extras=extras, base=index
                )
                index += len(chunk)
        for source, count in Counter(batch.sources).items():
            self.trace.context.metrics.trace_ids.labels(source).inc(count)
        return Changes(column(batch.trace_ids, 32), column(batch.span_ids, 16), column(batch.parents, 16), batch.sparse)

    def _slow(self, lines: list[bytes], extras: dict[int, Any], base: int) -> set[int]:
        """By index in the chunk, the lines that must go through the processors for what is known
        before parsing: a truncated line, one of a multiline record, or one with a secret."""
        slow = {at - base for at in extras if base <= at < base + len(lines) and (extras[at][0] or extras[at][2])}
        if self.redact is not None:
            for at, tried in self.redact.candidate_lines(lines).items():
                if at not in slow and self.redact.scrub(lines[at], tried)[0] is not lines[at]:
                    slow.add(at)
        return slow

    def _chunk(  # noqa: PLR0912, PLR0915 - one loop, its values in locals: the point of it
        self,
        batch: _Batch,
        *,
        origin: Origin,
        lines: list[bytes],
        offsets: list[int],
        extras: dict[int, Any],
        base: int,
    ) -> None:
        slow = self._slow(lines, extras, base)
        parsed: list[Any] = []
        try:
            parsed = list(map(orjson.loads, lines))  # the usual chunk: every line is JSON
        except orjson.JSONDecodeError:
            parsed = list(map(_loads, lines))
        slow.update(at for at, obj in enumerate(parsed) if type(obj) is not dict)
        for at in slow:
            parsed[at] = None
        for at in range(base, base + len(lines)):  # a container runtime's line: its attributes beside it
            if at in extras and parsed[at - base] is not None:
                parsed[at - base] = (parsed[at - base], extras[at][1])
        records: Any = iter(())
        if slow:
            records, sparse = self._processed(
                origin=origin, lines=lines, offsets=offsets, extras=extras, base=base, slow=sorted(slow)
            )
            batch.sparse.update(sparse)

        hashes = self.hashes.get(origin.key)
        if hashes is None:
            if len(self.hashes) > 10_000:
                self.hashes.clear()
            hashes = self.hashes[origin.key] = file_hashes(origin.key)
        trace_hash, span_hash = hashes
        trace_context, enriched, inject = self.trace.trace_context, self.trace.enriched_line, self.trace.config.inject
        splice_trace, splice_span = self.trace.splice_trace, self.trace.splice_span
        trace_ids, span_ids, parents, sources = batch.trace_ids, batch.span_ids, batch.parents, batch.sources
        plans, plan_of = self.plans, self._plan
        # the OTLP sinks: the first one's state in locals (written back around anything that reads it)
        otlps = [(sink, encoding, observed, *self._file(sink, origin)) for sink, encoding, observed in batch.otlps]
        others = otlps[1:]
        first = otlps[0] if otlps else None
        if first is not None:
            sink, encoding, observed, attrs, unnamed = first
            levels, default_service, limit = sink.levels, sink.default_service, sink.config.max_request_bytes
            size, count, groups = encoding.size, encoding.count, encoding.open
        log_record, iso_ns, resource = wire.log_record, logfields.iso_ns, origin.resource
        wanted: list[list[bytes]] = [[] for _ in batch.line_parts]  # per line sink: the chunk's lines
        for at, (raw, offset, obj) in enumerate(zip(lines, offsets, parsed, strict=True)):
            if type(obj) is dict:
                fields, attributes = obj, None
            elif obj is not None:  # with attributes
                fields, attributes = obj
                batch.sparse[base + at] = (None, None, attributes, b"")  # as ``Changes.entry`` has it
            else:
                rec = next(records)
                trace_ids.append(rec.trace_id)
                span_ids.append(rec.span_id)
                parents.append(rec.parent_span_id)
                if first is not None:
                    encoding.size, encoding.count = size, count
                for sink_, encoding_, *_ in otlps:
                    sink_.add(encoding_, [rec])
                if first is not None:
                    size, count, groups = encoding.size, encoding.count, encoding.open
                for out in wanted:
                    out.append(rec.whole() if rec.rest else rec.line())
                continue
            planned = True
            shape = tuple(fields)
            plan = plans.get(shape)
            if plan is None:
                plan = plan_of(shape, fields)
            read, source, time_key, level_key, service_key, splice = plan
            ctx = read(fields) if read is not None else None
            if ctx is None:
                ctx, source, own = trace_context(raw, fields)
                if own is not fields:  # read again exactly: its values may differ from the plan's
                    fields, planned = own, False
            if ctx is None:
                identity = offset.to_bytes(8, "big")
                digest = trace_hash.copy()
                digest.update(identity)
                trace_id, parent = digest.hexdigest(), None
                if trace_id == ZERO_TRACE:  # W3C forbids it (see ``nonzero_id``)
                    trace_id = nonzero_id(trace_id)
                digest = span_hash.copy()
                digest.update(identity)
                span_id = digest.hexdigest()
                if span_id == ZERO_SPAN:
                    span_id = nonzero_id(span_id)
            else:
                trace_id, span_id, parent = ctx
                if span_id is None:
                    digest = span_hash.copy()
                    digest.update(offset.to_bytes(8, "big"))
                    span_id = digest.hexdigest()
                    if span_id == ZERO_SPAN:
                        span_id = nonzero_id(span_id)
            trace_ids.append(trace_id)
            span_ids.append(span_id)
            parents.append(parent)
            sources.append(source)
            if first is not None:
                # time, level and service as ``OtlpSink._well_known`` reads them, when they are as usual
                item = None
                if planned and attributes is None:
                    value = fields[time_key] if time_key else None
                    ts = iso_ns(value) if type(value) is str else None
                    level = fields[level_key] if level_key else None
                    severity = levels.get(level) if type(level) is str else None
                    service = default_service or (unnamed if service_key is None else fields[service_key])
                    if severity is None or type(service) is not str or not service:
                        pass
                    elif ts:
                        item = log_record(ts, observed, severity, raw, attrs, trace_id, span_id)
                    elif time_key is None:  # no time of its own (see ``otlp.untimed``)
                        read_ns = origin.read_ns(offset)
                        seen = wire.observed_field(read_ns) if read_ns else observed
                        item = log_record(0, seen, severity, raw, attrs, trace_id, span_id)
                if item is None:  # anything less usual: the sink's own reading
                    encoding.size, encoding.count = size, count
                    sink.add_line(encoding, observed, fields, raw, origin, offset, trace_id, span_id, attributes)
                    size, count, groups = encoding.size, encoding.count, encoding.open
                else:
                    group = groups.get((service, resource))
                    if group is None:
                        group = groups[service, resource] = []
                    group.append(item)
                    size += len(raw) + 120
                    count += 1
                    if size >= limit:
                        encoding.size, encoding.count = size, count
                        encoding.cut()
                        size, count, groups = encoding.size, encoding.count, encoding.open
                for sink_, encoding_, observed_, *_ in others:
                    sink_.add_line(encoding_, observed_, fields, raw, origin, offset, trace_id, span_id, attributes)
            if wanted:
                if not inject:
                    line = raw
                elif splice and planned:
                    end = raw.rfind(b"}")
                    line = b"".join(
                        (raw[:end], splice_trace, trace_id.encode(), splice_span, span_id.encode(), b'"', raw[end:])
                    )
                else:
                    line = enriched(raw, fields, trace_id, span_id) or raw
                for out in wanted:
                    out.append(line)
        if first is not None:
            encoding.size, encoding.count = size, count
        for parts, out in zip(batch.line_parts, wanted, strict=True):
            parts.append(b"\n".join(out) + b"\n" if out else b"")

    def _processed(
        self,
        *,
        origin: Origin,
        lines: list[bytes],
        offsets: list[int],
        extras: dict[int, Any],
        base: int,
        slow: list[int],
    ) -> tuple[Iterator[Record], dict[int, tuple]]:
        """The chunk's ``slow`` lines as Records through the processors, in order, and their changes
        by index in the batch (as ``Changes.of`` gives them)."""
        records = []
        for at in slow:
            rec = Record(lines[at], origin, offsets[at])
            if base + at in extras:
                rec.truncated, rec.attributes, rec.rest = extras[base + at]
            records.append(rec)
        originals = [rec.raw for rec in records]
        out = records
        for processor in self.order:
            out = processor.process(out)
        if len(out) != len(records) or any(a is not b for a, b in zip(out, records, strict=True)):
            raise ExpandingLineError("a processor expanded a line into several records")
        sparse = {
            base + at: entry
            for at, rec, raw in zip(slow, records, originals, strict=True)
            if (entry := Changes.entry(rec, raw)) is not None
        }
        return iter(records), sparse

    def _plan(self, shape: tuple[str, ...], fields: dict[str, Any]) -> Plan:
        """What the lines of one key shape share: the reader of their IDs (None: ``trace_context``)
        and the form it reads, the keys of their time, level and service, and whether the IDs are
        spliced in before the line's last ``}`` (a non-empty object without the ID fields; see
        ``TraceProcessor.enriched``)."""
        if not self.expanding.isdisjoint(shape):
            raise ExpandingLineError("a line may expand into several records")
        if len(self.plans) >= 4096:  # lines whose keys are data: start over
            self.plans.clear()
        tf, sf = self.trace.tf, self.trace.sf
        read, source = self.trace.shape_reader(shape, fields)
        plan = self.plans[shape] = (
            read,
            source,
            *otlp.well_known_keys(fields),
            bool(fields) and tf not in fields and sf not in fields,
        )
        return plan

    def _file(self, sink: otlp.OtlpSink, origin: Origin) -> tuple[bytes, str]:
        """The OTLP attributes of a plain line of this file, and the service of a line that names none."""
        attrs = sink.file_attrs.get(origin.path) or sink.file_attributes(origin)
        return attrs, context_service(None, origin) or "unknown_service"


def _loads(raw: bytes) -> Any:
    """The line's JSON value, or None when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


class _Batch:
    """What a batch's fused run gathers: the columns the bridge gets back, and the encodings."""

    def __init__(self, encodings: list) -> None:
        self.trace_ids: list[str | None] = []
        self.span_ids: list[str | None] = []
        self.parents: list[str | None] = []
        self.sources: list[str] = []
        self.sparse: dict[int, tuple] = {}
        self.otlps: list[tuple[otlp.OtlpSink, otlp.Encoding, bytes]] = [
            (encoding.sink, encoding, wire.observed_field(encoding.now))  # type: ignore[misc] # OtlpSink's, by ``of``
            for encoding in encodings
            if type(encoding) is otlp.Encoding
        ]
        self.line_parts = [encoding.parts for encoding in encodings if type(encoding) is file.LineEncoding]


def _otlp_sink(make: Callable[[], Encoding] | None) -> otlp.OtlpSink | None:
    """The OTLP logs sink whose ``encoding`` ``make`` is, else None."""
    sink = getattr(make, "__self__", None)
    return sink if type(sink) is otlp.OtlpSink else None


def run_lines(runs: list) -> list[tuple[Origin, list[bytes], list[int]]]:
    """A packed batch's runs as (origin, lines, offsets), without a Record (see ``workers.unpack``)."""
    out = []
    for origin, data, lengths, offsets in runs:
        if lengths is None:  # a Block: whole lines as read, the first at ``offsets``
            lines = data.split(b"\n")
            lines.pop()  # after the last newline: nothing
            starts = list(map(add, itertools.accumulate(map(len, lines), initial=offsets), itertools.count()))
            starts.pop()
            out.append((origin, lines, starts))
            continue
        sizes, where = array("q"), array("q")
        sizes.frombytes(lengths)
        where.frombytes(offsets)
        ends = itertools.accumulate(sizes, initial=0)
        out.append((origin, [data[a:b] for a, b in itertools.pairwise(ends)], where.tolist()))
    return out
