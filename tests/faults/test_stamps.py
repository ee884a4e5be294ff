"""Lines without a time of their own, shipped by the real bridge process to a Loki that dedupes as
Loki does (tests/stack/loki_double.py): killed with -9 while Loki held its answer, restarted, the
bridge ships those lines again, and Loki drops every copy, because each carries the time it was
first shipped with. The lines come after the file sat idle: their time is when they were read, not
that of the last save before the pause."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.faults.ledger import Ledger
from tests.stack.loki_double import Answer, LokiServer
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

SECOND = 10**9


class HeldLoki(LokiServer):
    """Stores what is pushed, but while ``holding`` keeps the answer back (a slow Loki)."""

    def __init__(self) -> None:
        self.holding, self.held, self.release = threading.Event(), threading.Event(), threading.Event()
        super().__init__()

    def answer(self, path: str, body: bytes) -> Answer:
        reply = super().answer(path, body)
        if self.holding.is_set():
            self.held.set()
            self.release.wait(30)
        return reply


def bridge(tmp_path: Path, log: Path, sink: dict) -> subprocess.Popen:
    config = {
        "sources": {"tail": {"include": [str(log)], "scan_interval": 0.1}},
        "processors": {"parse": {}, "trace": {}},
        "sinks": sink,
        "pipelines": {
            "logs": {
                "sources": ["tail"],
                "processors": ["parse", "trace"],
                "sinks": list(sink),
                "batch": {"max_records": 50, "timeout": 0.05},
            }
        },
        "settings": {
            "state_dir": str(tmp_path / "state"),
            "progress": False,
            "poll_interval": 0.02,
            "shutdown_timeout": 3,
            "retry": {"initial_interval": 0.05, "max_interval": 0.2, "max_elapsed_time": 0},
        },
    }
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "obsbox", "bridge", "--config", str(path)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.parametrize("to", ["loki", "otlp"])
def test_untimed_lines_shipped_again_after_kill_9_carry_the_same_timestamps_and_loki_drops_them(tmp_path, to):
    loki = HeldLoki()
    sink = {"loki": {"url": loki.url}} if to == "loki" else {"otlp": {"endpoint": loki.url + "/otlp"}}
    ledger, log = Ledger(f"stamps-{to}"), tmp_path / "app.json"  # the ledger's lines have no time field
    ledger.append(log, 200)
    proc = bridge(tmp_path, log, sink)
    try:
        wait_until(lambda: len(loki.stored) == 200, 30, "the first lines in Loki")
        time.sleep(2.5)  # acknowledged, saved, and idle for longer than a clock anchor lasts
        loki.holding.set()
        written = time.time_ns()
        ledger.append(log, 100)
        wait_until(loki.held.is_set, 30, "a push of the new lines")
        proc.send_signal(signal.SIGKILL)  # while Loki holds the answer: they were shipped, not saved
        proc.communicate(timeout=20)
        first = {entry.line: entry.timestamp_ns for _, entry in loki.stored[200:]}
        assert first, "Loki stored the lines whose answer it held"
        loki.holding.clear()
        loki.release.set()

        proc = bridge(tmp_path, log, sink)
        replayed = lambda: len(loki.stored) - 300 + len(loki.duplicates) >= len(first)  # noqa: E731
        wait_until(lambda: len(set(loki.lines())) == 300 and replayed(), 30, "the rest, and the lines shipped again")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err.decode()[-2000:]
    finally:
        loki.release.set()
        if proc.poll() is None:
            proc.kill()
        loki.stop()

    ledger.check(loki.lines()).assert_delivered(max_duplicates=0)
    again = {entry.line: entry.timestamp_ns for _, entry in loki.duplicates}
    assert again.keys() >= first.keys() and all(again[line] == ts for line, ts in first.items())
    late = [entry.timestamp_ns for _, entry in loki.stored[200:]]
    assert all(written <= ts < written + 5 * SECOND for ts in late), "read after the pause, not before it"
    assert late == sorted(set(late)), "in the order written, each line a time of its own"
