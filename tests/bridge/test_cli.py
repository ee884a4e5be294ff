"""``obsbox bridge`` as a user runs it: a real subprocess, signals, the metrics endpoint, promtool."""

from __future__ import annotations

import io
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
import yaml

from obsbox.cli import build_parser
from obsbox.exporters.bridge.cli import cli_pipeline
from obsbox.exporters.bridge.progress import Progress, human_bytes
from obsbox.local.receiver import Receiver
from tests.bridge.harness import Running
from tests.faults.ledger import Ledger, lines_of
from tests.waiting import free_port, wait_until


def bridge(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "obsbox", "bridge", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs
    )


def once(*args: str) -> subprocess.CompletedProcess:
    """``obsbox bridge ... --once`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "obsbox", "bridge", *args, "--once"], capture_output=True, timeout=60, check=False
    )


# A sink that stays down holds a stopping bridge for its whole shutdown timeout; the default (10 s) is
# what a user waits, 1 s shows as well that the timeout is kept.
SHUTDOWN_TIMEOUT = 1.0


def with_shutdown_timeout(folder: Path, *args: str) -> str:
    """A ``--config`` file: the pipeline ``obsbox bridge ARGS`` means (what --print-config prints),
    with ``settings.shutdown_timeout: SHUTDOWN_TIMEOUT``, which no command-line option sets."""
    data = cli_pipeline(build_parser().parse_args(["bridge", *args]))
    data["settings"]["shutdown_timeout"] = SHUTDOWN_TIMEOUT
    config = folder / "bridge.yaml"
    config.write_text(yaml.safe_dump(data))
    return str(config)


def lines(n: int, start: int = 0) -> bytes:
    return b"".join(orjson.dumps({"seq": i, "level": "info", "msg": f"line {i}"}) + b"\n" for i in range(start, n))


def test_sigterm_delivers_what_was_read_saves_positions_and_exits_0(tmp_path):
    log, out, positions = tmp_path / "app.log", tmp_path / "out.jsonl", tmp_path / "pos.json"
    log.write_bytes(lines(1000))
    proc = bridge(str(log), "--to", f"file:{out}", "--positions", str(positions))
    wait_until(lambda: out.exists() and out.read_bytes().count(b"\n") == 1000, 20, "the first 1000 lines")
    with open(log, "ab") as fh:
        fh.write(lines(1500, 1000))
    wait_until(lambda: out.read_bytes().count(b"\n") == 1500, 20, "the appended 500 lines")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0, proc.stderr.read().decode()
    saved = orjson.loads(positions.read_bytes())["files"]
    assert saved[0]["offset"] == log.stat().st_size
    restarted = once(str(log), "--to", f"file:{out}", "--positions", str(positions))
    assert restarted.returncode == 0 and out.read_bytes().count(b"\n") == 1500, "nothing is read twice"


def test_sigterm_while_the_sink_is_down_exits_0_within_the_shutdown_timeout_and_keeps_offsets(tmp_path):
    rx = Receiver().start()
    rx.refuse(503)
    log, positions = tmp_path / "app.log", tmp_path / "pos.json"
    log.write_bytes(lines(200))
    proc = bridge(
        "--config", with_shutdown_timeout(tmp_path, str(log), "--to", f"otlp:{rx.url}", "--positions", str(positions))
    )
    try:
        wait_until(lambda: len(rx.requests) >= 2, 20, "two refused exports")
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert proc.wait(30) == 0
        assert time.monotonic() - started < SHUTDOWN_TIMEOUT + 5
        assert not positions.exists() or orjson.loads(positions.read_bytes())["files"][0]["offset"] == 0
        rx.accept()
        again = once(str(log), "--to", f"otlp:{rx.url}", "--positions", str(positions))
        assert again.returncode == 0
        assert rx.total() == 200, "the undelivered batch is sent by the next run"
    finally:
        proc.kill()
        rx.stop()


def test_sigterm_with_the_sink_down_under_once_says_what_is_not_delivered_and_not_that_it_retries(tmp_path):
    log, positions, out, errors = tmp_path / "app.log", tmp_path / "pos.json", tmp_path / "out.jsonl", tmp_path / "err"
    ledger = Ledger("sigterm")
    ledger.append(log, 50)
    down = f"otlp:http://127.0.0.1:{free_port()}"  # nothing listens there: every connection is refused
    with open(errors, "wb") as stderr:
        config = with_shutdown_timeout(tmp_path, str(log), "--once", "--to", down, "--positions", str(positions))
        proc = subprocess.Popen(
            [sys.executable, "-m", "obsbox", "bridge", "--config", config],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            wait_until(lambda: b"Connection refused; retrying" in errors.read_bytes(), 20, "a refused export")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            proc.kill()
    said = errors.read_text().splitlines()
    assert said[-2].endswith(
        "sink otlp: stopping with 50 records not delivered; they will be read again at the next start"
    ), said[-3:]
    assert said[-1].startswith("obsbox bridge: 50 lines read; otlp: 0 delivered, 0 dead-lettered;"), said[-1]
    assert not any("aborting" in line for line in said), said[-3:]
    again = once(str(log), "--to", f"file:{out}", "--positions", str(positions))
    assert again.returncode == 0, again.stderr
    ledger.check(lines_of(out)).assert_delivered()


def test_stdout_is_the_default_sink_and_non_json_passes_byte_for_byte(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b'{"a": 1}\nnot json \x00 \xff\n')
    result = subprocess.run(
        [sys.executable, "-m", "obsbox", "bridge", str(log), "--once", "--no-positions"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    first, second = result.stdout.splitlines()
    assert orjson.loads(first)["a"] == 1 and len(orjson.loads(first)["trace_id"]) == 32
    assert second == b"not json \x00 \xff"


def test_a_closed_stdout_pipe_stops_the_bridge_cleanly(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(200_000))
    head = subprocess.run(
        f"{sys.executable} -m obsbox bridge {log} --once --no-positions | head -n 3",
        shell=True,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert head.stdout.count(b"\n") == 3
    assert b"Traceback" not in head.stderr


def test_metrics_endpoint_passes_promtool_and_counts(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: scripts/test installs Debian's prometheus package")
    log = tmp_path / "app.log"
    log.write_bytes(lines(300) + b"garbage\n" + b'{"msg": "sent Bearer abcdefghijklmnopqrstuvwx"}\n')
    port = free_port()
    proc = bridge(str(log), "--to", f"file:{tmp_path / 'out.jsonl'}", "--no-positions", "--metrics-port", str(port))
    try:

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                return resp.read().decode()

        delivered = 'obsbox_bridge_lines_shipped_total{outcome="delivered",sink="file"} 302.0'
        wait_until(
            lambda: _safe(scrape) and delivered in scrape(),
            20,
            "302 lines",
        )
        text = scrape()
        for needle in (
            'obsbox_bridge_lines_read_total{pipeline="logs"} 302.0',
            'obsbox_bridge_parse_errors_total{reason="invalid_json"} 1.0',
            'obsbox_bridge_redactions_total{rule="bearer"} 1.0',
            f'obsbox_bridge_lag_bytes{{path="{log}"}} 0.0',
            "obsbox_bridge_batch_duration_seconds_bucket",
        ):
            assert needle in text, needle
        check = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30, check=False
        )
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def _safe(fn) -> bool:
    try:
        fn()
        return True
    except OSError:
        return False


def test_progress_bar_shows_bytes_rate_and_fraction(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(20_000))
    running = Running([str(log)], tmp_path / "state", once=True)
    running.thread.join(30)
    stream = io.StringIO()
    bar = Progress(running.bridge.pipelines[0].sources, stream=stream, interval=0)
    bar.update(20_000)
    bar.finish()
    size = human_bytes(log.stat().st_size)
    shown = stream.getvalue()
    assert f"{size}/{size}" in shown and "100.0%" in shown and "20,000 lines" in shown
    assert shown.endswith("\n")
