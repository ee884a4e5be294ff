"""Fault: Loki keeps part of a request and refuses the rest, on its push API and on /otlp.

Known lines of every kind Loki 3.7.6 refuses (forty days old, two hours ahead, over max_line_size,
too far behind their stream) go with lines it keeps through a whole Bridge to the Loki double
(``tests/stack/loki_double.py``: Loki's texts, groups in random order, the ingester's cut-off). Every
line must be in Loki or in the dead-letter file: none lost, duplicates only where the answer did not
say which lines it refused.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest

from tests.bridge.harness import Running
from tests.faults.ledger import Ledger, dead_lettered
from tests.stack.loki_double import Limits, LokiServer

SECOND = 10**9
DAY = 86400 * SECOND
WINDOW = timedelta(hours=744)  # compose/loki/loki.yaml's reject_old_samples_max_age


def timed(ledger: Ledger, count: int, when: Callable[[int], int], pad: int = 0) -> list[bytes]:
    """The ledger's next ``count`` lines, each with the time ``when(i)`` (ns)."""
    out = []
    for i, known in enumerate(ledger.lines(count, pad)):
        stamp = datetime.fromtimestamp(when(i) / 1e9, tz=timezone.utc).isoformat().replace("+00:00", "Z")
        out.append(orjson.dumps({"time": stamp, **orjson.loads(known)}))
    return out


def deliver(tmp_path: Path, loki: LokiServer, lines: list[bytes], to: str) -> list[bytes]:
    """Run the bridge once over ``lines`` into ``loki``; what Loki stored and what was dead-lettered."""
    log = tmp_path / "app.json"
    log.write_bytes(b"".join(x + b"\n" for x in lines))
    sink = {"loki": {"url": loki.url}} if to == "loki" else {"otlp": {"endpoint": loki.url + "/otlp"}}
    running = Running([str(log)], tmp_path / "state", once=True, sinks=sink)
    running.thread.join(60)
    assert not running.thread.is_alive(), "the bridge did not finish"
    dead = dead_lettered(tmp_path / "state" / f"dead-letter-{to}.jsonl")
    return [x.encode() for x in loki.lines()] + dead


@pytest.mark.parametrize("to", ["loki", "otlp"])
@pytest.mark.parametrize("seed", range(4))
def test_lines_of_every_refused_kind_in_any_order_are_stored_or_dead_lettered_once(tmp_path, to, seed):
    loki = LokiServer(Limits(reject_old_samples_max_age=WINDOW), seed=seed)
    try:
        now, ledger = time.time_ns(), Ledger(f"refusals-{to}-{seed}")
        lines = (
            timed(ledger, 20, lambda i: now - i * SECOND // 3)  # kept
            + timed(ledger, 6, lambda i: now - 40 * DAY + i * SECOND // 2)  # too old, two a second
            + timed(ledger, 2, lambda i: now + 2 * 3600 * SECOND + i)  # too new, one second
            + timed(ledger, 2, lambda i: now - i, pad=300 * 1024)  # over max_line_size
        )
        random.Random(seed).shuffle(lines)
        received = deliver(tmp_path, loki, lines, to)
        assert loki.answers and all(status == 400 for status, _ in loki.answers), loki.answers
        ledger.check(received).assert_delivered(max_duplicates=0)
        assert len(loki.stored) == 20
    finally:
        loki.stop()


@pytest.mark.parametrize("to", ["loki", "otlp"])
@pytest.mark.parametrize(
    ("behind", "old", "said"),
    [(12, 0, "total ignored: 12 out of 13"), (3, 1, "total ignored: 3 out of 4")],
    ids=["cut-at-ten", "distributor-refusal-unsaid"],
)
def test_an_answer_cut_short_or_not_understood_loses_nothing(tmp_path, to, behind, old, said):
    """Lines too far behind their stream: Loki lists ten of twelve; or its ingester's answer replaces
    the distributor's, which refused a line forty days old (as Loki 3.7.6 did: "total ignored: 3 out
    of 4" for 5 lines sent). Either way the whole request is kept: the line Loki stored is then a
    duplicate, and nothing is lost."""
    loki = LokiServer(Limits(max_chunk_age=timedelta(hours=2)))
    try:
        now, ledger = time.time_ns(), Ledger(f"cut-{to}-{behind}")
        lines = timed(ledger, 1, lambda _: now) + timed(ledger, behind, lambda i: now - 2 * 3600 * SECOND - i * SECOND)
        lines += timed(ledger, old, lambda _: now - 40 * DAY)
        received = deliver(tmp_path, loki, lines, to)
        assert said in loki.answers[0][1]
        report = ledger.check(received)
        report.assert_delivered(max_duplicates=1)
        assert report.duplicates == 1
    finally:
        loki.stop()
