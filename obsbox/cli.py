"""The ``obsbox`` command. Each subcommand lives with the code it drives and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import re
import sys
from collections.abc import Callable

from obsbox import __version__
from obsbox.config import ConfigError

# name → module with ``register(subparsers)``; imported when the CLI starts, so keep heavy imports
# (grafanalib, matplotlib, uvicorn) inside the command functions.
COMMANDS = {
    "bridge": "obsbox.exporters.bridge.cli",
    "demo": "obsbox.exporters.demo.cli",
    "load": "obsbox.exporters.demo.load_cli",
    "up": "obsbox.local.cli",
    "slo": "obsbox.slo.cli",
    "llm": "obsbox.llm.cli",
    "dashboards": "obsbox.dashboards.cli",
    "report": "obsbox.dashboards.report_cli",
    "collector": "obsbox.collector.cli",
}

# name → the extra that brings what the command needs beyond the core install (pip install obsbox).
EXTRAS = {
    "demo": "demo",
    "load": "demo",
    "up": "demo",
    "dashboards": "dashboards",
    "report": "report",
}
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([^\]]*)\])?[^;]*(?:;(.*))?")
_EXTRA_MARKER = re.compile(r"""^\s*extra\s*==\s*["']([^"']+)["']\s*$""")


def install_hint(extra: str) -> str:
    return f"pip install 'obsbox[{extra}]'"


def missing_for(extra: str) -> list[str]:
    """The distributions ``extra`` lists (through nested extras) that are not installed.

    Read from obsbox's installed metadata, so it follows pyproject.toml; empty when obsbox runs
    without metadata (from a source tree on sys.path) or a requirement has a marker beyond ``extra``.
    """
    try:
        requires = importlib.metadata.requires("obsbox") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    by_extra: dict[str, list[tuple[str, list[str]]]] = {}
    for text in requires:
        match = _REQUIREMENT.fullmatch(text)
        marker = _EXTRA_MARKER.match(match.group(3) or "") if match else None
        if match and marker:
            nested = [e.strip() for e in (match.group(2) or "").split(",") if e.strip()]
            by_extra.setdefault(marker.group(1), []).append((match.group(1), nested))
    missing: list[str] = []
    todo, seen = [extra], set()
    while todo:
        current = todo.pop()
        seen.add(current)
        for name, nested in by_extra.get(current, []):
            if name.lower() == "obsbox":
                todo += [e for e in nested if e not in seen]
                continue
            try:
                importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                missing.append(name)
    return sorted(set(missing))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given ``command``, of that one alone: a command's module
    imports what it runs (the bridge's start-up would otherwise import every other command's)."""
    parser = argparse.ArgumentParser(
        prog="obsbox", description="An observability stack in a box: log bridge, exporters, SLOs, dashboards."
    )
    parser.add_argument("--version", action="version", version=f"obsbox {__version__}")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="what obsbox itself logs to stderr (default: WARNING)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        if command in (None, name):
            _register(sub, name, module)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The command ``argv`` names, when it names one of ``COMMANDS`` after the global options."""
    rest = iter(argv)
    for arg in rest:
        if arg == "--log-level":
            next(rest, None)
        elif not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def _register(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, module: str) -> None:
    try:
        importlib.import_module(module).register(sub)
    except ImportError as exc:  # one broken or missing extra must not take the other commands down
        unavailable = sub.add_parser(name, help=f"(unavailable: {exc})", add_help=False)
        unavailable.add_argument("rest", nargs=argparse.REMAINDER)
        unavailable.set_defaults(func=_unavailable(name, exc))


def _unavailable(name: str, exc: ImportError) -> Callable[[argparse.Namespace], int]:
    def explain(_args: argparse.Namespace) -> int:
        print(f"obsbox {name}: cannot load this command: {exc}. {_remedy(name)}", file=sys.stderr)
        return 2

    return explain


def _remedy(name: str) -> str:
    extra = EXTRAS.get(name)
    if extra:
        return f"It needs the '{extra}' extra: {install_hint(extra)}"
    return "Reinstall obsbox: pip install --force-reinstall obsbox"


def _missing_extra(name: str) -> str | None:
    """Why ``name`` cannot run in this install, naming the extra to install; None when it can."""
    extra = EXTRAS.get(name)
    missing = missing_for(extra) if extra else []
    if not extra or not missing:
        return None
    return f"obsbox {name}: needs the '{extra}' extra ({', '.join(missing)} not installed): {install_hint(extra)}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(command_of(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    problem = _missing_extra(args.command)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"obsbox {args.command}: config error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] == "obsbox":
            raise  # a module of obsbox itself: a broken install or a bug, not a missing extra
        print(f"obsbox {args.command}: {exc}. {_remedy(args.command)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
