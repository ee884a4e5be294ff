"""``obsbox report``: a static HTML report (PNG charts) of P95 against the SLO, the stage breakdown, the
inference server's breakdown and burn rates."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from datetime import datetime
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="a static HTML report of the core panels for a time range (needs the `report` extra)",
        description="Query Prometheus with the dashboards' own queries and write one HTML file with PNG charts: "
        "reply-latency P95 against the SLO threshold, the stage breakdown, the inference server's own breakdown "
        "(TTFT, queue, prefill, decode from the obsbox:llm_* rules), and every SLO's burn rates. "
        "For people without Grafana, and for load-test runs in CI.",
    )
    p.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus's URL, e.g. http://localhost:9090")
    p.add_argument("--out", required=True, type=Path, metavar="FILE", help="the HTML file to write")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--last", metavar="DURATION", help="the range ending now, e.g. 15m, 1h, 2d (default: 1h)")
    when.add_argument("--start", metavar="TIME", help="range start: RFC 3339 (2024-05-01T10:00:00Z) or Unix seconds")
    p.add_argument("--end", metavar="TIME", help="range end, with --start (default: now)")
    p.add_argument("--scenario", metavar="LABEL", help="a label for the run, shown in the title (e.g. untuned)")
    p.add_argument(
        "--slo",
        type=Path,
        metavar="SLO_YAML",
        help="the SLO spec (default: the shipped example, a copy of compose/slo.yaml)",
    )
    p.add_argument("--service", default=".+", metavar="REGEX", help="services (Prometheus job) to include")
    p.add_argument("--route", default=".*", metavar="REGEX", help="routes to include")
    p.add_argument("--model", default=".*", metavar="REGEX", help="models to include")
    p.add_argument(
        "--source",
        default="vllm",
        metavar="REGEX",
        help="LLM sources (obsbox llm rules) for the inference server breakdown (default: vllm, the demo's backend)",
    )
    p.add_argument(
        "--rate-interval",
        default="1m",
        metavar="DURATION",
        help="shortest rate() window (default 1m; Grafana's $__rate_interval is at least four scrape intervals)",
    )
    p.set_defaults(func=_report)


def parse_time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is neither RFC 3339 (2024-05-01T10:00:00Z) nor Unix seconds") from None


def time_range(args: argparse.Namespace, now: float) -> tuple[float, float]:
    from obsbox.durations import parse_duration as seconds  # noqa: PLC0415

    if args.start is None and args.end is not None:
        raise ValueError("--end needs --start")
    if args.start is not None:
        start = parse_time(args.start)
        end = parse_time(args.end) if args.end else now
    else:
        end, start = now, now - seconds(args.last or "1h")
    if end <= start:
        raise ValueError("the range is empty: the end must come after the start")
    return start, end


def _report(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("matplotlib") is None:
        print(
            "obsbox report: matplotlib is not installed; install the extra: pip install 'obsbox[report]'",
            file=sys.stderr,
        )
        return 2
    from obsbox.dashboards import report, slos  # noqa: PLC0415
    from obsbox.dashboards.panels import DashboardError  # noqa: PLC0415
    from obsbox.dashboards.promapi import PrometheusError  # noqa: PLC0415
    from obsbox.durations import parse_duration as seconds  # noqa: PLC0415

    try:
        start, end = time_range(args, time.time())
        rate_interval = seconds(args.rate_interval)
        with slos.using(args.slo):
            spec = slos.load()
            latency = slos.reply_latency_slo(spec)
        threshold = latency.sli.threshold
        if threshold is None:  # the spec's validation requires one; say so rather than fail later
            raise ValueError(f"the latency SLO {latency.name!r} has no threshold")
        result = report.build_report(
            args.prometheus,
            start,
            end,
            slos=spec,
            reply_threshold=threshold,
            scenario=args.scenario,
            rate_interval=rate_interval,
            selection={"service": args.service, "route": args.route, "model": args.model, "source": args.source},
        )
    except (ValueError, DashboardError, PrometheusError) as exc:
        print(f"obsbox report: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report.render_html(result), encoding="utf-8")
    for chart in result.charts:
        if not chart.has_data:
            print(f"obsbox report: no data for {chart.title!r} in this range", file=sys.stderr)
    print(f"wrote {args.out}")
    return 0
