"""Worker processes: the same output as without them, every line through a worker's SIGKILL, in
order, and no worker left behind when the bridge itself is killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import orjson
import pytest

from obsbox.config import ConfigError
from obsbox.exporters.bridge import config as bridge_config
from obsbox.exporters.bridge import slots
from obsbox.exporters.bridge.runner import PART_LINES, Bridge
from obsbox.exporters.bridge.workers import InProcess, available_cores
from obsbox.local.receiver import Receiver

SECRET = b'{"msg": "login", "password": "hunter2", "ActivityId": "7a6e3f1c-9b2d-4e8f-a1b2-c3d4e5f60718"}'


def config(log: Path, state: Path, sinks: dict, workers: int, once: bool = True) -> dict:
    return {
        "sources": {"tail": {"include": [str(log)], "positions": str(state / "positions.json"), "scan_interval": 0.05}},
        "processors": {"parse": {}, "trace": {}, "redact": {}},
        "sinks": sinks,
        "pipelines": {
            "logs": {
                "sources": ["tail"],
                "processors": ["parse", "trace", "redact"],
                "sinks": list(sinks),
                "batch": {"max_records": 500, "timeout": 0.05},
            }
        },
        "settings": {
            "state_dir": str(state),
            "progress": False,
            "once": once,
            "poll_interval": 0.01,
            "workers": workers,
            "shutdown_timeout": 5,
        },
    }


def mixed_lines(count: int) -> bytes:
    """JSON with and without IDs and levels, secrets, plain text, broken UTF-8, an array, blanks."""
    out = []
    for i in range(count):
        kind = i % 7
        if kind == 0:
            out.append(orjson.dumps({"seq": i, "level": "warn", "ActivityId": "00-" + f"{i:032x}"[-32:] + "-00"}))
        elif kind == 1:
            out.append(SECRET)
        elif kind == 2:
            out.append(b"plain text line %d" % i)
        elif kind == 3:
            out.append(b'{"seq": %d, "msg": "caf\xc3' % i)
        elif kind == 4:
            out.append(b"[1, 2, 3]")
        elif kind == 5:
            out.append(
                orjson.dumps({"seq": i, "Timestamp": "2026-11-30T12:00:01.5Z", "Level": "Error", "service": "svc"})
            )
        else:
            out.append(orjson.dumps({"seq": i, "traceparent": f"00-{i + 1:032x}-{i + 1:016x}-01", "ts": 1764500000}))
    return b"\n".join(out) + b"\n"


def run_once(data: dict) -> Bridge:
    bridge = Bridge(bridge_config.from_data(data))
    assert bridge.run()
    return bridge


# How a pipeline's lines are processed: workers 0 on the fused path in the bridge process, workers 0
# through the stages (InProcess.of refusing, as for a pipeline the fused path does not take), workers 2.
MODES = {"fused here": 0, "stages here": 0, "workers": 2}


def run_in(mode: str, data: dict, monkeypatch: pytest.MonkeyPatch) -> Bridge:
    with monkeypatch.context() as patch:
        if mode == "stages here":
            patch.setattr(InProcess, "of", classmethod(lambda _cls, _plan, _metrics: None))
        bridge = run_once(data)
    pipeline = bridge.pipelines[0]
    assert (pipeline.pool is not None, pipeline.in_process is not None) == (mode == "workers", mode == "fused here")
    return bridge


def counters(bridge: Bridge) -> dict[str, float]:
    """Every counter sample of the bridge's registry, by name and labels."""
    return {
        f"{sample.name}{sorted(sample.labels.items())}": sample.value
        for metric in bridge.metrics.registry.collect()
        if metric.type == "counter"
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def test_workers_and_the_fused_path_write_what_the_stages_write_and_count_the_same(tmp_path, monkeypatch):
    log = tmp_path / "app.log"
    log.write_bytes(mixed_lines(5_000))
    outputs, metrics = {}, {}
    for index, (mode, workers) in enumerate(MODES.items()):
        out = tmp_path / f"out-{index}.jsonl"
        bridge = run_in(
            mode, config(log, tmp_path / f"state-{index}", {"file": {"path": str(out)}}, workers), monkeypatch
        )
        outputs[mode], metrics[mode] = out.read_bytes(), counters(bridge)
    assert outputs["workers"] == outputs["fused here"] == outputs["stages here"]
    assert b"hunter2" not in outputs["workers"] and outputs["workers"].count(b"[REDACTED]") == 5_000 // 7 + 1
    assert metrics["workers"] == metrics["fused here"] == metrics["stages here"]
    assert metrics["workers"]["obsbox_bridge_parse_errors_total[('reason', 'invalid_utf8')]"] > 0


def decoded(receiver: Receiver) -> list[tuple]:
    """What the receiver decoded with the official opentelemetry-proto messages, sorted."""
    with receiver.lock:
        return sorted(
            (
                rec.body.string_value,
                rec.trace_id,
                rec.span_id,
                rec.time_unix_nano,
                rec.severity_number,
                rec.severity_text,
                resource["service.name"],
                sorted((kv.key, str(kv.value)) for kv in rec.attributes),
            )
            for resource, rec in receiver.log_records
        )


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_otlp_requests_encoded_in_workers_decode_to_the_same_records(tmp_path, compression, monkeypatch):
    """Body, IDs, time, severity, service and attributes, as the stages in the bridge encode them."""
    log = tmp_path / "app.log"
    log.write_bytes(mixed_lines(3_000))
    seen = {}
    for index, (mode, workers) in enumerate(MODES.items()):
        receiver = Receiver().start()
        try:
            sink = {"otlp": {"endpoint": receiver.url, "compression": compression}}
            run_in(mode, config(log, tmp_path / f"state-{index}", sink, workers), monkeypatch)
            seen[mode] = decoded(receiver)
            encodings = {headers.get("content-encoding") for _, headers, _ in receiver.requests}
        finally:
            receiver.stop()
        assert encodings == {"gzip" if compression == "gzip" else None}
    assert len(seen["workers"]) == 3_000
    assert seen["workers"] == seen["fused here"] == seen["stages here"]
    assert {row[6] for row in seen["workers"]} == {"svc", "unknown_service"}
    assert {row[4] for row in seen["workers"]} >= {13, 17}


def test_a_pipeline_the_fused_path_does_not_take_runs_its_stages_in_the_bridge(tmp_path):
    """A sink that needs whole records (Loki): no fused path here, and the processors are the bridge's."""
    log = tmp_path / "app.log"
    log.write_bytes(mixed_lines(10))
    data = config(log, tmp_path / "state", {"loki": {"url": "http://127.0.0.1:9/loki/api/v1/push"}}, 0)
    bridge = Bridge(bridge_config.from_data(data))
    try:
        pipeline = bridge.pipelines[0]
        assert pipeline.in_process is None and pipeline.pool is None
        assert [processor.type for processor in pipeline.processors] == ["parse", "trace", "redact"]
    finally:
        bridge.close()


def first_batch(tmp_path: Path, lines: int) -> list[tuple[list[int], bool]]:
    """How a live bridge with 2 workers hands out the first batch it reads from a file of ``lines``
    lines (at most 8,000 a batch): each part's line numbers, and whether it saves positions."""
    log = tmp_path / f"app-{lines}.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(lines)))
    data = config(log, tmp_path / f"state-{lines}", {"file": {"path": str(tmp_path / "out.jsonl")}}, 2, once=False)
    data["pipelines"]["logs"]["batch"] = {"max_records": 8_000, "timeout": 0.2}
    data["sources"]["tail"]["multiline"] = "none"  # every line of the read in the first batch
    bridge = Bridge(bridge_config.from_data(data))
    pipeline, ahead = bridge.pipelines[0], deque()
    try:
        pipeline._read_ahead(ahead)
    finally:
        if pipeline.pool is not None:
            pipeline.pool.shutdown()
        bridge.close()
    return [([orjson.loads(rec.raw)["seq"] for rec in work.lines.records()], bool(work.checkpoints)) for work in ahead]


def test_a_batch_cut_by_its_timeout_is_shared_among_the_workers_and_only_its_last_part_saves_positions(tmp_path):
    """Its lines wait for their part, not the whole batch; saving positions after the last part
    acknowledges every part before it, which goes out first."""
    assert first_batch(tmp_path, 3_000) == [(list(range(1_500)), False), (list(range(1_500, 3_000)), True)]
    # a full batch goes out in parts of at most PART_LINES (a worker's memory follows its part), and
    # a small one stays whole
    assert PART_LINES < 8_000 <= 3 * PART_LINES
    assert first_batch(tmp_path, 9_000) == [
        (list(range(0, 2_667)), False),
        (list(range(2_667, 5_334)), False),
        (list(range(5_334, 8_000)), True),
    ]
    assert first_batch(tmp_path, 600) == [(list(range(600)), True)]


# what a worker has no use for: metrics (it keeps a Tally), YAML, the SDK and protobuf's messages
# (requests are encoded by obsbox's own wire code), HTTP and TLS (the bridge sends), the config loader
NOT_IN_A_WORKER = (
    "prometheus_client",
    "yaml",
    "opentelemetry",
    "google.protobuf",
    "http.client",
    "ssl",
    "importlib.metadata",
    "obsbox.exporters.bridge.config",
    "obsbox.exporters.bridge.metrics",
    "obsbox.exporters.bridge.runner",
)


def test_a_worker_imports_only_what_it_needs(tmp_path):
    """Each module a worker imports costs every worker its memory (BENCHMARKS.md, "Log bridge
    scaling with workers"): the modules above stay in the bridge process."""
    log = tmp_path / "app.log"
    log.write_bytes(b"")
    sinks = {"otlp": {"endpoint": "http://127.0.0.1:9"}, "file": {"path": str(tmp_path / "out.jsonl")}}
    bridge = Bridge(bridge_config.from_data(config(log, tmp_path / "state", sinks, 1)))
    pool = bridge.pipelines[0].pool
    assert pool is not None
    try:  # eval: a builtin, so asking the worker imports nothing of its own
        modules = pool._executor().submit(eval, "sorted(__import__('sys').modules)").result(60)
    finally:
        pool.close()
        bridge.close()
    assert "obsbox.exporters.bridge.sinks.otlp" in modules and "obsbox.exporters.bridge.processors.redact" in modules
    assert [name for name in modules if any(name == m or name.startswith(m + ".") for m in NOT_IN_A_WORKER)] == []


BLOCKED_FEEDER = """
import multiprocessing, os, signal, sys, time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from obsbox.exporters.bridge.workers import _unblock_call_queue

def busy(data):
    time.sleep(60)

if __name__ == "__main__":
    executor = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    first = executor.submit(busy, b"")
    while not executor._processes:
        time.sleep(0.01)
    time.sleep(1)  # the worker is busy: the next batch is being written, and nobody reads it
    executor.submit(busy, b"x" * (8 << 20))
    time.sleep(0.5)
    for pid in list(executor._processes):
        os.kill(pid, signal.SIGKILL)
    try:
        first.result(30)
    except BrokenProcessPool:
        pass
    _unblock_call_queue(executor)  # what WorkerPool._restart does before letting the pool go
    executor.shutdown(wait=False)
    print("exiting", flush=True)
"""


def test_a_pool_broken_while_a_batch_was_being_written_to_it_does_not_hang_the_exit(tmp_path):
    """A worker killed while the next batch is on its way: the queue's feeder thread blocks on a
    pipe nobody reads, and the interpreter waits for it at exit, for good, unless the pool unblocks
    it (Pythons without CPython's own fix for gh-94777, such as Debian 12's 3.11.2)."""
    script = tmp_path / "blocked_feeder.py"
    script.write_text(BLOCKED_FEEDER)
    try:  # it exits in about a second; a hang is for good
        done = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the process hung at exit, waiting for the broken pool's queue feeder thread")
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr[-2000:]


def worker_pids(bridge: Bridge) -> list[int]:
    pool = bridge.pipelines[0].pool
    return pool.pids() if pool is not None else []


def test_a_worker_killed_mid_stream_is_noticed_reported_and_every_line_arrives_once_in_order(tmp_path, caplog):
    total = 60_000
    log, out = tmp_path / "app.log", tmp_path / "out.jsonl"
    log.touch()
    bridge = Bridge(bridge_config.from_data(config(log, tmp_path, {"file": {"path": str(out)}}, 2, once=False)))
    runner = threading.Thread(target=bridge.run, daemon=True)
    runner.start()

    def write() -> None:
        with open(log, "ab", buffering=0) as fh:
            for start in range(0, total, 2_000):
                fh.write(
                    b"".join(orjson.dumps({"seq": i, "msg": "event"}) + b"\n" for i in range(start, start + 2_000))
                )
                time.sleep(0.02)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        deadline = time.monotonic() + 30
        while (not out.exists() or out.stat().st_size < 200_000) and time.monotonic() < deadline:
            time.sleep(0.01)
        victims = worker_pids(bridge)
        assert victims, "no worker processes were running"
        os.kill(victims[0], signal.SIGKILL)
        writer.join(60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and out.read_bytes().count(b"\n") < total:
            time.sleep(0.05)
    finally:
        bridge.request_stop()
        runner.join(15)
    seqs = [orjson.loads(line)["seq"] for line in out.read_bytes().splitlines()]
    assert seqs == list(range(total)), f"{len(seqs)} lines, {len(set(range(total)) - set(seqs))} missing"
    # one crash, recovered by new workers (not by the fallback for batches that keep crashing them)
    assert bridge.metrics.errors.labels("worker_crash")._value.get() == 1
    assert any("a worker process died" in r.getMessage() for r in caplog.records)
    assert victims[0] not in worker_pids(bridge)


def children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(p) for p in (task / "children").read_text().split())
    return found


def test_workers_do_not_outlive_a_bridge_killed_with_sigkill(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b'{"seq": 0}\n')
    path = tmp_path / "bridge.yaml"
    data = config(log, tmp_path, {"file": {"path": str(tmp_path / "out.jsonl")}}, 2, once=False)
    path.write_text(orjson.dumps(data).decode())
    proc = subprocess.Popen([sys.executable, "-m", "obsbox", "bridge", "--config", str(path)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        kids: set[int] = set()
        while len(kids) < 2 and time.monotonic() < deadline:
            kids = children(proc.pid)
            time.sleep(0.05)
        assert len(kids) >= 2, f"expected two workers, found {kids}"
        while not segments(proc.pid) and time.monotonic() < deadline:  # the first batch took a slot
            time.sleep(0.05)
        assert segments(proc.pid), "expected the first batch in a shared-memory slot"
    finally:
        proc.kill()
        proc.wait(10)
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{kid}").exists() for kid in kids) and time.monotonic() < deadline:
        for kid in kids:  # they are re-parented; reap them if they are ours to reap
            with contextlib.suppress(ChildProcessError):
                os.waitpid(kid, os.WNOHANG)
        time.sleep(0.05)
    alive = [kid for kid in kids if Path(f"/proc/{kid}").exists() and "Z" not in _state(kid)]
    assert not alive, f"workers {alive} outlived the bridge"
    deadline = time.monotonic() + 10  # multiprocessing's resource tracker removes them once all are gone
    while segments(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not segments(proc.pid), "the killed bridge's shared-memory slots were left behind"


def segments(pid: int) -> list[str]:
    return [path.name for path in slots.SHM_DIR.glob(f"obsbox-{pid}-*")]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_workers_setting_and_flag_are_checked(tmp_path):
    data = config(tmp_path / "a.log", tmp_path, {"file": {"path": str(tmp_path / "o")}}, -1)
    with pytest.raises(ConfigError, match="workers"):
        bridge_config.from_data(data)
    printed = subprocess.run(
        [sys.executable, "-m", "obsbox", "bridge", "x.log", "--workers", "3", "--print-config"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "workers: 3" in printed


def test_the_default_counts_the_cores_a_cgroup_quota_allows(tmp_path):
    cpu_max = tmp_path / "cpu.max"
    mask = len(os.sched_getaffinity(0))
    assert available_cores(tmp_path / "absent") == mask
    cpu_max.write_text("max 100000\n")
    assert available_cores(cpu_max) == mask
    cpu_max.write_text("150000 100000\n")  # --cpus 1.5: two cores' worth of time, at most
    assert available_cores(cpu_max) == min(mask, 2)
    cpu_max.write_text("50000 100000\n")
    assert available_cores(cpu_max) == 1
