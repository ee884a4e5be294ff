"""``obsbox demo``: the demo LLM gateway with its load generator (or alone, with ``--no-load``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from obsbox import conventions
from obsbox.exporters.demo.load_cli import add_load_options

EPILOG = """\
scenarios:
  untuned   the slow gateway: no connection reuse, cold cache, full AST metadata in the context
  tuned     pooled connections, cache warmed with frequent prompt prefixes, batched JWT
            verification, context trimmed of sourceMap/comments

examples:
  obsbox demo --scenario untuned --sessions 50 --duration 60 --log-dir logs
  obsbox demo --scenario tuned --sessions 50 --think-time 0,0.1 --duration 30   # capacity
  obsbox demo --no-load --host 0.0.0.0 --log-dir /var/log/gateway              # compose

OTLP export follows the OTEL_* variables and is off for a signal with no endpoint configured.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the demo LLM gateway (instrumented) with simulated load",
        description="A simulated Copilot-style LLM gateway, instrumented with obsbox.exporters, serving "
        "POST /v1/chat/completions and /metrics, writing legacy JSON logs, driven by the load generator.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scenario", choices=["untuned", "tuned"], default="untuned", help="default: untuned")
    add_load_options(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=conventions.PORTS["gateway"], help="gateway and /metrics port (0: any free)"
    )
    p.add_argument(
        "--backend-metrics-port",
        type=int,
        default=conventions.PORTS["demo_backend_metrics"],
        metavar="PORT",
        help="the simulated inference backend's /metrics, under vLLM's names, on --host (default %(default)s; "
        "0: any free port; -1: not served)",
    )
    p.add_argument("--log-dir", type=Path, help="append the legacy JSON log to DIR/gateway.json")
    p.add_argument("--no-load", action="store_true", help="the gateway only, no load generator")
    p.add_argument("--seed", type=int, default=7, help="seed of the gateway's latency model (default 7)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415

    from obsbox.exporters.demo.runner import DemoOptions, run_demo  # noqa: PLC0415
    from obsbox.exporters.demo.server import ServerStartError  # noqa: PLC0415

    options = DemoOptions(
        scenario=args.scenario,
        host=args.host,
        port=args.port,
        backend_metrics_port=None if args.backend_metrics_port < 0 else args.backend_metrics_port,
        log_dir=args.log_dir,
        load=not args.no_load,
        sessions=args.sessions,
        duration=args.duration,
        worker_pool=args.worker_pool,
        think_time=args.think_time,
        seed=args.seed,
        load_seed=args.load_seed,
    )
    try:
        return asyncio.run(run_demo(options))
    except ServerStartError as exc:
        print(f"obsbox demo: {exc}")
        return 2
