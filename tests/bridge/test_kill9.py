"""At-least-once across ``kill -9``: a 200k-line stream, the bridge killed at random points ten times.

Nothing may be lost, and every duplicate must come from the one batch that was in flight at a kill:
after each restart the output may step back by at most ``max_records`` lines.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time

import orjson
import yaml

TOTAL = 200_000
BATCH = 2_000
KILLS = 10


def write_stream(path, stop_after: int) -> None:
    with open(path, "ab", buffering=0) as fh:
        for start in range(0, stop_after, 1_000):
            chunk = b"".join(
                orjson.dumps({"seq": i, "msg": "event", "ActivityId": "7a6e3f1c-9b2d-4e8f-a1b2-c3d4e5f60718"}) + b"\n"
                for i in range(start, min(start + 1_000, stop_after))
            )
            fh.write(chunk)
            time.sleep(0.05)


def bridge_config(tmp_path, log, out, once: bool) -> str:
    config = {
        "sources": {
            "tail": {
                "include": [str(log)],
                "positions": str(tmp_path / "positions.json"),
            }
        },
        "processors": {"parse": {}, "trace": {}, "redact": {}},
        "sinks": {"file": {"path": str(out)}},
        "pipelines": {
            "logs": {
                "sources": ["tail"],
                "processors": ["parse", "trace", "redact"],
                "sinks": ["file"],
                "batch": {"max_records": BATCH, "timeout": 0.05},
            }
        },
        "settings": {"state_dir": str(tmp_path / "state"), "progress": False, "once": once, "poll_interval": 0.01},
    }
    path = tmp_path / ("once.yaml" if once else "tail.yaml")
    path.write_text(yaml.safe_dump(config))
    return str(path)


def right_after_a_write(out, limit: float = 2.0) -> None:
    """Return as soon as the sink has written (the window before positions are saved)."""
    size = out.stat().st_size if out.exists() else 0
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and (out.stat().st_size if out.exists() else 0) == size:
        time.sleep(0.0005)


def start(config: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "obsbox", "bridge", "--config", config],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_kill_9_ten_times_loses_nothing_and_duplicates_only_the_batch_in_flight(tmp_path):
    rng = random.Random(20261130)
    log, out = tmp_path / "app.log", tmp_path / "out.jsonl"
    log.touch()
    writer = threading.Thread(target=write_stream, args=(log, TOTAL), daemon=True)
    writer.start()
    tail_config = bridge_config(tmp_path, log, out, once=False)
    kills = 0
    deadline = time.monotonic() + 120
    while kills < KILLS and time.monotonic() < deadline:
        proc = start(tail_config)
        time.sleep(rng.uniform(0.4, 1.2))
        if kills % 2:  # half the kills land right after a sink write, before positions are saved
            right_after_a_write(out)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        kills += 1
    writer.join(60)
    assert kills == KILLS and not writer.is_alive()
    final = subprocess.run(
        [sys.executable, "-m", "obsbox", "bridge", "--config", bridge_config(tmp_path, log, out, True)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert final.returncode == 0, final.stderr.decode()[-2000:]

    order = [orjson.loads(line)["seq"] for line in out.read_bytes().splitlines()]
    missing = set(range(TOTAL)) - set(order)
    assert not missing, f"{len(missing)} lines lost, e.g. {sorted(missing)[:5]}"
    steps_back = [prev + 1 - seq for prev, seq in itertools.pairwise(order) if seq != prev + 1]
    assert all(0 < step <= BATCH for step in steps_back), f"output stepped back by {steps_back}"
    assert len(steps_back) <= KILLS, f"{len(steps_back)} resends for {KILLS} kills"
    duplicates = len(order) - TOTAL
    assert duplicates == sum(steps_back)
    print(
        f"\n{KILLS} kills: 0 lost, {duplicates} duplicates in {len(steps_back)} resent batches "
        f"(largest {max(steps_back, default=0)} lines, batch size {BATCH})"
    )
