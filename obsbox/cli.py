"""The ``obsbox`` command. Each subcommand lives with the code it drives and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from obsbox import __version__
from obsbox.config import ConfigError

# name → module with ``register(subparsers)``; imported when the CLI starts, so keep heavy imports
# (grafanalib, matplotlib, uvicorn) inside the command functions.
COMMANDS = {
    "bridge": "obsbox.exporters.bridge.cli",
    "demo": "obsbox.exporters.demo.cli",
    "load": "obsbox.exporters.demo.load_cli",
    "up": "obsbox.exporters.demo.up_cli",
    "slo": "obsbox.slo.cli",
    "dashboards": "obsbox.dashboards.cli",
    "report": "obsbox.dashboards.report_cli",
    "collector": "obsbox.collector.cli",
}


def build_parser() -> argparse.ArgumentParser:
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
        _register(sub, name, module)
    return parser


def _register(sub: argparse._SubParsersAction, name: str, module: str) -> None:
    try:
        importlib.import_module(module).register(sub)
    except ImportError as exc:  # one broken or missing extra must not take the other commands down
        unavailable = sub.add_parser(name, help=f"(unavailable: {exc})", add_help=False)
        unavailable.add_argument("rest", nargs=argparse.REMAINDER)
        unavailable.set_defaults(func=_unavailable(name, exc))


def _unavailable(name: str, exc: ImportError):
    def explain(_args: argparse.Namespace) -> int:
        print(
            f"obsbox {name}: cannot load this command: {exc}. Reinstall obsbox (pip install obsbox) "
            "or the extra that provides it.",
            file=sys.stderr,
        )
        return 2

    return explain


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"obsbox {args.command}: config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
