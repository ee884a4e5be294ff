"""obsbox.exporters: instrumentation for Python gateways (``.instrumentation``), the log bridge
(``.bridge``) and the demo (``.demo``).

``instrument(app)`` wraps an ASGI or WSGI app; ``stage()`` and the ``record_*`` functions let the
app report what only it knows; ``JsonFormatter`` and ``LokiTraceHandler`` put trace IDs in logs.
Names are imported on first use, so ``import obsbox.exporters.bridge`` does not pay for the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from obsbox.lazy import lazy_exports

_EXPORTS = {
    "instrument": "instrumentation.instrument",
    "InstrumentConfig": "instrumentation.core",
    "Instrumentation": "instrumentation.core",
    "OtelConfig": "instrumentation.otel_setup",
    "stage": "instrumentation.stages",
    "record_stage": "instrumentation.stages",
    "current_request": "instrumentation.request",
    "set_model": "instrumentation.request",
    "set_route": "instrumentation.request",
    "set_operation": "instrumentation.request",
    "record_usage": "instrumentation.request",
    "record_cache": "instrumentation.request",
    "record_prefill": "instrumentation.request",
    "record_decode": "instrumentation.request",
    "record_decode_warmup": "instrumentation.request",
    "record_embedding_stall": "instrumentation.request",
    "set_gpu_memory_utilization": "instrumentation.request",
    "GatewayMetrics": "instrumentation.gateway_metrics",
    "JsonFormatter": "instrumentation.jsonlog",
    "TraceContextFilter": "instrumentation.jsonlog",
    "LokiTraceHandler": "instrumentation.loki_handler",
    "NvmlCollector": "instrumentation.gpu",
    "ActivityIdGenerator": "instrumentation.propagation",
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
    "record_usage",
    "set_gpu_memory_utilization",
    "set_model",
    "set_operation",
    "set_route",
    "stage",
]

if TYPE_CHECKING:
    from obsbox.exporters.instrumentation.core import Instrumentation, InstrumentConfig
    from obsbox.exporters.instrumentation.gateway_metrics import GatewayMetrics
    from obsbox.exporters.instrumentation.gpu import NvmlCollector
    from obsbox.exporters.instrumentation.instrument import instrument
    from obsbox.exporters.instrumentation.jsonlog import JsonFormatter, TraceContextFilter
    from obsbox.exporters.instrumentation.loki_handler import LokiTraceHandler
    from obsbox.exporters.instrumentation.otel_setup import OtelConfig
    from obsbox.exporters.instrumentation.propagation import ActivityIdGenerator
    from obsbox.exporters.instrumentation.request import (
        current_request,
        record_cache,
        record_decode,
        record_decode_warmup,
        record_embedding_stall,
        record_prefill,
        record_usage,
        set_gpu_memory_utilization,
        set_model,
        set_operation,
        set_route,
    )
    from obsbox.exporters.instrumentation.stages import record_stage, stage


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
