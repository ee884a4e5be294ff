"""The obsbox image's Dockerfile and .dockerignore, read statically (no Docker engine here)."""

from __future__ import annotations

import fnmatch
import json
import re

from obsbox import conventions
from tests.stack.conftest import REPO


def instructions(text: str) -> list[str]:
    """Dockerfile instructions, one string each, with backslash continuations joined."""
    found, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        current = f"{current} {line}".strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            found.append(current)
            current = ""
    return found


INSTRUCTIONS = instructions((REPO / "Dockerfile").read_text())
IGNORED = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")]


def final_stage() -> list[str]:
    starts = [i for i, line in enumerate(INSTRUCTIONS) if line.startswith("FROM ")]
    return INSTRUCTIONS[starts[-1] :]


def instruction(stage: list[str], keyword: str) -> list[str]:
    return [line[len(keyword) + 1 :] for line in stage if line.startswith(keyword + " ")]


def ignored(path: str) -> bool:
    return any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/") for p in IGNORED)


def test_python_slim_base_and_the_obsbox_entrypoint():
    for image in instruction(INSTRUCTIONS, "FROM"):
        assert image.split()[0].startswith("python:3.11-slim"), image
    stage = final_stage()
    assert json.loads(instruction(stage, "ENTRYPOINT")[0]) == ["obsbox"]


def test_runs_as_a_non_root_user():
    (user,) = instruction(final_stage(), "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000, user


def test_copies_everything_the_package_build_needs_and_nothing_ignored():
    pyproject = (REPO / "pyproject.toml").read_text()
    readme = re.search(r'^readme = "([^"]+)"', pyproject, re.M).group(1)
    package_dirs = pyproject.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
    needed = {"pyproject.toml", readme, "obsbox", *re.findall(r'^"[\w.]+" = "([^"]+)"', package_dirs, re.M)}
    assert {"exporters", "collector", "dashboards"} <= needed
    copied = set()
    for args in instruction(INSTRUCTIONS, "COPY"):
        if args.startswith("--from="):
            continue
        *sources, _ = args.split()
        copied |= set(sources)
    assert needed <= copied, needed - copied
    for source in copied:
        assert (REPO / source).exists(), source
        assert not ignored(source), f"{source} is copied but .dockerignore excludes it"
    assert any("pip install ." in line for line in instruction(INSTRUCTIONS, "RUN"))


def test_volume_mount_points_exist_and_belong_to_the_user(rendered):
    run = " ".join(instruction(final_stage(), "RUN"))
    for service, target in (("bridge", "/var/lib/obsbox"), ("gateway", "/logs-demo")):
        assert any(v.split(":")[1] == target for v in rendered["services"][service]["volumes"]), service
        assert target in run.split("mkdir -p", 1)[1].split("&&", 1)[0], target
        assert target in run.split("chown", 1)[1], target


def test_exposes_the_gateway_and_bridge_ports():
    exposed = {int(p) for line in instruction(final_stage(), "EXPOSE") for p in line.split()}
    assert exposed == {conventions.PORTS["gateway"], conventions.PORTS["bridge_metrics"]}


def test_dockerignore_keeps_tests_and_local_state_out():
    for path in (".git", "tests", ".venv", "compose", ".env"):
        assert ignored(path), path
