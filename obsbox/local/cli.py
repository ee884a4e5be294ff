"""``obsbox up``: the local mode of ``scripts/up`` (no Docker engine): the whole pipeline as local
processes, with a live summary in the terminal."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from obsbox.local.stack import LocalStack


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="run the stack locally, without Docker (demo gateway, load, bridge, Prometheus)",
        description="The stack in a box as local processes: the demo gateway with its load, the bridge tailing "
        "its legacy logs (enriched lines and spans written to files), a local OTLP receiver, and a local "
        "Prometheus with the generated SLO rules when the prometheus binary is installed. A live summary shows "
        "P95 reply latency, the stage breakdown and SLO burn. scripts/up runs this when no Docker engine answers.",
    )
    p.add_argument("--scenario", choices=["untuned", "tuned"], default="untuned")
    p.add_argument("--sessions", type=int, default=50, help="concurrent simulated users (default 50)")
    p.add_argument("--duration", type=float, help="seconds to run (default: until Ctrl-C)")
    p.add_argument("--workdir", type=Path, default=Path("out/local"), help="where every output goes (out/local)")
    p.add_argument("--slo", type=Path, help="the SLO spec for the Prometheus rules (default: the shipped example spec)")
    p.add_argument("--no-prometheus", action="store_true", help="do not start a local Prometheus")
    p.add_argument("--refresh", type=float, default=2.0, help="seconds between summary updates")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from obsbox.durations import parse_duration  # noqa: PLC0415 - keeps `obsbox --help` fast
    from obsbox.local.live import Live, render  # noqa: PLC0415
    from obsbox.local.stack import LocalConfig, LocalStack  # noqa: PLC0415

    config = LocalConfig(args.workdir, args.scenario, args.sessions, args.slo, not args.no_prometheus)
    stack = LocalStack(config)
    # SIGTERM (`timeout`, `kill -- -PGID`, a service manager) stops the way Ctrl-C does
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    tty = sys.stdout.isatty()
    try:
        stack.start()
        print("obsbox local mode: " + ", ".join(f"{k} {v}" for k, v in stack.urls().items()), flush=True)
        if not stack.prometheus_url and not args.no_prometheus:
            print("(no prometheus binary: install Debian's prometheus package for SLO rules and alerts)", flush=True)
        steps = next_steps(stack)
        print("\n".join(["", *steps, ""]), flush=True)
        live = Live(
            stack.urls()["gateway metrics"], stack.prometheus_url, parse_duration(config.scrape_interval), stack.periods
        )
        started = time.monotonic()
        next_print = 0.0
        while args.duration is None or time.monotonic() - started < args.duration:
            time.sleep(args.refresh)
            if (failure := stack.failed()) is not None:
                print(f"\n{failure}", file=sys.stderr)
                return 1
            now = time.monotonic()
            summary = live.summary(now)
            if summary is None or (not tty and now < next_print):
                continue
            text = render(summary, now - started, steps if tty else None)
            print(("\033[H\033[2J" + text) if tty else text + "\n", flush=True)
            next_print = now + 10
    except KeyboardInterrupt:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the children's shutdown short
            signal.signal(sig, signal.SIG_IGN)
        stack.stop()
    print("\n".join(["", "stopped", *next_steps(stack, running=False)]), flush=True)
    return 0


def next_steps(stack: LocalStack, running: bool = True) -> list[str]:
    """What to do next, as commands to paste: the bridge on your own logs, the report, the outputs."""
    obsbox = obsbox_executable()
    work = stack.workdir
    lines = [
        f"  next steps (from {Path.cwd()}, where the paths below start)",
        f"    the bridge on your own logs:  {obsbox} bridge '/path/to/your/logs/*.json' "
        f"--to file:{work / 'yours.jsonl'}",
    ]
    if stack.prometheus_url:
        report = f"{obsbox} report --prometheus {stack.prometheus_url} --last 15m --out {work / 'report.html'}"
        lines.append(f"    a report of this run:         {report}" + ("" if running else "  (while `obsbox up` runs)"))
    lines.append(f"    outputs:                      {work}/: enriched.jsonl, spans.jsonl, logs/, prometheus/, *.log")
    return lines


def obsbox_executable() -> str:
    """How to run this obsbox from a shell: its own script (``.venv/bin/obsbox``) when it has one."""
    script = Path(sys.executable).with_name("obsbox")
    if not script.is_file():
        return shlex.join([sys.executable, "-m", "obsbox"])
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)
