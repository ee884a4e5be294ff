"""``obsbox slo``: build Prometheus rules from an SLO spec, check a spec and its rules file, or test the rules."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from obsbox.config import ConfigError, load_yaml
from obsbox.logrules import Rule, load_rules
from obsbox.slo import openslo, testgen
from obsbox.slo.policies import describe
from obsbox.slo.rules import emit, estimates, render, rules, slo_windows, up_to_date
from obsbox.slo.selectors import num
from obsbox.slo.spec import DEFAULT_SPEC, load


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "slo",
        help="SLOs as code: Prometheus recording rules and burn-rate alerts from an SLO spec",
        description="Turn an SLO spec (YAML) into a Prometheus rules file: SLI error ratios, error budgets, "
        "burn rates, the SRE Workbook's multi-window multi-burn-rate alerts, the alerts of the log_metrics "
        "rules and the GPU autoscaling signals.",
    )
    commands = p.add_subparsers(dest="slo_command", metavar="SUBCOMMAND", required=True)

    build = commands.add_parser("build", help="write the rules file", description="Write the rules file.")
    build.add_argument("--out", type=Path, metavar="RULES_FILE", help="where to write (default: standard output)")
    _log_rule_options(build)
    build.set_defaults(func=_build)

    check = commands.add_parser(
        "check",
        help="validate a spec; with --rules, fail when the rules file is out of date",
        description="Validate an SLO spec and print its SLOs with their alert thresholds. With --rules, "
        "exit 1 when that file is not what `obsbox slo build` would write.",
    )
    check.add_argument("--rules", type=Path, metavar="RULES_FILE", help="the generated rules file to compare")
    _log_rule_options(check)
    check.set_defaults(func=_check)
    _openslo_commands(commands)

    test = commands.add_parser(
        "test",
        help="generate promtool tests for each SLO and run them",
        description="Per SLO, generate `promtool test rules` cases (a steady good period, no data, a fast burn, "
        "a slow burn, each of its own burn-rate conditions firing after its alertAfter, and its error budget "
        "spent through every step of its policy) with the alerts the spec expects, run them with promtool "
        "(two runs at once), and print a verdict per SLO. Exit 1 when a test fails, 2 without promtool on "
        "the PATH.",
    )
    test.add_argument("--rules", type=Path, metavar="RULES_FILE", help="the rules to test (default: build them)")
    test.add_argument("--out", type=Path, metavar="DIR", help="keep the tests here (default: a temporary folder)")
    _log_rule_options(test)
    test.set_defaults(func=_test)


def _log_rule_options(p: argparse.ArgumentParser) -> None:
    """The options ``build`` and ``check`` share: the spec, and the log rules whose alerts to add."""
    p.add_argument(
        "spec",
        type=Path,
        nargs="?",
        default=DEFAULT_SPEC,
        metavar="SLO_YAML",
        help="the SLO spec (default: the shipped example)",
    )
    p.add_argument(
        "--log-rules",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="log_metrics rules whose alerts to add to the shipped ones (repeatable)",
    )
    p.add_argument("--no-default-log-rules", action="store_true", help="leave out the shipped log_metrics rules")


def log_rules(files: Sequence[Path] = (), defaults: bool = True) -> list[Rule]:
    """The log_metrics rules whose alerts go into the rules file: the shipped ones and those in ``files``."""
    return (load_rules() if defaults else []) + [rule for f in files for rule in load_rules(f)]


def generate(spec: Path, log_rule_objects: Sequence[Rule] | None = None) -> str:
    """The rules file's text for ``spec``, as ``obsbox slo build`` writes it."""
    found = log_rules() if log_rule_objects is None else list(log_rule_objects)
    slos = load(spec, found)
    for line in estimates(slos):
        print(f"warning: {line}", file=sys.stderr)
    return render(rules(slos, found), Path(spec).name, slos)


def _log_rules(args: argparse.Namespace) -> list[Rule]:
    return log_rules(args.log_rules, not args.no_default_log_rules)


def _build(args: argparse.Namespace) -> int:
    text = generate(args.spec, _log_rules(args))
    return emit(args.out, text)


def _check(args: argparse.Namespace) -> int:
    found = _log_rules(args)
    slos = load(args.spec, found)
    text = render(rules(slos, found), args.spec.name, slos)
    for slo in slos:
        print(
            f"{slo.name} ({slo.service}): {slo.sli.kind}, objective {num(slo.objective)} over {slo.window}, "
            f"error budget {num(slo.error_budget)}, windows {' '.join(slo_windows(slo))}"
        )
        for c in slo.burn_conditions():
            print(f"  {c.severity}: burn >= {num(c.factor)} over {c.long_window} and {c.short_window}")
        if slo.policy:
            print(f"  policy: {describe(slo.policy)}")
        if estimate := slo.sli.estimate():
            print(f"  estimate: {estimate}")
    if args.rules is not None and not up_to_date(args.rules, text, f"obsbox slo build {args.spec} --out {args.rules}"):
        return 1
    return 0


def _test(args: argparse.Namespace) -> int:
    promtool = shutil.which("promtool")
    if promtool is None:
        print(
            "obsbox slo test: promtool is not on PATH; install Prometheus' promtool (Debian: apt install prometheus)",
            file=sys.stderr,
        )
        return 2
    found = _log_rules(args)
    slos = load(args.spec, found)
    document = rules(slos, found) if args.rules is None else load_yaml(args.rules).data
    if not isinstance(document, dict):
        raise ConfigError("not a Prometheus rules file (a mapping with groups)", source=str(args.rules))
    if args.out is not None:
        return testgen.report(testgen.run(slos, document, args.out, promtool))
    with tempfile.TemporaryDirectory(prefix="obsbox-slo-test-") as directory:
        return testgen.report(testgen.run(slos, document, Path(directory), promtool))


def _openslo_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``import-openslo`` and ``export-openslo``: the spec to and from OpenSLO v1 (obsbox.slo.openslo)."""
    imp = commands.add_parser(
        "import-openslo",
        help="write an SLO spec from OpenSLO v1 documents",
        description="Read OpenSLO v1 documents (SLO, SLI, DataSource, AlertPolicy, AlertCondition; in one file or "
        "many) and write the obsbox SLO spec they make. What obsbox cannot build is refused in one line.",
    )
    imp.add_argument("files", type=Path, nargs="+", metavar="OPENSLO_YAML")
    imp.add_argument("--out", type=Path, metavar="SLO_YAML", help="where to write (default: standard output)")
    imp.set_defaults(func=_import_openslo)
    exp = commands.add_parser(
        "export-openslo",
        help="write an SLO spec as OpenSLO v1 documents",
        description="Write the SLOs of a spec as OpenSLO v1 documents; what OpenSLO has no field for is kept "
        "in obsbox.dev/ annotations, so that import-openslo reads them back unchanged.",
    )
    exp.add_argument("spec", type=Path, nargs="?", default=DEFAULT_SPEC, metavar="SLO_YAML")
    exp.add_argument("--out", type=Path, metavar="OPENSLO_YAML", help="where to write (default: standard output)")
    exp.set_defaults(func=_export_openslo)


def _import_openslo(args: argparse.Namespace) -> int:
    imported = openslo.load(args.files)
    for note in imported.notes:
        print(f"note: {note}", file=sys.stderr)
    return emit(args.out, openslo.spec_text(imported, args.files))


def _export_openslo(args: argparse.Namespace) -> int:
    return emit(args.out, openslo.dumps(openslo.export(load(args.spec))))
