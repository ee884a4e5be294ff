"""NVML GPU exporter: real GPU memory utilization as ``gateway_gpu_memory_utilization_ratio{gpu}``.

A metrics plugin (entry-point group ``obsbox.gateway_metrics``). It needs the optional extra
``gpu`` (nvidia-ml-py) and an NVIDIA driver; ``probe()`` says whether both are there and, if not,
why, and ``instrument()`` loads the collector only when they are. Readings are taken at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from obsbox import conventions
from obsbox.exporters.instrumentation.metric_plugins import PluginStatus

HELP = "GPU memory in use, as a ratio of the total (NVML)."


def _nvml() -> Any:
    import pynvml  # noqa: PLC0415  (optional extra)

    return pynvml


class NvmlCollector(Collector):
    """One gauge sample per GPU that NVML sees, labelled by its index."""

    name: ClassVar[str] = "nvml"
    provides: ClassVar[tuple[str, ...]] = (conventions.GPU_MEMORY_UTILIZATION,)

    @classmethod
    def probe(cls) -> PluginStatus:
        try:
            nvml = _nvml()
        except ImportError:
            return PluginStatus(False, "nvidia-ml-py is not installed (pip install 'obsbox[gpu]')")
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            return PluginStatus(False, f"NVML did not start ({exc}): no NVIDIA driver or GPU on this machine")
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            nvml.nvmlShutdown()
            return PluginStatus(False, "NVML started but found no GPU")
        return PluginStatus(True, f"{count} GPU(s) found by NVML")

    def __init__(self) -> None:
        self.nvml = _nvml()

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(conventions.GPU_MEMORY_UTILIZATION, HELP, labels=["gpu"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(conventions.GPU_MEMORY_UTILIZATION, HELP, labels=["gpu"])
        for index in range(self.nvml.nvmlDeviceGetCount()):
            memory = self.nvml.nvmlDeviceGetMemoryInfo(self.nvml.nvmlDeviceGetHandleByIndex(index))
            family.add_metric([str(index)], memory.used / memory.total if memory.total else 0.0)
        yield family
