"""``obsbox dashboards build|import``: write the dashboards' JSON, or push them into a Grafana."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

EPILOG = textwrap.dedent("""\
    examples:
      obsbox dashboards build --out dashboards/               # write the JSON files there
      obsbox dashboards build                                 # in a source checkout: into compose/grafana/dashboards
      obsbox dashboards build --out build/dashboards --check  # exit 1 if that folder is out of date
      GRAFANA_TOKEN=glsa_... obsbox dashboards import --grafana-url http://localhost:3000 --folder obsbox
      obsbox dashboards import --grafana-url https://grafana.example.com \\
          --datasource prometheus=P1809F7CD0C75ACF3 --datasource loki=P8E80F9AEF21F6940

    Credentials come from the environment: GRAFANA_TOKEN (a service-account token), or GRAFANA_USER
    and GRAFANA_PASSWORD.
    """)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboards",
        help="build the Grafana dashboards (grafanalib) or import them into a Grafana",
        description="The dashboards are Python (dashboards/*.dashboard.py, grafanalib). Build writes their JSON; "
        "import sends them to a Grafana through its HTTP API.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = p.add_subparsers(dest="dashboards_command", metavar="SUBCOMMAND", required=True)

    build = commands.add_parser("build", help="write one JSON file per dashboard")
    build.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where to write; required outside a source checkout (there: compose/grafana/dashboards)",
    )
    build.add_argument("--check", action="store_true", help="write nothing; exit 1 if DIR is not up to date")
    _slo_option(build)
    build.set_defaults(func=_build)

    imp = commands.add_parser("import", help="create or overwrite the dashboards in a Grafana")
    imp.add_argument("--grafana-url", required=True, metavar="URL", help="Grafana's root URL, e.g. http://host:3000")
    imp.add_argument("--folder", metavar="NAME", help="the folder to import into (created if missing)")
    imp.add_argument(
        "--datasource",
        action="append",
        default=[],
        metavar="KIND=UID",
        help="use the target Grafana's datasource UID for prometheus, loki or tempo (repeatable)",
    )
    imp.add_argument("--from", dest="source", type=Path, metavar="DIR", help="import built JSON from DIR instead")
    _slo_option(imp)
    imp.set_defaults(func=_import)


def _slo_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--slo",
        type=Path,
        metavar="SLO_YAML",
        help="the SLO spec (default: the shipped example, a copy of compose/slo.yaml)",
    )


def _built(args: argparse.Namespace):
    from obsbox.dashboards import build, slos  # noqa: PLC0415

    with slos.using(args.slo):
        return build.build_all()


def _build(args: argparse.Namespace) -> int:
    from obsbox.dashboards import build  # noqa: PLC0415
    from obsbox.dashboards.panels import DashboardError  # noqa: PLC0415

    out = args.out
    if out is None:
        if not build.in_checkout():
            print(
                "obsbox dashboards build: pass --out DIR (only in a source checkout does it default to "
                "compose/grafana/dashboards, where compose provisions the dashboards from)",
                file=sys.stderr,
            )
            return 2
        out = build.CHECKOUT_OUT
        print(f"obsbox dashboards build: no --out: into this checkout's {out}", file=sys.stderr)
    try:
        built = _built(args)
    except DashboardError as exc:
        print(f"obsbox dashboards build: {exc}", file=sys.stderr)
        return 2
    if args.check:
        stale = build.differences(built, out)
        for line in stale:
            print(f"out of date: {line}", file=sys.stderr)
        if stale:
            print(f"run `obsbox dashboards build --out {out}` and commit the result", file=sys.stderr)
        return 1 if stale else 0
    written, removed = build.write(built, out)
    for path in written:
        print(f"wrote {path}")
    for path in removed:
        print(f"removed {path} (no definition builds it any more)")
    return 0


def _import(args: argparse.Namespace) -> int:
    from obsbox.dashboards import importer  # noqa: PLC0415
    from obsbox.dashboards.panels import DashboardError  # noqa: PLC0415

    try:
        mapping = importer.parse_datasource_mappings(args.datasource)
        grafana = importer.Grafana(args.grafana_url, importer.Credentials.from_env())
        if args.source:
            files = sorted(args.source.glob("*.json"))
            if not files:
                raise importer.GrafanaError(f"--from {args.source}: no *.json dashboards there")
            models = [json.loads(path.read_text(encoding="utf-8")) for path in files]
        else:
            models = [item.model for item in _built(args)]
        answers = importer.import_dashboards(grafana, models, args.folder, mapping)
    except (importer.GrafanaError, DashboardError) as exc:
        print(f"obsbox dashboards import: {exc}", file=sys.stderr)
        return 1
    for model, answer in zip(models, answers, strict=True):
        url = answer.get("url", "")
        print(
            f"{answer.get('status', 'success')}: {model['title']} (version {answer.get('version')}) {grafana.url}{url}"
        )
    return 0
