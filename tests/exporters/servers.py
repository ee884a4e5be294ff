"""Real servers for the exporter tests, all on 127.0.0.1 and ports chosen by the OS: uvicorn and
wsgiref serving an app, an OTLP/HTTP receiver that decodes with opentelemetry-proto, a Loki push
receiver, and Prometheus itself."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import uvicorn

from obsbox.exporters import OtelConfig
from obsbox.local import receiver
from tests.waiting import free_port, wait_until

__all__ = ["Prometheus", "Receiver", "free_port", "no_otlp", "serve_asgi", "serve_wsgi", "wait_until"]


def no_otlp(**kwargs: Any) -> OtelConfig:
    """The SDK with no exporter of its own (tests add span processors)."""
    return OtelConfig(traces_exporter="none", metrics_exporter="none", logs_exporter="none", **kwargs)


@contextlib.contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """uvicorn in a thread; yields the base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 10, "uvicorn to start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


class _QuietWsgi(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_wsgi(app: Any) -> Iterator[str]:
    """wsgiref in a thread; yields the base URL."""
    server = make_server("127.0.0.1", 0, app, handler_class=_QuietWsgi)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class Receiver:
    """The package's test receiver (it decodes OTLP with opentelemetry-proto and validates Loki's push
    schema), with the accessors these tests read."""

    def __init__(self) -> None:
        self.inner = receiver.Receiver().start()
        self.url = self.inner.url

    def spans(self) -> list[Any]:
        """Every span received on /v1/traces, with its resource attributes."""
        with self.inner.lock:
            return list(self.inner.spans)

    def loki_values(self) -> list[tuple[dict[str, str], list[Any]]]:
        """(stream labels, value as pushed) for every Loki entry."""
        with self.inner.lock:
            return [(entry.labels, entry.value) for entry in self.inner.loki]

    def close(self) -> None:
        self.inner.stop()


def attributes(span: Any) -> dict[str, Any]:
    """An OTLP span's attributes as plain Python values."""
    out = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out


def promtool_check_metrics(exposition: bytes) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not installed: apt-get install prometheus (Debian's package ships it)")
    return subprocess.run([binary, "check", "metrics"], input=exposition, check=False, capture_output=True, timeout=30)


class Prometheus:
    """A real Prometheus scraping ``targets`` every ``interval``, with exemplar storage on."""

    def __init__(self, tmp: Path, targets: list[str], interval: str = "1s") -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is missing: apt-get install prometheus (Debian's package)")
        config = tmp / "prometheus.yml"
        scrape = {"job_name": "gateway", "scrape_interval": interval, "static_configs": [{"targets": targets}]}
        config.write_text(json.dumps({"global": {"scrape_interval": interval}, "scrape_configs": [scrape]}))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (tmp / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--enable-feature=exemplar-storage",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, 30, "Prometheus to be ready", interval=0.2)

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"Prometheus exited with {self.process.returncode}; see {self.log.name}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: Any) -> Any:
        """GET an HTTP API path with query ``params``; the ``data`` of a successful answer."""
        with urllib.request.urlopen(f"{self.url}{path}?{urllib.parse.urlencode(params)}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.log.close()
