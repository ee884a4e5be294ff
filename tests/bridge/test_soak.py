"""The short soak (under a minute): many files rotating both ways, SIGKILLs, 503 stretches.
The long one (10 minutes) is ``scripts/soak_bridge`` with its defaults; see BENCHMARKS.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

SOAK = Path(__file__).resolve().parents[2] / "scripts" / "soak_bridge"


@pytest.mark.slow
def test_short_soak_loses_nothing_and_stays_flat():
    args = [
        "--duration",
        "30",  # rotations every 2-6 s of 100 files, kills after 3-7 s of running: well past the floors below
        "--files",
        "100",
        "--rate",
        "800",
        "--rotate-min",
        "2",
        "--rotate-max",
        "6",
        "--kill-min",
        "3",
        "--kill-max",
        "7",
        "--refuse-for",
        "10",
        "--refuse-every",
        "25",
        "--drain-timeout",
        "90",
        "--json",
    ]
    run = subprocess.run([sys.executable, str(SOAK), *args], capture_output=True, text=True, timeout=400, check=False)
    report = orjson.loads(run.stdout)
    print(f"\nsoak: {report}")
    assert report["lost"] == 0, report["problems"]
    assert report["kills"] >= 3 and report["refusals"] >= 1, "the faults were not injected"
    assert min(report["rotations"].values()) >= 200, "too few rotations of each kind"
    assert report["duplicated"] <= report["duplicate_bound"]
    assert report["ok"], report["problems"]
    assert run.returncode == 0
