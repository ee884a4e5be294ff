"""``obsbox load``: the load generator alone, against any gateway (compose's load service)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from obsbox.config import ConfigError


def think_time(text: str) -> tuple[float, float]:
    """``MIN,MAX`` seconds (or one number for a fixed think time)."""
    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"think time {text!r}: expected MIN,MAX in seconds, e.g. 1,3") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or not 0 <= parts[0] <= parts[1]:
        raise argparse.ArgumentTypeError(f"think time {text!r}: expected MIN,MAX with 0 <= MIN <= MAX")
    return parts[0], parts[1]


def add_load_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``obsbox load`` and ``obsbox demo``."""
    p.add_argument("--sessions", type=int, default=50, help="concurrent simulated users (default 50)")
    p.add_argument("--duration", type=float, help="seconds to run (default: until Ctrl-C)")
    p.add_argument("--worker-pool", default="default", help="sent as X-Worker-Pool (default: default)")
    p.add_argument(
        "--think-time",
        type=think_time,
        default=(1.0, 3.0),
        metavar="MIN,MAX",
        help="seconds a user thinks between requests, uniform (default 1,3)",
    )
    p.add_argument("--load-seed", type=int, default=11, help="seed of the simulated users (default 11)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "load",
        help="drive a gateway with simulated chat sessions, print latency percentiles",
        description="Simulated developers ask, read the streamed reply, follow up with context and think. "
        "Prints P50/P95/P99 of the reply latency (time to first byte) and the throughput at the end.",
    )
    p.add_argument("--target", required=True, help="the gateway, e.g. http://127.0.0.1:8000")
    add_load_options(p)
    p.add_argument("--summary-json", type=Path, metavar="FILE", help="also write the summary as JSON to FILE")
    p.add_argument("--quiet", action="store_true", help="print nothing (with --summary-json)")
    p.set_defaults(func=run)


def load_config(args: argparse.Namespace, target: str):
    from obsbox.exporters.demo.load import LoadConfig  # noqa: PLC0415

    try:
        return LoadConfig(
            target=target,
            sessions=args.sessions,
            duration=args.duration,
            worker_pool=args.worker_pool,
            think_time=args.think_time,
            seed=args.load_seed,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415

    from obsbox.exporters.demo.load import LoadGenerator  # noqa: PLC0415
    from obsbox.exporters.demo.signals import stop_on_signals  # noqa: PLC0415

    generator = LoadGenerator(load_config(args, args.target))

    async def main():
        with stop_on_signals(generator.stop):
            return await generator.run()

    summary = asyncio.run(main())
    if args.summary_json:
        args.summary_json.write_text(json.dumps({**asdict(summary), "throughput": summary.throughput}))
    if not args.quiet:
        print(
            f"load against {args.target}: {args.sessions} sessions, think time {args.think_time[0]:g}-"
            f"{args.think_time[1]:g} s, worker pool {args.worker_pool}"
        )
        for line in summary.lines():
            print(line)
    if not any(status.startswith("2") for status in summary.statuses):
        print(f"obsbox load: no successful request to {args.target}", file=sys.stderr)
        return 1
    return 0
