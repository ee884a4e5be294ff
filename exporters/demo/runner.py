"""``obsbox demo``: the gateway (uvicorn, in this process) and the load generator (a child
process, so the two use both cores), stopped together after the duration or at Ctrl-C, then a
summary: the load generator's own measurements and the gateway's histogram quantiles.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from obsbox import conventions
from obsbox.child import obsbox_command
from obsbox.exporters import InstrumentConfig, OtelConfig
from obsbox.exporters.demo.gateway import GatewayConfig, build_gateway
from obsbox.exporters.demo.scenarios import scenario
from obsbox.exporters.demo.server import GatewayServer, ServerStartError, metrics_app
from obsbox.exporters.demo.signals import stop_on_signals
from obsbox.histograms import histogram_quantile, summed_buckets

DRAIN_SECONDS = 40.0  # the load generator's request timeout, plus margin


@dataclass
class DemoOptions:
    scenario: str = "untuned"
    host: str = "127.0.0.1"
    port: int = conventions.PORTS["gateway"]
    backend_metrics_port: int | None = conventions.PORTS["demo_backend_metrics"]  # None: not served
    log_dir: Path | None = None
    load: bool = True
    sessions: int = 50
    duration: float | None = None
    worker_pool: str = "default"
    think_time: tuple[float, float] = (1.0, 3.0)
    seed: int = 7
    load_seed: int = 11


def otel_from_env() -> tuple[OtelConfig, list[str]]:
    """Export a signal over OTLP only where the environment names an endpoint or an exporter, so
    a demo on a laptop without a collector does not log connection errors. Returns notes to print."""
    choices: dict[str, str | None] = {}  # per signal: "none", or None (OtelConfig's default: the environment)
    off: list[str] = []
    for signal_name in ("traces", "metrics", "logs"):
        configured = any(
            os.environ.get(var)
            for var in (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                f"OTEL_EXPORTER_OTLP_{signal_name.upper()}_ENDPOINT",
                f"OTEL_{signal_name.upper()}_EXPORTER",
            )
        )
        choices[signal_name] = None if configured else "none"
        if not configured:
            off.append(signal_name)
    notes = [f"OTLP export off for {', '.join(off)} (set OTEL_EXPORTER_OTLP_ENDPOINT to send them)"] if off else []
    otel = OtelConfig(
        traces_exporter=choices["traces"], metrics_exporter=choices["metrics"], logs_exporter=choices["logs"]
    )
    return otel, notes


def load_command(opts: DemoOptions, target: str, summary: Path) -> list[str]:
    command = obsbox_command("load", "--target", target, "--sessions", str(opts.sessions))
    command += ["--worker-pool", opts.worker_pool, "--think-time", f"{opts.think_time[0]},{opts.think_time[1]}"]
    command += ["--load-seed", str(opts.load_seed), "--summary-json", str(summary), "--quiet"]
    if opts.duration is not None:
        command += ["--duration", str(opts.duration)]
    return command


async def run_demo(opts: DemoOptions) -> int:
    chosen = scenario(opts.scenario)
    otel, notes = otel_from_env()
    app = build_gateway(
        GatewayConfig(scenario=chosen, seed=opts.seed, log_dir=opts.log_dir), InstrumentConfig(otel=otel)
    )
    server = GatewayServer(app, opts.host, opts.port)
    backend = None
    if opts.backend_metrics_port is not None:
        backend = GatewayServer(metrics_app(app.backend.registry), opts.host, opts.backend_metrics_port)
    await server.start()
    try:
        if backend is not None:
            await backend.start()
    except ServerStartError as exc:
        await server.stop()
        raise ServerStartError(
            f"the backend's metrics {exc}: pick another --backend-metrics-port (0: any free)"
        ) from None
    except BaseException:
        await server.stop()
        raise
    print(f"gateway {server.url}  ({chosen.describe()})", flush=True)
    print(f"  POST {server.url}/v1/chat/completions   metrics {server.url}/metrics (gateway_*)", flush=True)
    if backend is not None:
        print(f"  simulated inference backend: metrics {backend.url}/metrics (vLLM's vllm:* names)", flush=True)
    print(f"  legacy JSON log: {app.log.path if app.log else 'off (give --log-dir)'}", flush=True)
    for note in notes:
        print(f"  {note}", flush=True)
    code = 0
    with tempfile.TemporaryDirectory(prefix="obsbox-demo-") as tmp:
        summary_file = Path(tmp) / "load.json"
        try:
            code = await _serve(opts, server, summary_file)
        finally:
            await server.stop()
            if backend is not None:
                await backend.stop()
            app.instrumentation.shutdown()
            app.close()
        _print_summary(opts, app, summary_file)
    return code


async def _serve(opts: DemoOptions, server: GatewayServer, summary_file: Path) -> int:
    stop = asyncio.Event()
    with stop_on_signals(stop.set):
        if not opts.load:
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(stop.wait(), opts.duration)
            return 0
        target = f"http://127.0.0.1:{server.port}" if opts.host in ("0.0.0.0", "::", "") else server.url
        print(
            f"load: {opts.sessions} sessions, think time {opts.think_time[0]:g}-{opts.think_time[1]:g} s, "
            f"{f'{opts.duration:g} s' if opts.duration else 'until Ctrl-C'}",
            flush=True,
        )
        child = await asyncio.create_subprocess_exec(*load_command(opts, target, summary_file))
        stopped = asyncio.ensure_future(stop.wait())
        exited = asyncio.ensure_future(child.wait())
        await asyncio.wait([stopped, exited], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if child.returncode is None:
            child.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(exited, DRAIN_SECONDS)
            except (asyncio.TimeoutError, TimeoutError):
                child.kill()
                await exited
        if child.returncode not in (0, -signal.SIGINT):
            print(f"obsbox demo: the load generator exited with {child.returncode}", file=sys.stderr)
            return 1
        return 0


def _print_summary(opts: DemoOptions, app: object, summary_file: Path) -> None:
    print(f"\nsummary ({opts.scenario})")
    if summary_file.exists():
        data = json.loads(summary_file.read_text())
        print(
            f"  load generator: {data['requests']} requests in {data['seconds']:.1f} s = "
            f"{data['throughput']:.1f} req/s, {data['errors']} errors {data['statuses']}"
        )
        print(
            f"  reply latency (client, time to first byte): P50 {data['reply_p50'] * 1000:.0f} ms  "
            f"P95 {data['reply_p95'] * 1000:.0f} ms  P99 {data['reply_p99'] * 1000:.0f} ms  "
            f"({data['slower_than_300ms']:.0%} slower than 300 ms)"
        )
    buckets = summed_buckets(app.instrumentation.registry, conventions.REPLY_LATENCY)  # type: ignore[attr-defined]
    if buckets and buckets[-1][1]:
        p50, p95, p99 = (histogram_quantile(q, buckets) for q in (0.5, 0.95, 0.99))
        print(
            f"  {conventions.REPLY_LATENCY} (gateway histogram, {buckets[-1][1]:.0f} replies): "
            f"P50 {p50 * 1000:.0f} ms  P95 {p95 * 1000:.0f} ms  P99 {p99 * 1000:.0f} ms"
        )
    else:
        print("  the gateway served no chat completion")
