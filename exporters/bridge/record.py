"""The record model: one log line on its way from a source, through processors, to sinks.

Records travel in batches. A batch also carries the source's checkpoint: the positions that may be
saved once every sink has acknowledged the batch. Processors may drop records or add new ones; the
checkpoint stays with the batch, so acknowledgement never depends on which records survived.

A source reads lines into :class:`Lines`: Records, and :class:`Block` s, runs of whole lines kept as
the bytes read. Cutting a read into a Record per line only to join the lines again for a worker
process cost the bridge process half of its CPU; a Block is cut where its lines are worked on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import accumulate, count, repeat
from operator import add
from typing import Any, Generic, TypeVar

from obsbox.logfields import iso_ns, timestamp_ns
from obsbox.logfields import service as service_name

Clock = tuple[tuple[int, int], ...]
"""A file generation's clock anchors, (byte offset, Unix ns), oldest first (see :meth:`Origin.read_ns`)."""
Checkpoint = Mapping[Any, Any]
"""What a source saves once a batch is acknowledged; later entries supersede earlier ones per key."""
C = TypeVar("C", bound=Checkpoint)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a line came from. Shared by every line of one file, so it costs nothing per line.

    ``key`` is a digest of the file's fingerprint (its first line), which survives renames and
    copies; with the line's byte offset it gives every line a stable identity across runs.
    ``logfmt``: the file's application lines are logfmt (detected from its first one, or forced), so
    ``parse`` reads any line that is not JSON as logfmt, at no cost to the lines that are.
    ``clock`` holds the anchors the tail source keeps with the file's saved position; a line's read
    time follows from them and its offset alone, so it is the same in every process and every run.
    """

    path: str
    key: bytes
    resource: tuple[tuple[str, str], ...] = ()  # resource attributes its path names (Kubernetes)
    clock: Clock = ()
    logfmt: bool = False

    def read_ns(self, offset: int) -> int | None:
        """When the line at byte ``offset`` was first read: ``T + (offset - A)`` ns from the newest
        anchor (A, T) with A <= offset (the oldest when none is). One nanosecond a byte keeps the
        lines of a file in order and each at a time of its own. None without anchors."""
        clock = self.clock
        if not clock:
            return None
        for at, ns in reversed(clock):
            if at <= offset:
                return ns + offset - at
        at, ns = clock[0]
        return ns + offset - at


class Record:
    """One line. ``raw`` is the line as read, without its newline; it is never re-encoded.

    ``fields`` holds the parsed JSON object (None when the line is not one: see ``parse_error``).
    ``out`` is the enriched line that byte-oriented sinks write; None means "write ``raw``". It is
    made on first use by ``injector`` (set by the trace processor), so sinks that never write lines
    (OTLP, Loki) never pay for it. Trace context is kept as lowercase hex strings, the W3C form.
    ``attributes`` (None until a source or processor adds one) are string pairs the Loki sink ships
    as structured metadata and the OTLP sink as LogRecord attributes.
    ``rest`` holds the lines a multiline record adds to its first one (a stack trace), each after a
    newline, as read: processors work on ``raw``, the first line; sinks ship ``raw + rest``.
    """

    __slots__ = (
        "attributes",
        "fields",
        "injector",
        "offset",
        "origin",
        "out",
        "parent_span_id",
        "parse_error",
        "raw",
        "rest",
        "span_id",
        "trace_id",
        "truncated",
    )

    def __init__(self, raw: bytes, origin: Origin, offset: int, truncated: bool = False) -> None:
        self.raw = raw
        self.rest = b""
        self.origin = origin
        self.offset = offset
        self.truncated = truncated
        self.fields: dict[str, Any] | None = None
        self.parse_error: str | None = None
        self.out: bytes | None = None
        self.injector: Callable[[Record], bytes | None] | None = None
        self.trace_id: str | None = None
        self.span_id: str | None = None
        self.parent_span_id: str | None = None
        self.attributes: dict[str, str] | None = None

    def line(self) -> bytes:
        """The bytes a line-oriented sink writes: the enriched line, or the raw one unchanged."""
        if self.injector is not None:
            self.out, self.injector = self.injector(self), None
        return self.raw if self.out is None else self.out

    def whole(self) -> bytes:
        """The enriched line and the lines a multiline record adds to it, as read."""
        return self.line() + self.rest if self.rest else self.line()

    def service(self) -> str | None:
        """The service the line names, else its attributes (an OTLP/JSON record's resource), else
        its file's path (a Kubernetes container); None when none does."""
        return service_name(self.fields) or self.context_service()

    def context_service(self) -> str | None:
        """The service its attributes or its file's path name, whatever the line says."""
        return context_service(self.attributes, self.origin)

    def time_ns(self) -> int | None:
        """The line's own time, else the container runtime's (CRI, Docker), else None."""
        return time_ns(self.fields, self.attributes)

    def read_ns(self) -> int | None:
        """When the line was first read, the same on every replay (see ``Origin.read_ns``): the time
        sinks give a line that has none of its own. None when its source keeps no clock."""
        return self.origin.read_ns(self.offset)

    def text(self) -> str:
        """The original line as text for sinks whose wire format needs Unicode (Loki, OTLP).

        Broken UTF-8 is replaced, not dropped; such records carry ``parse_error`` so the receiver
        can tell.
        """
        return (self.raw + self.rest if self.rest else self.raw).decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"Record({self.origin.path}@{self.offset}, trace_id={self.trace_id}, raw={self.raw[:60]!r})"


def context_service(attributes: dict[str, str] | None, origin: Origin) -> str | None:
    """``Record.context_service`` of a line with these attributes from this file."""
    if attributes is not None and attributes.get("service.name"):
        return attributes["service.name"]
    for key, value in origin.resource:
        if key == "service.name":
            return value
    return None


def time_ns(fields: dict[str, Any] | None, attributes: dict[str, str] | None) -> int | None:
    """``Record.time_ns`` of a line with these fields and attributes."""
    own = timestamp_ns(fields)
    if own is None and attributes is not None:
        runtime = attributes.get("obsbox.runtime_time")
        return iso_ns(runtime) if runtime else None
    return own


def records_of(lines: list[bytes], origin: Origin, offset: int) -> list[Record]:
    """Records of consecutive lines of one file, the first at byte ``offset``, at C speed: each
    next line starts after the one before and its newline."""
    offsets = map(add, accumulate(map(len, lines), initial=offset), count())
    return list(map(Record, lines, repeat(origin), offsets))


def records_in(data: bytes, origin: Origin, offset: int) -> list[Record]:
    """Records of the whole lines in ``data`` (each ending in a newline), the first at byte ``offset``."""
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: nothing
    return records_of(lines, origin, offset)


@dataclass(frozen=True, slots=True)
class Block:
    """``count`` whole lines of one file as read, the first at byte ``offset``: ``data`` holds them,
    each ending in a newline. The reader guarantees what a Record would check: no line is longer
    than the source's ``max_line_bytes``, and none starts with a byte order mark."""

    origin: Origin
    data: bytes
    offset: int
    count: int

    def records(self) -> list[Record]:
        return records_in(self.data, self.origin, self.offset)

    def cut(self, lines: int) -> tuple[Block, Block]:
        """The first ``lines`` lines, and the rest (0 < ``lines`` < ``count``)."""
        data = self.data
        _, end = count_lines(data, len(data), lines)
        return (
            Block(self.origin, data[:end], self.offset, lines),
            Block(self.origin, data[end:], self.offset + end, self.count - lines),
        )


def count_lines(data: bytes, end: int, most: int) -> tuple[int, int]:
    """How many of the whole lines in ``data[:end]`` fit in a batch with room for ``most`` (any
    number when negative), and where they end.

    Counted by deleting the first ``most`` newlines (``bytes.replace`` finds them with ``memchr``, in
    C): the ``most``-th line then ends before the first newline left. ``bytes.count`` compares byte
    by byte and a ``find`` per line costs a Python call a line: on 350-byte lines the delete took
    0.14 ns a byte, ``count`` 0.9 and the ``find`` loop 1.4, for a copy of ``data`` that lives a moment."""
    left = data.replace(b"\n", b"", most)
    deleted = len(data) - len(left)
    if deleted == most:
        following = left.find(b"\n")  # the next newline, ``most`` bytes earlier than in ``data``
        at = data.rfind(b"\n", 0, following + most if following >= 0 else len(data)) + 1
        if at <= end:
            return most, at
        return most - data.count(b"\n", end, at), end
    return deleted - data.count(b"\n", end), end


class Lines:
    """A batch's lines in the order read: Records, and Blocks not yet cut into Records. Its length
    counts lines, not items."""

    __slots__ = ("blocks", "count", "items")

    def __init__(self, records: list[Record] | None = None) -> None:
        """``records`` become the first items as they are, not copied."""
        self.items: list[Record | Block] = records if records is not None else []  # type: ignore[assignment] # Records are items
        self.count = len(self.items)
        self.blocks = 0  # Blocks among the items

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"Lines({self.count} lines in {len(self.items)} items)"

    def append(self, item: Record | Block) -> None:
        self.items.append(item)
        if type(item) is Block:
            self.count += item.count
            self.blocks += 1
        else:
            self.count += 1

    def extend(self, lines: Lines | list[Record]) -> None:
        if isinstance(lines, Lines):
            self.items += lines.items
            self.count += lines.count
            self.blocks += lines.blocks
        else:
            self.items += lines
            self.count += len(lines)

    def records(self) -> list[Record]:
        """Every line as a Record (Blocks cut now)."""
        if not self.blocks:
            return self.items  # type: ignore[return-value] # no Block among them, checked
        out: list[Record] = []
        for item in self.items:
            if type(item) is Block:
                out += item.records()
            else:
                out.append(item)  # type: ignore[arg-type] # not a Block, checked
        return out

    def parts(self, number: int) -> list[Lines]:
        """The lines in ``number`` runs of about equal length (the last may be shorter), in order;
        a Block is cut where a run ends inside it."""
        step = -(-self.count // number)
        out = [Lines()]
        for item in self.items:
            rest = item
            while type(rest) is Block and len(out[-1]) + rest.count > step:
                head, rest = rest.cut(step - len(out[-1]))
                out[-1].append(head)
                out.append(Lines())
            out[-1].append(rest)
            if len(out[-1]) >= step:
                out.append(Lines())
        return [part for part in out if part.count]


@dataclass(slots=True)
class Batch(Generic[C]):
    """Lines plus the checkpoint the source saves once every sink has acknowledged them. A source
    of its own may give a plain list of Records."""

    lines: Lines | list[Record]
    checkpoint: C
    read_bytes: int = 0

    def __len__(self) -> int:
        return len(self.lines)
