"""The OpenTelemetry SDK for one instrumented app: traces, metrics and logs over OTLP.

Configured the standard way, by ``OTEL_*`` environment variables: ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_{TRACES,METRICS,LOGS}_EXPORTER`` (``otlp``, ``console`` or
``none``; ``otlp`` by default, as the spec says), ``OTEL_EXPORTER_OTLP_[SIGNAL_]PROTOCOL``
(``http/protobuf`` by default, or ``grpc``), ``OTEL_EXPORTER_OTLP_[SIGNAL_]ENDPOINT``, headers,
timeouts, ``OTEL_TRACES_SAMPLER`` and ``OTEL_SDK_DISABLED``; the exporters read their own variables.
Arguments in ``OtelConfig`` override the environment, and tests add their own span processors.

Spans over ``http/protobuf`` go through obsbox's own ``OtlpHttpSpanExporter`` (``span_exporter``),
which reads the same variables as the SDK's and encodes a span in about 3 µs where the SDK's
encoder takes 24-27; ``OBSBOX_SDK_SPAN_EXPORTER=1`` (or ``OtelConfig(sdk_span_exporter=True)``) uses the
SDK's ``OTLPSpanExporter`` instead. ``grpc`` uses the SDK's gRPC exporter. Whichever the exporter,
spans reach it through ``SpanBatcher`` (``span_batcher``), which counts the spans it drops.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from obsbox.config import ConfigError
from obsbox.exporters.instrumentation.propagation import ActivityIdGenerator
from obsbox.exporters.instrumentation.span_batcher import SpanBatcher

SIGNALS = ("traces", "metrics", "logs")
EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")


@dataclass
class OtelConfig:
    """``*_exporter`` None means: from ``OTEL_*_EXPORTER``, default ``otlp``. ``tracer_provider``
    brings your own provider (its ID generator is wrapped so ``X-Activity-ID`` works);
    ``span_processors`` are added to the provider either way."""

    service_name: str | None = None
    resource_attributes: dict[str, str] = field(default_factory=dict)
    traces_exporter: str | None = None
    metrics_exporter: str | None = None
    logs_exporter: str | None = None
    tracer_provider: TracerProvider | None = None
    meter_provider: Any = None  # bring your own MeterProvider (e.g. with an InMemoryMetricReader); not shut down
    span_processors: Sequence[SpanProcessor] = ()
    log_handler: bool = True  # send Python logging records over OTLP logs (root logger)
    set_global: bool = True  # make ours the global tracer provider when none is set yet
    sdk_span_exporter: bool | None = None  # None: OBSBOX_SDK_SPAN_EXPORTER (1/true: the SDK's OTLPSpanExporter)


def exporter_choice(signal: str, given: str | None) -> str:
    """The exporter for one signal: the argument, else ``OTEL_<SIGNAL>_EXPORTER``, else ``otlp``."""
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    choice = (given or os.environ.get(variable) or "otlp").strip().lower()
    if choice not in EXPORTERS:
        source = "argument" if given else variable
        raise ConfigError(f"{source}={choice!r}: expected one of {', '.join(EXPORTERS)}")
    return choice


def protocol(signal: str) -> str:
    value = (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if value not in PROTOCOLS:
        raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={value!r}: expected one of {', '.join(PROTOCOLS)}")
    return value


def _otlp_exporter(signal: str) -> Any:
    """The OTLP exporter class for a signal and the configured protocol, built from the env."""
    module = "grpc" if protocol(signal) == "grpc" else "http"
    path, name = {
        "traces": ("trace_exporter", "OTLPSpanExporter"),
        "metrics": ("metric_exporter", "OTLPMetricExporter"),
        "logs": ("_log_exporter", "OTLPLogExporter"),
    }[signal]
    return getattr(importlib.import_module(f"opentelemetry.exporter.otlp.proto.{module}.{path}"), name)()


def span_exporter(config: OtelConfig) -> Any:
    """The OTLP span exporter: obsbox's own for ``http/protobuf``, unless the SDK's is asked for."""
    if protocol("traces") == "grpc":
        return _otlp_exporter("traces")
    sdk = config.sdk_span_exporter
    if sdk is None:
        sdk = os.environ.get("OBSBOX_SDK_SPAN_EXPORTER", "").strip().lower() in ("1", "true", "yes")
    if sdk:
        return _otlp_exporter("traces")
    from obsbox.exporters.instrumentation.span_exporter import OtlpHttpSpanExporter  # noqa: PLC0415

    return OtlpHttpSpanExporter()


@dataclass
class OtelProviders:
    """The providers built for one app; ``shutdown()`` flushes and stops them."""

    tracer_provider: TracerProvider
    meter_provider: Any = None
    logger_provider: Any = None
    log_handler: logging.Handler | None = None
    owns_tracer_provider: bool = True
    owns_meter_provider: bool = True

    def shutdown(self) -> None:
        if self.log_handler is not None:
            logging.getLogger().removeHandler(self.log_handler)
            self.log_handler = None
        if self.meter_provider is not None:
            if self.owns_meter_provider:
                self.meter_provider.shutdown()
            else:
                self.meter_provider.force_flush()
        if self.logger_provider is not None:
            self.logger_provider.shutdown()
        if self.owns_tracer_provider:
            self.tracer_provider.shutdown()
        else:
            self.tracer_provider.force_flush()


def build(config: OtelConfig, on_span_drop: Callable[[str, int], None] | None = None) -> OtelProviders:
    """The providers ``config`` asks for. Spans go to their exporter through a ``SpanBatcher``,
    which calls ``on_span_drop(reason, count)`` for every span it could not deliver."""
    attributes = dict(config.resource_attributes)
    if config.service_name:
        attributes[SERVICE_NAME] = config.service_name
    resource = Resource.create(attributes)
    providers = OtelProviders(
        tracer_provider=config.tracer_provider or TracerProvider(resource=resource, id_generator=ActivityIdGenerator()),
        owns_tracer_provider=config.tracer_provider is None,
    )
    tp = providers.tracer_provider
    if not isinstance(tp.id_generator, ActivityIdGenerator):  # an app's own provider, kept with its generator
        tp.id_generator = ActivityIdGenerator(tp.id_generator)  # type: ignore[assignment] # the SDK annotates the attribute with its default class, but takes any IdGenerator
    for processor in config.span_processors:
        tp.add_span_processor(processor)
    traces = exporter_choice("traces", config.traces_exporter)
    if traces != "none":
        exporter = ConsoleSpanExporter() if traces == "console" else span_exporter(config)
        tp.add_span_processor(SpanBatcher(exporter, on_drop=on_span_drop))
    if config.set_global and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(tp)
    metrics = exporter_choice("metrics", config.metrics_exporter)
    if config.meter_provider is not None:
        providers.meter_provider = config.meter_provider
        providers.owns_meter_provider = False
    elif metrics != "none":
        providers.meter_provider = _meter_provider(resource, metrics)
    logs = exporter_choice("logs", config.logs_exporter)
    if logs != "none":
        providers.logger_provider = _logger_provider(resource, logs)
        if config.log_handler:
            from opentelemetry.sdk._logs import LoggingHandler  # noqa: PLC0415

            providers.log_handler = LoggingHandler(logger_provider=providers.logger_provider)
            logging.getLogger().addHandler(providers.log_handler)
    return providers


def _meter_provider(resource: Resource, choice: str) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader  # noqa: PLC0415

    exporter = ConsoleMetricExporter() if choice == "console" else _otlp_exporter("metrics")
    return MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(exporter)])


def _logger_provider(resource: Resource, choice: str) -> Any:
    from opentelemetry.sdk._logs import LoggerProvider  # noqa: PLC0415
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogRecordExporter  # noqa: PLC0415

    provider = LoggerProvider(resource=resource)
    exporter = ConsoleLogRecordExporter() if choice == "console" else _otlp_exporter("logs")
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    return provider
