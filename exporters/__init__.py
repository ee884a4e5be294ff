"""obsbox.exporters: instrumentation for Python gateways, and the log bridge (``.bridge``).

``instrument(app)`` wraps an ASGI or WSGI app; ``stage()`` and the ``record_*`` functions let the
app report what only it knows; ``JsonFormatter`` and ``LokiTraceHandler`` put trace IDs in logs.
Names are imported on first use, so ``import obsbox.exporters.bridge`` does not pay for the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from obsbox.exporters.lazy import lazy_exports

_EXPORTS = {
    "instrument": "instrumentation",
    "InstrumentConfig": "instrumentation",
    "Instrumentation": "instrumentation",
    "OtelConfig": "otel_setup",
    "stage": "stages",
    "record_stage": "stages",
    "current_request": "request",
    "set_model": "request",
    "set_route": "request",
    "record_cache": "request",
    "record_prefill": "request",
    "record_decode": "request",
    "record_decode_warmup": "request",
    "record_embedding_stall": "request",
    "set_gpu_memory_utilization": "request",
    "GatewayMetrics": "gateway_metrics",
    "JsonFormatter": "jsonlog",
    "TraceContextFilter": "jsonlog",
    "LokiTraceHandler": "loki_handler",
    "NvmlCollector": "gpu",
    "ActivityIdGenerator": "propagation",
}

__all__ = [
    "ActivityIdGenerator",
    "GatewayMetrics",
    "InstrumentConfig",
    "Instrumentation",
    "JsonFormatter",
    "LokiTraceHandler",
    "NvmlCollector",
    "OtelConfig",
    "TraceContextFilter",
    "current_request",
    "instrument",
    "record_cache",
    "record_decode",
    "record_decode_warmup",
    "record_embedding_stall",
    "record_prefill",
    "record_stage",
    "set_gpu_memory_utilization",
    "set_model",
    "set_route",
    "stage",
]

if TYPE_CHECKING:
    from obsbox.exporters.gateway_metrics import GatewayMetrics
    from obsbox.exporters.gpu import NvmlCollector
    from obsbox.exporters.instrumentation import Instrumentation, InstrumentConfig, instrument
    from obsbox.exporters.jsonlog import JsonFormatter, TraceContextFilter
    from obsbox.exporters.loki_handler import LokiTraceHandler
    from obsbox.exporters.otel_setup import OtelConfig
    from obsbox.exporters.propagation import ActivityIdGenerator
    from obsbox.exporters.request import (
        current_request,
        record_cache,
        record_decode,
        record_decode_warmup,
        record_embedding_stall,
        record_prefill,
        set_gpu_memory_utilization,
        set_model,
        set_route,
    )
    from obsbox.exporters.stages import record_stage, stage


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
