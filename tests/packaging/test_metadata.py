"""What the installed metadata promises: the extras the CLI names exist, `all` is every extra but the
tool sets, the shipped SLO spec is the one compose mounts, and the hooks and the dev tools run one ruff."""

from __future__ import annotations

import importlib.metadata
import re

import obsbox
from obsbox import cli
from obsbox.slo import DEFAULT_SPEC
from tests.packaging.wheel_env import REPO

TOOL_EXTRAS = {"dev", "bench", "all"}


def extras() -> set[str]:
    return set(importlib.metadata.metadata("obsbox").get_all("Provides-Extra") or [])


def test_the_version_is_single_sourced():
    assert importlib.metadata.version("obsbox") == obsbox.__version__
    assert re.search(r'^dynamic = \["version"\]$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert (REPO / "obsbox" / "py.typed").is_file()


def test_every_extra_the_cli_names_exists_and_all_holds_every_other_one():
    assert set(cli.EXTRAS) <= set(cli.COMMANDS)
    assert set(cli.EXTRAS.values()) <= extras()
    assert {"instrument", "dashboards", "demo", "report", "gpu", "bench", "locust", "all", "dev"} <= extras()
    (all_line,) = [r for r in importlib.metadata.requires("obsbox") or [] if r.endswith('extra == "all"')]
    listed = set(re.search(r"obsbox\[([^\]]+)\]", all_line).group(1).split(","))
    assert listed == extras() - TOOL_EXTRAS


def test_nothing_is_missing_for_the_extras_installed_here():
    """scripts/test installs .[all,dev]; `all` and `demo` reach their packages through nested extras.
    (What a core-only install is missing is tested on the wheel, in test_wheel.)"""
    for extra in extras() - {"bench"}:
        assert cli.missing_for(extra) == [], extra


def test_the_shipped_slo_spec_is_the_one_compose_mounts():
    """obsbox/slo/slo.yaml is package data (what an installed obsbox reads); compose/slo.yaml is the copy
    compose and the README's commands use. Edit both, or copy one over the other."""
    assert DEFAULT_SPEC.is_file() and DEFAULT_SPEC.parent == REPO / "obsbox" / "slo"
    assert DEFAULT_SPEC.read_bytes() == (REPO / "compose" / "slo.yaml").read_bytes()


def test_pre_commit_and_the_dev_extra_pin_the_same_ruff():
    hooks = (REPO / ".pre-commit-config.yaml").read_text()
    pinned = set(re.findall(r'"ruff==([0-9.]+)"', hooks))
    dev = [r for r in importlib.metadata.requires("obsbox") or [] if r.startswith("ruff") and 'extra == "dev"' in r]
    assert len(pinned) == 1 and dev == [f'ruff=={pinned.pop()}; extra == "dev"'], (pinned, dev)


def test_a_command_line_builds_the_parser_of_its_command_alone():
    assert cli.command_of(["--log-level", "INFO", "bridge", "app.log", "--once"]) == "bridge"
    assert cli.command_of(["--log-level=DEBUG", "slo", "build"]) == "slo"
    assert cli.command_of(["--help"]) is None and cli.command_of(["bogus"]) is None
    alone = cli.build_parser("slo")._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert list(alone) == ["slo"]
    assert list(cli.build_parser()._subparsers._group_actions[0].choices) == list(cli.COMMANDS)  # type: ignore[union-attr]
