"""The NVML GPU exporter: loaded where a GPU is, and otherwise reported unavailable with the reason."""

from __future__ import annotations

import importlib.util

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from obsbox import conventions
from obsbox.exporters import NvmlCollector, instrument
from obsbox.exporters.instrumentation import metric_plugins
from tests.exporters.servers import no_otlp, promtool_check_metrics


async def _app(scope, receive, send):
    pass


def test_nvml_plugin_is_registered_and_probed():
    loaded = metric_plugins.load(["nvml"])
    status = loaded.statuses["nvml"]
    print(f"NVML plugin: available={status.available}: {status.reason}")
    if importlib.util.find_spec("pynvml") is None:
        assert not status.available
        assert "nvidia-ml-py is not installed" in status.reason
    registry = CollectorRegistry()
    app = instrument(_app, "gpu-test", registry=registry, metric_plugins=["nvml"], otel=no_otlp())
    app.instrumentation.shutdown()
    exposition = generate_latest(registry)
    if status.available:  # a machine with a GPU: real readings, in range, and a valid exposition
        samples = [registry.get_sample_value(conventions.GPU_MEMORY_UTILIZATION, {"gpu": str(i)}) for i in range(8)]
        readings = [s for s in samples if s is not None]
        assert readings and all(0.0 <= r <= 1.0 for r in readings)
        assert app.instrumentation.metrics.gpu_memory is None  # the real gauge owns the name
    else:  # no GPU here: the collector is not loaded, and the app-reported gauge keeps the name
        assert loaded.collectors == []
        assert "NVML did not start" in status.reason or "not installed" in status.reason or "no GPU" in status.reason
        assert app.instrumentation.metrics.gpu_memory is not None
    result = promtool_check_metrics(exposition)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_an_unknown_plugin_is_an_error_naming_the_installed_ones():
    with pytest.raises(ValueError, match=r"unknown metrics plugin\(s\) \['dcgm'\]; installed: \['nvml'\]"):
        metric_plugins.load(["dcgm"])


def test_probe_says_why_without_a_gpu():
    status = NvmlCollector.probe()
    print(f"NVML probe: {status}")
    assert status.reason
    if not status.available:
        assert any(word in status.reason for word in ("not installed", "NVML did not start", "no GPU"))
