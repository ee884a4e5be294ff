"""Which records a receiver refused, from what it said about them, or None when that can't be known.

Loki, on its push API and on ``/otlp`` alike, stores the valid entries of a request and answers 400
naming what it refused. Two shapes, read from Loki 3.7.6's source:

- The distributor (``pkg/distributor/distributor.go``, ``pkg/util/errors.go`` ``GroupedErrors``)
  checks every entry and joins the distinct messages with ``"; "``, in the random order of a Go map,
  each prefixed with ``N errors like: `` when there is more than one message or it occurred more than
  once. The messages (``pkg/validation/validate.go``, times in RFC 3339 to the second):
  ``entry for stream '{...}' has timestamp too old: T, oldest acceptable timestamp is: C``,
  ``entry for stream '{...}' has timestamp too new: T``, and
  ``max entry size 'N' bytes exceeded for stream '{...}' while adding an entry with length 'L' bytes``.
- The ingester (``pkg/ingester/stream.go`` ``errorForFailedEntries``) lists, for one stream,
  ``entry with timestamp <Go time> ignored, reason: '<why>',`` a line each, at most
  ``max_returned_stream_errors`` of them, then ``user 'U', total ignored: N out of M for stream: S``.
  Its answer replaces the distributor's, so it names every refusal only when all ``M`` entries of
  that stream were the whole request and all ``N`` are listed.

The refused records are known only when every group of the answer is understood and the records it
points at (by their time or length) are exactly as many as it counts; otherwise None, and the caller
keeps the whole request: a possible duplicate, never a loss.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from obsbox.exporters.bridge.record import Record

_SECOND = 1_000_000_000
_STREAM = r"for stream '.*'"  # the labels, as Loki prints them
# what a distributor's message names, by the key of the records it is about
_BY_SECOND = (
    re.compile(rf"entry {_STREAM} has timestamp too old: (\S+), oldest acceptable timestamp is: \S+"),
    re.compile(rf"entry {_STREAM} has timestamp too (?:old|new): (\S+)"),
)
_BY_LENGTH = re.compile(
    rf"[Mm]ax entry size '\d+' bytes exceeded {_STREAM} while adding an entry with length '(\d+)' bytes"
)
_GROUP = re.compile(r"(?:^|; )(\d+) errors like: ")
_IGNORED = re.compile(r"entry with timestamp (.+?) ignored, reason: '(.*?)',\n")
_TOTAL = re.compile(r"user '.*', total ignored: (\d+) out of (\d+) for stream: ")
_OUT_OF_ORDER = re.compile(r"entry out of order|entry too far behind, .*")
# Go's time.Time.String(): 2006-01-02 15:04:05.999999999 -0700 MST
_GO_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d{1,9}))? ([+-]\d\d)(\d\d) \S+")

Key = tuple[str, int]  # ("second", its first ns) | ("ns", a time) | ("length", bytes of the line)


def refused(message: str, records: Sequence[Record], expected: int | None = None) -> list[Record] | None:
    """The records ``message`` says were refused (``expected`` of them, when the receiver counted
    them apart); None unless every part of it is understood and adds up."""
    message = message.strip()
    total = _TOTAL.search(message)
    counts = _ingester_counts(message, total, len(records)) if total else _distributor_counts(message)
    if not counts:
        return None
    pointed = [(rec, _keys(rec) & counts.keys()) for rec in records]
    named = [rec for rec, keys in pointed if keys]
    found = Counter(key for _, keys in pointed for key in keys)
    if found != counts or len(named) != counts.total() or expected not in (None, len(named)):
        return None  # a group counts other records than those it points at: which ones is not known
    return named


def _distributor_counts(message: str) -> Counter[Key] | None:
    parts = _GROUP.split(message)
    groups = [(1, message)] if len(parts) == 1 else list(zip(map(int, parts[1::2]), parts[2::2], strict=True))
    if len(parts) > 1 and parts[0]:
        return None  # text before the first group: not Loki's shape
    counts: Counter[Key] = Counter()
    for count, text in groups:
        key = _group_key(text)
        if key is None:
            return None
        counts[key] += count
    return counts


def _group_key(text: str) -> Key | None:
    for pattern in _BY_SECOND:
        found = pattern.fullmatch(text)
        if found:
            ns = _rfc3339_ns(found[1])
            return None if ns is None else ("second", ns)
    found = _BY_LENGTH.fullmatch(text)
    return ("length", int(found[1])) if found else None


def _ingester_counts(message: str, total: re.Match[str], sent: int) -> Counter[Key] | None:
    head = message[: total.start()]
    listed = _IGNORED.findall(head)
    if _IGNORED.sub("", head) or len(listed) != int(total[1]) or int(total[2]) != sent:
        return None  # cut at max_returned_stream_errors, or other streams' refusals left unsaid
    counts: Counter[Key] = Counter()
    for when, why in listed:
        ns = _go_time_ns(when)
        if ns is None or not _OUT_OF_ORDER.fullmatch(why):
            return None
        counts["ns", ns] += 1
    return counts


def _keys(rec: Record) -> set[Key]:
    ts = rec.time_ns() or rec.read_ns()  # the time both sinks give Loki for the line
    keys: set[Key] = {("length", len(rec.text().encode()))}
    if ts is not None:
        keys |= {("second", ts // _SECOND * _SECOND), ("ns", ts)}
    return keys


def _rfc3339_ns(text: str) -> int | None:
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()) * _SECOND
    except ValueError:
        return None


def _go_time_ns(text: str) -> int | None:
    found = _GO_TIME.fullmatch(text)
    if not found:
        return None
    date, fraction, hours, minutes = found.groups()
    sign = -1 if hours[0] == "-" else 1
    offset = timezone(sign * timedelta(hours=abs(int(hours)), minutes=int(minutes)))
    seconds = int(datetime.fromisoformat(date).replace(tzinfo=offset).timestamp())
    return seconds * _SECOND + int((fraction or "0").ljust(9, "0"))
