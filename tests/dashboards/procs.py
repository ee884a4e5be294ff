"""Starting and stopping the real processes the tests run: Prometheus, obsbox commands."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from obsbox.dashboards.promapi import PrometheusError
from tests.waiting import free_port

__all__ = ["free_port", "http_ok", "obsbox", "prometheus", "stop", "tail", "wait_for"]


def prometheus(config: Path, data: Path, port: int, log: Path, *flags: str) -> subprocess.Popen:
    """Debian's Prometheus on 127.0.0.1:port, its output in ``log``."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: apt-get install prometheus (Debian's package, 2.42)")
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        *flags,
    ]
    return subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT)


def obsbox(*args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "obsbox", *args], stdout=log.open("w"), stderr=subprocess.STDOUT)


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


def tail(log: Path) -> str:
    return f"--- {log.name} ---\n" + ("\n".join(log.read_text().splitlines()[-30:]) if log.exists() else "(no log)")


def wait_for(what: str, ready: Callable[[], object], procs: dict[Path, subprocess.Popen], timeout: float):
    """Poll ``ready()`` until it is truthy; fail, with the logs (the keys), if a process dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for log, proc in procs.items():
            if proc.poll() is not None:
                pytest.fail(f"{log.stem} exited with {proc.returncode} while waiting for {what}:\n{tail(log)}")
        try:
            value = ready()
        except (OSError, PrometheusError):
            value = None
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n" + "\n".join(tail(log) for log in procs))


def stop(procs: dict[Path, subprocess.Popen]) -> None:
    """Terminate the processes we started; kill one that does not exit."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    for proc in procs.values():
        reap(proc)


def reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
