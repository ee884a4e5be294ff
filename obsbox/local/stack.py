"""The stack in a box without Docker: the demo gateway and its load, the bridge, a local OTLP
receiver and, when the binary is installed, a local Prometheus with the generated SLO rules and the
LLM recording rules (the demo's simulated inference backend speaks vLLM's names).

Everything runs as local processes on loopback, with its output in one folder:

    logs/gateway.json       the gateway's legacy JSON log (what the bridge tails)
    enriched.jsonl          the same lines with trace_id and span_id (the bridge's file sink)
    spans.jsonl             spans: the gateway's own (OTel SDK) and those derived from its logs
    prometheus/             rules, config and data of the local Prometheus
    *.log                   each process's output
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from obsbox import conventions, llm, slo
from obsbox.child import obsbox_command
from obsbox.durations import parse_duration
from obsbox.local.receiver import Receiver


def free_port(preferred: int = 0) -> int:
    """``preferred`` when it is free on 127.0.0.1, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise OSError("no free port on 127.0.0.1")


@dataclass
class LocalConfig:
    workdir: Path
    scenario: str = "untuned"
    sessions: int = 50
    slo_spec: Path | None = None
    prometheus: bool = True
    scrape_interval: str = "5s"


@dataclass
class LocalStack:
    config: LocalConfig
    ports: dict[str, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    receiver: Receiver | None = None
    prometheus_url: str | None = None
    periods: dict[str, float] = field(default_factory=dict)  # SLO name → its period in seconds

    @property
    def workdir(self) -> Path:
        return self.config.workdir

    def start(self) -> None:
        # the owner's only: what is inside (logs, enriched lines, spans) may carry what the gateway logged
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.workdir / "logs").mkdir(exist_ok=True)
        names = ("gateway", "demo_backend_metrics", "bridge_metrics", "otlp_http")
        self.ports = {name: free_port(conventions.PORTS[name]) for name in names}
        receiver = self.receiver = Receiver(port=self.ports["otlp_http"], keep=False, out_dir=self.workdir).start()
        otlp = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.url}/v1/traces", "OTEL_SERVICE_NAME": "gateway"}
        self._spawn(
            "gateway",
            [
                "demo",
                "--scenario",
                self.config.scenario,
                "--sessions",
                str(self.config.sessions),
                "--port",
                str(self.ports["gateway"]),
                "--backend-metrics-port",
                str(self.ports["demo_backend_metrics"]),
                "--log-dir",
                str(self.workdir / "logs"),
            ],
            otlp,
        )
        bridge_config = self.workdir / "bridge.yaml"
        bridge_config.write_text(yaml.safe_dump(self._bridge_pipeline(receiver.url), sort_keys=False))
        self._spawn(
            "bridge", ["bridge", "--config", str(bridge_config), "--metrics-port", str(self.ports["bridge_metrics"])]
        )
        if self.config.prometheus and (binary := shutil.which("prometheus")):
            self._start_prometheus(binary)

    def _bridge_pipeline(self, otlp_url: str) -> dict:
        """The bridge's config: tail the gateway's log, write it enriched, send its spans to ``otlp_url``."""
        processors = ["parse", "trace", "redact", "log_metrics"]
        return {
            "sources": {"tail": {"include": [str(self.workdir / "logs" / "*.json")]}},
            "processors": {name: {} for name in processors},
            "sinks": {
                "file": {"path": str(self.workdir / "enriched.jsonl")},
                "spans": {"endpoint": otlp_url, "service_name": "gateway-from-logs"},
            },
            "pipelines": {"logs": {"sources": ["tail"], "processors": processors, "sinks": ["file", "spans"]}},
            "settings": {"state_dir": str(self.workdir / "state"), "progress": False, "poll_interval": "100ms"},
        }

    def _start_prometheus(self, binary: str) -> None:
        folder = self.workdir / "prometheus"
        folder.mkdir(exist_ok=True)
        spec = self.config.slo_spec or slo.DEFAULT_SPEC
        rules = folder / "slo.rules.yml"
        slos = slo.load(spec)
        slo.write(rules, slo.render(slo.rules(slos), source=spec.name))
        self.periods = {s.name: parse_duration(s.nominal_window) for s in slos}
        llm_rules = folder / "llm.rules.yml"
        slo.write(llm_rules, llm.generate(llm.DEFAULT_SOURCES))
        interval = self.config.scrape_interval
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            # Prometheus reads a relative rule_files path from the config file's folder, where the rules are
            "rule_files": [rules.name, llm_rules.name],
            "scrape_configs": [
                {"job_name": "gateway", "static_configs": [{"targets": [f"127.0.0.1:{self.ports['gateway']}"]}]},
                {
                    "job_name": "vllm",  # the demo's simulated inference backend
                    "static_configs": [{"targets": [f"127.0.0.1:{self.ports['demo_backend_metrics']}"]}],
                },
                {
                    "job_name": "obsbox-bridge",
                    "static_configs": [{"targets": [f"127.0.0.1:{self.ports['bridge_metrics']}"]}],
                },
            ],
        }
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.ports["prometheus"] = free_port(conventions.PORTS["prometheus"])
        argv = [
            binary,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.ports['prometheus']}",
            "--enable-feature=exemplar-storage",
        ]
        with open(self.workdir / "prometheus.log", "ab") as out:
            self.procs["prometheus"] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.prometheus_url = f"http://127.0.0.1:{self.ports['prometheus']}"

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        with open(self.workdir / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen(
                obsbox_command(*args),
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )

    def failed(self) -> str | None:
        """The name of a process that died, with the end of its output."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                log = (self.workdir / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
                return f"{name} exited with {proc.returncode}:\n" + "\n".join(log)
        return None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            _reap(proc, deadline)
        if self.receiver is not None:
            self.receiver.stop()

    def urls(self) -> dict[str, str]:
        """Where each part listens; only once ``start()`` has run."""
        if self.receiver is None:
            raise RuntimeError("LocalStack.urls: the stack is not started (call start() first)")
        urls = {
            "gateway": f"http://127.0.0.1:{self.ports['gateway']}/v1/chat/completions",
            "gateway metrics": f"http://127.0.0.1:{self.ports['gateway']}/metrics",
            "backend metrics (vLLM's names)": f"http://127.0.0.1:{self.ports['demo_backend_metrics']}/metrics",
            "bridge metrics": f"http://127.0.0.1:{self.ports['bridge_metrics']}/metrics",
            "OTLP receiver": f"{self.receiver.url}/v1/traces",
        }
        if self.prometheus_url:
            urls["Prometheus"] = self.prometheus_url
        return urls


def _reap(proc: subprocess.Popen, deadline: float) -> None:
    """Wait for a process asked to stop; kill it if it is still there at ``deadline``."""
    try:
        proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
