"""Which records a receiver refused, from what it said about them.

Loki, on its push API and on ``/otlp`` alike, stores the valid entries of a request and answers 400
naming what it refused (read from Loki 3.7's ``pkg/distributor/validator.go`` and
``pkg/ingester/stream.go``):

- ``entry for stream '{...}' has timestamp too old: T, oldest acceptable timestamp is: C``
  (``reject_old_samples_max_age``), and ``entry with timestamp ... ignored, reason: 'entry too far
  behind, entry timestamp is: T, oldest acceptable timestamp is: C'`` (the out-of-order window): every
  entry older than C was refused. C is printed to the second, so entries within the second after it
  are counted as refused too: a line dead-lettered that Loki also kept is a duplicate; the other way
  round it would be lost.
- ``entry for stream '{...}' has timestamp too new: T`` (``creation_grace_period``), and ``... too old:
  T`` from a Loki that does not print the cut-off: entries in the second T.
- ``Max entry size 'N' bytes exceeded for stream '{...}' while adding an entry with length 'L' bytes``:
  entries of L bytes.

Loki stops listing after its ``max_returned_errors``, so a cut-off only counts when it names a rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from obsbox.exporters.bridge.record import Record

_OLDEST = re.compile(r"oldest acceptable timestamp is: (\S+?)'?,?(?:\s|$)")
_TOO_NEW = re.compile(r"has timestamp too new: (\S+?),?(?:\s|$)")
_TOO_OLD = re.compile(r"has timestamp too old: (\S+?),?(?:\s|$)")  # older Loki names no cut-off
_TOO_LONG = re.compile(r"while adding an entry with length '(\d+)' bytes")
_SECOND = 1_000_000_000


def _rfc3339_ns(text: str) -> int | None:
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()) * _SECOND
    except ValueError:
        return None


def refused(message: str, records: Sequence[Record]) -> list[Record] | None:
    """The records ``message`` says were refused; None when it names no rule this module knows."""
    cutoffs = [ns for ns in map(_rfc3339_ns, _OLDEST.findall(message)) if ns is not None]
    at_second = {ns for ns in map(_rfc3339_ns, _TOO_NEW.findall(message) + _TOO_OLD.findall(message)) if ns}
    lengths = {int(n) for n in _TOO_LONG.findall(message)}
    if not (cutoffs or at_second or lengths):
        return None
    cutoff = max(cutoffs) + _SECOND if cutoffs else None
    return [rec for rec in records if _matches(rec, cutoff, at_second, lengths)]


def _matches(rec: Record, cutoff: int | None, at_second: set[int], lengths: set[int]) -> bool:
    ts = rec.time_ns()
    if ts is not None and cutoff is not None and ts < cutoff:
        return True
    if ts is not None and ts // _SECOND * _SECOND in at_second:
        return True
    return bool(lengths) and len(rec.text().encode()) in lengths
