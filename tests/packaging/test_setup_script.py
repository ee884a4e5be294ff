"""scripts/setup.sh, the set-up scripts/test and scripts/up share, run by bash for real: an active
virtual environment is used as it is, and pip runs only when pyproject.toml or the extras asked for
changed. The environment here has no pip of its own, so an install that should not happen would fail
the run, and one that should happen shows in its output (and fails, for want of pip)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.packaging.wheel_env import REPO


@pytest.fixture
def active_env(tmp_path) -> Path:
    """A venv without pip in which ``import obsbox`` finds this checkout (as an editable install would)."""
    root = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(root)
    purelib = sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)})
    Path(purelib, "checkout.pth").write_text(f"{REPO}\n")
    return root


def setup(env_root: Path, extras: str, then: str = 'echo "PY=$PY"') -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in {"CONDA_PREFIX", "OBSBOX_PYTHON"}}
    environ["VIRTUAL_ENV"] = str(env_root)
    script = f"set -euo pipefail; . scripts/setup.sh; use_python_env {extras}; {then}"
    return subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=environ, capture_output=True, text=True, timeout=60, check=False
    )


def stamp(env_root: Path, key: str, extras: str) -> None:
    (env_root / ".obsbox-install").write_text(f"{key}\n{extras}\n")


def current_key(env_root: Path) -> str:
    """The stamp's first line for this checkout, as the script computes it."""
    script = f'. scripts/setup.sh; PY="{env_root}/bin/python"; _install_key'
    return subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def test_an_active_venv_is_used_as_it_is_and_an_unchanged_install_is_not_redone(active_env):
    first = setup(active_env, "all,dev")
    assert first.returncode != 0 and "(the active virtual environment): pip install -e '.[all,dev]'" in first.stdout
    assert "No module named pip" in first.stderr  # it really ran pip, in that environment

    stamp(active_env, current_key(active_env), "all,dev")
    again = setup(active_env, "dev", then='echo "PY=$PY"; command -v python')
    assert again.returncode == 0, again.stderr
    assert "pyproject.toml unchanged" in again.stdout and "pip install" not in again.stdout
    lines = again.stdout.splitlines()
    assert f"PY={active_env}/bin/python" in lines
    assert lines[-1] == f"{active_env}/bin/python"  # its bin/ comes first on PATH, as `activate` does


def test_a_new_extra_or_a_changed_pyproject_reinstalls_keeping_the_extras_installed(active_env):
    key = current_key(active_env)
    stamp(active_env, key, "all,dev")
    more = setup(active_env, "gpu")
    assert "pip install -e '.[all,dev,gpu]'" in more.stdout, more

    stamp(active_env, "0" * 64, "all,dev")  # the hash of another pyproject.toml
    changed = setup(active_env, "dev")
    assert "pip install -e '.[all,dev]'" in changed.stdout, changed


def test_an_environment_whose_python_is_too_old_is_refused_with_its_version(tmp_path):
    """VIRTUAL_ENV names the interpreter; one older than 3.10 gets an error naming its version.
    Here a venv of this Python stands in, with the minimum raised above it, so the test runs anywhere."""
    root = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(root)
    found = ".".join(map(str, sys.version_info[:3]))
    environ = {k: v for k, v in os.environ.items() if k != "CONDA_PREFIX"}
    environ["VIRTUAL_ENV"] = str(root)
    script = (
        f". scripts/setup.sh; OBSBOX_MIN_PYTHON={sys.version_info[0]}.{sys.version_info[1] + 1}; use_python_env dev"
    )
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=environ, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert f"is Python {found}." in done.stderr and "the active virtual environment" in done.stderr, done.stderr
