"""A batch's records as a worker process left them, applied in the bridge only when needed.

A worker sends back what its processors changed (:class:`Changes`); sinks that took a payload the
worker encoded look at records only on a failure path, and call :func:`complete` first. Kept apart
from ``workers`` so that sinks can import it without the process machinery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from obsbox.exporters.bridge.record import Record

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
    sparse: dict[int, tuple[bytes | None, str | None, dict[str, str] | None]]
    fields: list[dict[str, Any] | None] | None = None
    lines: list[bytes | None] | None = None

    @classmethod
    def of(cls, records: list[Record], originals: list[bytes], whole: bool) -> Changes:
        sparse = {
            index: (rec.raw if rec.raw is not raw else None, rec.parse_error, rec.attributes)
            for index, (rec, raw) in enumerate(zip(records, originals, strict=True))
            if rec.parse_error is not None or rec.attributes is not None or rec.raw is not raw
        }
        return cls(
            column([rec.trace_id for rec in records], 32),
            column([rec.span_id for rec in records], 16),
            column([rec.parent_span_id for rec in records], 16),
            sparse,
            [rec.fields for rec in records] if whole else None,
            [rec.line() if rec.injector is not None else None for rec in records] if whole else None,
        )

    def apply(self, records: list[Record]) -> None:
        trace_ids, span_ids, parents = ids_of(self.trace_ids, 32), ids_of(self.span_ids, 16), ids_of(self.parents, 16)
        for rec, trace_id, span_id, parent in zip(records, trace_ids, span_ids, parents, strict=True):
            rec.trace_id, rec.span_id, rec.parent_span_id = trace_id, span_id, parent
        for index, (raw, error, attributes) in self.sparse.items():
            rec = records[index]
            if raw is not None:
                rec.raw = raw
            rec.parse_error, rec.attributes = error, attributes
        if self.fields is not None:
            for rec, fields in zip(records, self.fields, strict=True):
                rec.fields = fields
        if self.lines is not None:
            for rec, line in zip(records, self.lines, strict=True):
                rec.out = line


class Deferred(list):
    """A batch's records in the bridge, with a worker's :class:`Changes` applied on first need.

    Sinks that took a payload encoded in a worker only look at records on a failure path (a
    rejection to match, a dead letter to write); they call :func:`complete` first, and the common
    path never pays for applying IDs it does not read. Slices share the batch's records and apply
    the whole batch."""

    def __init__(self, records: list[Record], changes: Changes | None, root: Deferred | None = None) -> None:
        super().__init__(records)
        self.changes = changes
        self.root = root

    def __getitem__(self, index):
        got = super().__getitem__(index)
        return Deferred(got, None, self.root or self) if isinstance(index, slice) else got

    def complete(self) -> None:
        root = self.root or self
        changes, root.changes = root.changes, None
        if changes is not None:
            changes.apply(root)


def complete(records: list[Record]) -> list[Record]:
    """``records`` with every change a worker made to them applied (a no-op for plain lists)."""
    if isinstance(records, Deferred):
        records.complete()
    return records
