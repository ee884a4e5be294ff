"""A batch's records as a worker process left them, applied in the bridge only when needed.

A worker sends back what its processors changed (:class:`Changes`); sinks that took a payload the
worker encoded look at records only on a failure path (see :class:`Deferred`). Kept apart
from ``workers`` so that sinks can import it without the process machinery.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from obsbox.exporters.bridge.record import Lines, Record

Column = str | list[str | None]  # IDs of one width joined into one string, else as they are


def column(ids: list[str | None], width: int) -> Column:
    """The IDs of a batch as one string when each is ``width`` characters (the usual case: pickling
    one string costs a fraction of thousands), else the list."""
    if ids and None not in ids and set(map(len, ids)) == {width}:  # type: ignore[arg-type] # no None
        return "".join(ids)  # type: ignore[arg-type] # no None, checked above
    return ids


def ids_of(values: Column, width: int) -> list[str | None]:
    """A :func:`column` as the list of IDs it came from."""
    if type(values) is str:
        return [values[start : start + width] for start in range(0, len(values), width)]
    return values  # type: ignore[return-value] # a list: the IDs as they were


@dataclass
class Changes:
    """What the processors did to a batch whose records they kept (in order): the IDs as columns,
    and by index the rare rest (a redacted line, a parse error, attributes); the parsed fields and
    enriched lines only when a sink needs whole records."""

    trace_ids: Column
    span_ids: Column
    parents: Column
    sparse: dict[int, tuple[bytes | None, str | None, dict[str, str] | None, bytes]]  # ..., rest
    fields: list[dict[str, Any] | None] | None = None
    lines: list[bytes | None] | None = None

    @classmethod
    def of(cls, records: list[Record], originals: list[bytes], whole: bool) -> Changes:
        sparse = {
            index: entry
            for index, (rec, raw) in enumerate(zip(records, originals, strict=True))
            if (rec.parse_error is not None or rec.attributes is not None or rec.raw is not raw or rec.rest)
            and (entry := cls.entry(rec, raw)) is not None
        }
        return cls(
            column([rec.trace_id for rec in records], 32),
            column([rec.span_id for rec in records], 16),
            column([rec.parent_span_id for rec in records], 16),
            sparse,
            [rec.fields for rec in records] if whole else None,
            [rec.line() if rec.injector is not None else None for rec in records] if whole else None,
        )

    @staticmethod
    def entry(rec: Record, raw: bytes) -> tuple[bytes | None, str | None, dict[str, str] | None, bytes] | None:
        """The sparse entry of a record read as ``raw``, or None when it has none (the usual case)."""
        if rec.parse_error is not None or rec.attributes is not None or rec.raw is not raw or rec.rest:
            return (rec.raw if rec.raw is not raw else None, rec.parse_error, rec.attributes, rec.rest)
        return None

    def apply(self, records: list[Record]) -> None:
        trace_ids, span_ids, parents = ids_of(self.trace_ids, 32), ids_of(self.span_ids, 16), ids_of(self.parents, 16)
        for rec, trace_id, span_id, parent in zip(records, trace_ids, span_ids, parents, strict=True):
            rec.trace_id, rec.span_id, rec.parent_span_id = trace_id, span_id, parent
        for index, (raw, error, attributes, rest) in self.sparse.items():
            rec = records[index]
            if raw is not None:
                rec.raw = raw
            rec.parse_error, rec.attributes, rec.rest = error, attributes, rest
        if self.fields is not None:
            for rec, fields in zip(records, self.fields, strict=True):
                rec.fields = fields
        if self.lines is not None:
            for rec, line in zip(records, self.lines, strict=True):
                rec.out = line


class Deferred(Sequence[Record]):
    """A batch's lines in the bridge, made into Records with a worker's :class:`Changes` applied
    only when something reads them.

    Sinks that took a payload encoded in a worker only read records on a failure path (a rejection
    to match, a dead letter to write); the common path never pays for cutting lines into Records or
    applying IDs it does not read. Its length is known without them, and slices are views of the
    same batch: reading any record makes the whole batch's."""

    def __init__(
        self, lines: Lines, changes: Changes | None, span: range | None = None, root: Deferred | None = None
    ) -> None:
        self.lines = lines
        self.changes = changes
        self.span = range(len(lines)) if span is None else span
        self.root = root
        self.made: list[Record] | None = None

    def __len__(self) -> int:
        return len(self.span)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> Deferred: ...

    def __getitem__(self, index: int | slice) -> Record | Deferred:
        if isinstance(index, slice):
            return Deferred(self.lines, None, self.span[index], self.root or self)
        return self.complete()[index]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.complete())

    def complete(self) -> list[Record]:
        """Its records, made (for the whole batch) on first need."""
        root = self.root or self
        if root.made is None:
            root.made = root.lines.records()
            if root.changes is not None:
                root.changes.apply(root.made)
        span, made = self.span, root.made
        if self.root is None:
            return made
        return made[span.start : span.stop] if span.step == 1 else [made[at] for at in span]


def complete(records: Sequence[Record]) -> list[Record]:
    """``records`` as a list, with every change a worker made to them applied."""
    if isinstance(records, Deferred):
        return records.complete()
    return records if isinstance(records, list) else list(records)
