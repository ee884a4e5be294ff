"""Spans instrument() could not deliver are counted: a real burst through the middleware into a small
queue, the real SDK and exporters, and a receiver that decodes what arrived with opentelemetry-proto."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from obsbox.exporters import OtelConfig, instrument
from tests.exporters.servers import Receiver, free_port

DROPPED = "obsbox_instrumentation_spans_dropped_total"


async def answer(scope, receive, send):
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def burst(app, n: int) -> list[str]:
    """``n`` requests back to back, in-process (no server in between to slow the burst down);
    the span IDs the responses carried."""

    async def one() -> str:
        headers: dict[bytes, bytes] = {}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                headers.update(message["headers"])

        scope = {"type": "http", "method": "GET", "path": "/burst", "headers": [], "server": ("127.0.0.1", 8000)}
        await app(scope, receive, send)
        return headers[b"x-span-id"].decode()

    async def run() -> list[str]:
        return [await one() for _ in range(n)]

    return asyncio.run(run())


def dropped(registry: CollectorRegistry) -> dict[str, float]:
    reasons = ("queue_full", "export_failed", "encode_failed", "shutdown")
    return {reason: registry.get_sample_value(DROPPED, {"reason": reason}) for reason in reasons}


@pytest.fixture(scope="module")
def shared_receiver():
    r = Receiver()  # one for the module: stopping one takes 0.4 s
    yield r
    r.close()


@pytest.fixture
def receiver(shared_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{shared_receiver.url}/v1/traces")
    return shared_receiver


def exported_by(receiver: Receiver, service: str) -> list[str]:
    """The span IDs ``service`` exported (each test's app has a service name of its own)."""
    return [span.span_id.hex() for resource, span in receiver.spans() if resource["service.name"] == service]


def otel(sdk_exporter: bool) -> OtelConfig:
    return OtelConfig(metrics_exporter="none", logs_exporter="none", set_global=False, sdk_span_exporter=sdk_exporter)


@pytest.mark.parametrize("sdk_exporter", [False, True], ids=["obsbox-exporter", "sdk-exporter"])
def test_a_burst_into_a_small_queue_counts_every_span_that_was_not_exported(
    receiver, monkeypatch, caplog, sdk_exporter
):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "16")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8")
    registry = CollectorRegistry()
    service = f"burst-{sdk_exporter}"
    app = instrument(answer, service, registry=registry, otel=otel(sdk_exporter))
    sent = burst(app, 1000)
    app.instrumentation.shutdown()

    exported = set(exported_by(receiver, service))
    counts = dropped(registry)
    assert exported <= set(sent)
    assert counts["queue_full"] > 0  # 1000 spans in a few ms: the exporter cannot keep up with 16 slots
    assert counts["queue_full"] == len(sent) - len(exported)
    assert counts["export_failed"] == counts["encode_failed"] == counts["shutdown"] == 0
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("span_batcher")]
    assert lines and lines[0].startswith("Dropped 1 span(s): queue_full")  # one line, not one per span
    assert len(lines) < 5


def test_a_clean_shutdown_exports_every_queued_span(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # nothing leaves before shutdown but full batches
    registry = CollectorRegistry()
    app = instrument(answer, "clean-shutdown", registry=registry, otel=otel(False))
    sent = burst(app, 700)  # one batch of 512 on its way, 188 still queued at shutdown
    app.instrumentation.shutdown()

    assert sorted(exported_by(receiver, "clean-shutdown")) == sorted(sent)
    assert set(dropped(registry).values()) == {0}


def test_a_failed_export_and_spans_after_shutdown_are_counted(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{free_port()}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.5")  # refused, then no time left to retry
    registry = CollectorRegistry()
    app = instrument(answer, "burst", registry=registry, otel=otel(False))
    burst(app, 20)
    with caplog.at_level(logging.WARNING):
        app.instrumentation.shutdown()
        burst(app, 3)  # served, traced, but nobody exports any more

    assert dropped(registry) == {"queue_full": 0, "export_failed": 20, "encode_failed": 0, "shutdown": 3}
    assert any(r.getMessage().startswith("Dropped 20 span(s): export_failed") for r in caplog.records)
