"""The fault matrix: the real bridge process follows a log while a fault is injected, and the receiver
counts what arrived. For every fault: lost 0, no torn record, duplicates within the fault's bound.

Each case writes the ledger's known lines for about three seconds (a writer thread, as an
application would), injects its fault a second in, then lets the bridge drain. The receiver is
obsbox's own OTLP receiver, decoding with ``opentelemetry-proto``; lines a sink dead-letters count as
received (they are kept, with the reason, never lost). The faults of single components (a full
disk, a moved output, EIO, symlinks, refusals, container runtimes) have their own files beside
this one; the README's fault table lists them all.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from obsbox.local.receiver import Receiver
from tests.faults.ledger import Ledger, Report, dead_lettered, lines_of
from tests.waiting import free_port, wait_until

pytestmark = pytest.mark.slow

BATCH = 500
WRITE_SECONDS = 3.0
CHUNK = 100  # lines a write; 20 writes a second: 6,000 lines a case


@dataclass
class Stack:
    """One case: a log, its writer, the bridge process, and the receivers it shipped to."""

    tmp: Path
    workers: int = 0
    ledger: Ledger = field(default_factory=lambda: Ledger("matrix"))
    port: int = field(default_factory=free_port)
    receivers: list[Receiver] = field(default_factory=list)
    bridge: subprocess.Popen | None = None
    rotation: str | None = None  # asked of the writer: "rename" or "copytruncate"
    lock: threading.Lock = field(default_factory=threading.Lock)
    stderr: list[bytes] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.tmp / "app.json"

    @property
    def receiver(self) -> Receiver:
        return self.receivers[-1]

    def config(self) -> Path:
        config = {
            "sources": {"tail": {"include": [str(self.tmp / "app.json*")], "scan_interval": 0.1, "rotate_wait": 1.0}},
            "processors": {"parse": {}, "trace": {}},
            "sinks": {"otlp": {"endpoint": f"http://127.0.0.1:{self.port}", "timeout": 2}},
            "pipelines": {
                "logs": {
                    "sources": ["tail"],
                    "processors": ["parse", "trace"],
                    "sinks": ["otlp"],
                    "batch": {"max_records": BATCH, "timeout": 0.05},
                }
            },
            "settings": {
                "state_dir": str(self.tmp / "state"),
                "progress": False,
                "poll_interval": 0.02,
                "shutdown_timeout": 3,
                "workers": self.workers,
                "retry": {"initial_interval": 0.05, "max_interval": 0.2, "max_elapsed_time": 0},
            },
        }
        path = self.tmp / "bridge.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start_receiver(self) -> None:
        self.receivers.append(Receiver(port=self.port).start())

    def start_bridge(self) -> None:
        self.bridge = subprocess.Popen(
            [sys.executable, "-m", "obsbox", "bridge", "--config", str(self.config())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def end_bridge(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        proc = self.bridge
        assert proc is not None
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=timeout)
        self.stderr.append(err)
        return proc.returncode

    def write(self) -> None:
        """The application: CHUNK lines every 50 ms; a rotation when one was asked for."""
        self.log.touch()
        deadline = time.monotonic() + WRITE_SECONDS
        while time.monotonic() < deadline:
            with self.lock:
                if self.rotation == "rename":
                    os.replace(self.log, self.log.with_name("app.json.1"))
                    self.log.touch()
                elif self.rotation == "copytruncate":
                    shutil.copyfile(self.log, self.log.with_name("app.json.1"))
                    os.truncate(self.log, 0)
                self.rotation = None
            self.ledger.append(self.log, CHUNK)
            time.sleep(0.05)

    def worker_pids(self) -> list[int]:
        assert self.bridge is not None
        found = []
        for task in Path(f"/proc/{self.bridge.pid}/task").iterdir():
            for pid in (task / "children").read_text().split():
                with contextlib.suppress(OSError):
                    if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                        found.append(int(pid))
        return found

    def received(self) -> list[bytes | dict]:
        got: list[bytes | dict] = []
        for receiver in self.receivers:
            with receiver.lock:
                got.extend(record.body.string_value.encode() for _, record in receiver.log_records)
        dead = self.tmp / "state" / "dead-letter-otlp.jsonl"
        got.extend(dead_lettered(dead))
        return got

    def report(self) -> Report:
        return self.ledger.check(self.received())


# ---------------------------------------------------------------- the faults


def sink_down(stack: Stack) -> None:
    """The receiver goes away (connection refused) for two seconds, then a new one listens."""
    stack.receiver.stop()
    time.sleep(2)
    stack.start_receiver()


def refusing(status: int, retry_after: str | None = None) -> Callable[[Stack], None]:
    def fault(stack: Stack) -> None:
        stack.receiver.refuse(status, retry_after=retry_after)
        time.sleep(2)
        stack.receiver.accept()

    fault.__doc__ = f"The receiver answers {status} for two seconds."
    return fault


def refused_for_good(stack: Stack) -> None:
    """Three requests are answered 400: their lines go to the dead-letter file, the rest arrive."""
    stack.receiver.refuse(400, times=3)


def kill_9(stack: Stack) -> None:
    """SIGKILL three times, at random points, each followed by a restart."""
    for _ in range(3):
        assert stack.bridge is not None
        stack.bridge.kill()
        stack.bridge.wait(10)
        stack.start_bridge()
        time.sleep(0.6)


def sigterm_with_sink_down(stack: Stack) -> None:
    """SIGTERM while the receiver refuses: the bridge exits 0 in time; a later start delivers."""
    stack.receiver.refuse(503)
    time.sleep(0.5)
    code = stack.end_bridge(timeout=15)
    assert code == 0, stack.stderr[-1].decode()[-2000:]
    stack.receiver.accept()
    stack.start_bridge()


def worker_killed(stack: Stack) -> None:
    """One worker process is killed with SIGKILL."""
    os.kill(stack.worker_pids()[0], signal.SIGKILL)


def worker_stopped(stack: Stack) -> None:
    """One worker process is stopped (SIGSTOP) for two seconds, then continued."""
    pid = stack.worker_pids()[0]
    os.kill(pid, signal.SIGSTOP)
    time.sleep(2)
    os.kill(pid, signal.SIGCONT)


def rotated(kind: str) -> Callable[[Stack], None]:
    def fault(stack: Stack) -> None:
        with stack.lock:
            stack.rotation = kind

    fault.__doc__ = f"The log is rotated ({kind}) while it is written."
    return fault


def answered(status: int) -> Callable[[Stack], bool]:
    return lambda stack: any(code == status for r in stack.receivers for _, _, code in r.requests)


def any_dead_lettered(stack: Stack) -> bool:
    return bool(lines_of(stack.tmp / "state" / "dead-letter-otlp.jsonl"))


def rotated_away(stack: Stack) -> bool:
    return stack.log.with_name("app.json.1").stat().st_size > 0


@dataclass
class Case:
    inject: Callable[[Stack], None]
    took_effect: Callable[[Stack], bool] = lambda stack: True  # the fault really happened
    workers: int = 0
    max_duplicates: int = 0


MATRIX = {
    "sink down": Case(sink_down, lambda stack: all(r.requests for r in stack.receivers[:2])),
    "HTTP 503": Case(refusing(503), answered(503)),
    "HTTP 429 with Retry-After": Case(refusing(429, "1"), answered(429)),
    "HTTP 400 (refused for good)": Case(refused_for_good, lambda s: answered(400)(s) and any_dead_lettered(s)),
    "kill -9, three times": Case(kill_9, max_duplicates=3 * BATCH),
    "SIGTERM with the sink down": Case(sigterm_with_sink_down, answered(503), max_duplicates=2 * BATCH),
    "worker killed": Case(worker_killed, workers=2),
    "worker stopped": Case(worker_stopped, workers=2),
    "rename rotation": Case(rotated("rename"), rotated_away),
    "copytruncate rotation": Case(rotated("copytruncate"), rotated_away),
}


@pytest.mark.parametrize("name", list(MATRIX))
def test_fault(tmp_path: Path, name: str) -> None:
    case = MATRIX[name]
    stack = Stack(tmp_path, workers=case.workers)
    stack.start_receiver()
    stack.start_bridge()
    writer = threading.Thread(target=stack.write, daemon=True)
    writer.start()
    wait_until(stack.received, 20, "the first lines at the receiver")  # the fault lands mid-stream
    case.inject(stack)
    writer.join(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and stack.report().lost:
        time.sleep(0.2)
    code = stack.end_bridge()
    assert code == 0, stack.stderr[-1].decode()[-2000:]
    assert case.took_effect(stack), f"the fault {name!r} did not happen: the case proves nothing"
    report = stack.report()
    print(f"\n{name}: {report}")
    report.assert_delivered(max_duplicates=case.max_duplicates)
    assert report.expected >= 2000, "the writer wrote too little for the case to mean anything"
