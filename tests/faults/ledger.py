"""The fault matrix's bookkeeping: write known lines, then count what a receiver got.

Every line a fault test writes carries its ``run`` and a sequence number ``seq``; whatever the
receiver holds at the end (enriched lines from the file sink, Loki entries, OTLP bodies, the memory
sink's records, dead letters) is handed to :meth:`Ledger.check`, which says how many lines were lost,
how many arrived more than once, and which received lines are torn (not a whole record we wrote).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson


def known_line(run: str, seq: int, pad: int = 0) -> bytes:
    """One JSON line of ``run`` with its sequence number (``pad`` bytes of filler make it longer)."""
    return orjson.dumps({"run": run, "seq": seq, "msg": f"line {seq} of {run}", "pad": "x" * pad})


@dataclass
class Report:
    expected: int
    lost: list[int] = field(default_factory=list)
    duplicates: int = 0
    torn: list[bytes] = field(default_factory=list)
    foreign: int = 0  # whole records of another run (or none), e.g. lines a test did not write

    def __str__(self) -> str:
        lost = f"{len(self.lost)} lost (first {self.lost[:10]})" if self.lost else "0 lost"
        return f"{self.expected} expected: {lost}, {self.duplicates} duplicates, {len(self.torn)} torn"

    def assert_delivered(self, max_duplicates: int = 0) -> None:
        """Nothing lost, no torn record, at most ``max_duplicates`` lines twice or more."""
        assert not self.lost and not self.torn and self.duplicates <= max_duplicates, f"{self}; torn: {self.torn[:3]!r}"


class Ledger:
    """The lines of one run, written to files as a producer would, and checked at the receiver."""

    def __init__(self, run: str = "fault") -> None:
        self.run = run
        self.next_seq = 0

    def lines(self, count: int, pad: int = 0) -> list[bytes]:
        """The next ``count`` known lines (without newlines)."""
        out = [known_line(self.run, seq, pad) for seq in range(self.next_seq, self.next_seq + count)]
        self.next_seq += count
        return out

    def append(self, path: Path, count: int, pad: int = 0) -> None:
        """Append the next ``count`` lines to ``path``, newline-terminated, in one write."""
        with open(path, "ab") as handle:
            handle.write(b"".join(line + b"\n" for line in self.lines(count, pad)))

    def check(self, received: Iterable[bytes | str | dict]) -> Report:
        """Count ``received`` against every line written so far. Each item is a received line (the
        enriched JSON, or the application's line as a body) or a parsed object."""
        seen: Counter[int] = Counter()
        report = Report(self.next_seq)
        for item in received:
            obj = item if isinstance(item, dict) else _parse(item)
            if obj is None or not isinstance(obj.get("seq"), int) or "run" not in obj:
                if obj is None or "seq" in obj or "run" in obj:
                    report.torn.append(item if isinstance(item, bytes) else str(item).encode())
                else:
                    report.foreign += 1
                continue
            if obj["run"] != self.run:
                report.foreign += 1
                continue
            if obj.get("msg") != f"line {obj['seq']} of {self.run}":
                report.torn.append(orjson.dumps(obj))
                continue
            seen[obj["seq"]] += 1
        report.lost = [seq for seq in range(self.next_seq) if not seen[seq]]
        report.duplicates = sum(n - 1 for n in seen.values() if n > 1)
        return report


def _parse(line: bytes | str) -> dict | None:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def lines_of(path: Path) -> list[bytes]:
    """The lines of a file a sink wrote (a torn last line included, as it is)."""
    data = path.read_bytes() if path.exists() else b""
    return [line for line in data.split(b"\n") if line]


def dead_lettered(path: Path) -> list[bytes | str]:
    """The source lines a dead-letter file holds; an entry that is not whole JSON as its raw bytes
    (the ledger counts it torn)."""
    return [_source_line(raw) for raw in lines_of(path)]


def _source_line(entry: bytes) -> bytes | str:
    try:
        return orjson.loads(entry)["line"]
    except (orjson.JSONDecodeError, KeyError):
        return entry
