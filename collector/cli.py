"""``obsbox collector check FILE...``: the collector config checker as a command, for users' own edits.

Exit 0 with one OK line per file when every file passes; exit 1 with one line per problem
(``FILE: component: what is wrong``) when any does not; exit 2 when the distribution's component
list itself cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

import yaml

from obsbox.collector import check

# The pinned otelcol-contrib release, shipped with the package (collector/testdata).
TESTDATA = resources.files("obsbox.collector") / "testdata"
RELEASE = "otelcol-contrib 0.159.0"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "collector",
        help="OpenTelemetry Collector configs: check them against the pinned otelcol-contrib release",
        description="Tools for the OpenTelemetry Collector configs (collector/otelcol.yaml, agent.yaml, gateway.yaml).",
    )
    commands = p.add_subparsers(dest="collector_command", metavar="SUBCOMMAND", required=True)
    checker = commands.add_parser(
        "check",
        help="check configs: component types, pipeline wiring, env defaults",
        description=f"Check collector configs statically against the component list of {RELEASE}: every "
        "component type exists in the distribution, every pipeline reference is defined and every defined "
        "component is used, connectors join two pipelines, and every ${env:VAR} has a default. Exit 1 with "
        "the reasons when a file fails.",
    )
    checker.add_argument("files", type=Path, nargs="+", metavar="FILE", help="collector config (YAML)")
    checker.add_argument("--manifest", type=Path, help=f"builder manifest of the distribution (default: {RELEASE})")
    checker.add_argument("--types", type=Path, help="module → component type map (default: the shipped one)")
    checker.set_defaults(func=run_check)


def distribution(manifest: Path | None, types: Path | None) -> check.Distribution:
    """The distribution to check against: the given files, or the pinned release shipped with obsbox."""
    with (
        resources.as_file(TESTDATA / "otelcol-contrib-manifest.yaml") as default_manifest,
        resources.as_file(TESTDATA / "component-types.yaml") as default_types,
    ):
        return check.Distribution.load(manifest or default_manifest, types or default_types)


def run_check(args: argparse.Namespace) -> int:
    try:
        dist = distribution(args.manifest, args.types)
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        print(f"obsbox collector check: cannot read the distribution's component list: {exc}", file=sys.stderr)
        return 2
    failed = False
    for path in args.files:
        found = check.check_file(path, dist)
        if found:
            failed = True
            for problem in found:
                print(f"{path}: {problem}", file=sys.stderr)
        else:
            print(f"{path}: OK ({RELEASE})")
    return 1 if failed else 0
