"""A wheel built from this repository, installed into fresh virtual environments away from the checkout.

The installs go through pip with its cache, from the package index: a missing network fails the test
with pip's own message, never skips it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What a build needs: the same list the Dockerfile copies (a test there keeps it complete).
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "obsbox", "exporters", "collector", "dashboards")
# What the core install must not pull in (they belong to the extras).
HEAVY = ("grafanalib", "uvicorn", "grpcio", "locust", "matplotlib", "opentelemetry-sdk")


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def build_wheel(tmp: Path) -> Path:
    """``pip wheel`` on a copy of the build inputs, so no build/ or egg-info lands in the checkout."""
    source = tmp / "src"
    for name in BUILD_INPUTS:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, source / name)
    out = tmp / "dist"
    done = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        cwd=tmp,
    )
    assert done.returncode == 0, f"pip wheel failed:\n{done.stdout}\n{done.stderr}"
    (wheel,) = out.glob("obsbox-*.whl")
    return wheel


@dataclass
class Env:
    """A virtual environment with the wheel installed, and an empty working folder to run it from."""

    root: Path
    work: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX"}}
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
        env["VIRTUAL_ENV"] = str(self.root)
        env["XDG_STATE_HOME"] = str(self.work.parent / "state")  # the bridge's positions stay in tmp
        return env

    def obsbox(self, *args: str, timeout: float = 120):
        return run([str(self.root / "bin" / "obsbox"), *args], cwd=self.work, env=self.environ(), timeout=timeout)

    def py(self, code: str):
        return run([str(self.python), "-c", code], cwd=self.work, env=self.environ())

    def distributions(self) -> set[str]:
        code = "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"
        done = self.py(code)
        assert done.returncode == 0, done.stderr
        return {name.lower().replace("_", "-") for name in done.stdout.split()}


def install(tmp: Path, wheel: Path, extras: str = "") -> Env:
    """A fresh venv (no pip of its own: this interpreter's pip installs into it) with ``wheel[extras]``."""
    root = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(root)
    requirement = f"obsbox[{extras}] @ {wheel.as_uri()}" if extras else str(wheel)
    done = run(
        [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install", "-q", requirement],
        cwd=tmp,
    )
    assert done.returncode == 0, f"pip install {requirement} failed:\n{done.stdout}\n{done.stderr}"
    work = tmp / "empty"
    work.mkdir()
    return Env(root, work)
