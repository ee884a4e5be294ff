"""scripts/up refuses to publish the stack's ports beyond loopback unless the user opts in, and says
what would be reachable (scripts/setup.sh ``refuse_remote_bind``, run here as scripts/up runs it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup.sh"


def check(bind: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f'. "{SETUP}"; refuse_remote_bind "$0"; echo accepted', bind],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        check=False,
        timeout=30,
    )


@pytest.mark.parametrize("bind", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_is_accepted(bind):
    result = check(bind)
    assert result.returncode == 0 and "accepted" in result.stdout and not result.stderr


@pytest.mark.parametrize("bind", ["0.0.0.0", "192.0.2.10", "::"])
def test_any_other_address_is_refused_naming_what_it_would_expose(bind):
    result = check(bind)
    assert result.returncode == 1 and "accepted" not in result.stdout
    for exposed in (
        "OTLP ingestion (4317, 4318)",
        "write and query APIs (9090)",
        "3100 stays on 127.0.0.1",
        "ALLOW_REMOTE=1",
    ):
        assert exposed in result.stderr


def test_the_opt_in_accepts_it_with_a_warning():
    result = check("0.0.0.0", ALLOW_REMOTE="1")
    assert result.returncode == 0 and "accepted" in result.stdout and "warning" in result.stderr
