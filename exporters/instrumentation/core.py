"""What one instrumented app shares, and the per-request work both middlewares do.

``Instrumentation`` holds what one instrumented app shares across requests (the tracer, the
Prometheus instruments, the label guards) and does the per-request bookkeeping that the ASGI and
WSGI middlewares have in common: open the server span and the ``RequestScope``, then close both
and observe the histograms.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from prometheus_client import CollectorRegistry, start_http_server

from obsbox import __version__, conventions
from obsbox.exporters.instrumentation import genai, metric_plugins, otel_setup
from obsbox.exporters.instrumentation import request as _request
from obsbox.exporters.instrumentation.gateway_metrics import GatewayMetrics
from obsbox.exporters.instrumentation.labels import UNKNOWN, BoundedLabel, RouteTemplates
from obsbox.exporters.instrumentation.propagation import extract_w3c, trace_id_from_guid, traceresponse
from obsbox.exporters.instrumentation.request import RequestScope
from obsbox.exporters.instrumentation.server_span import ServerSpans, set_attributes

SERVER = trace.SpanKind.SERVER
HTTP_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


@dataclass
class InstrumentConfig:
    """Everything ``instrument()`` takes besides the app. Caps bound the label values per label."""

    service_name: str | None = None
    routes: Sequence[str] = ()  # route templates, e.g. "/v1/models/{model}"; others keep their shape
    max_routes: int = 50
    models: Sequence[str] = ()  # known models; empty: the first max_models seen
    max_models: int = 20
    worker_pools: Sequence[str] = ()
    max_worker_pools: int = 10
    worker_pool_header: str = "X-Worker-Pool"
    default_worker_pool: str = "default"
    stages: Sequence[str] = conventions.STAGES
    stage_spans: bool = False  # a child span per stage(): a trace waterfall, ~13 µs a stage recorded, ~21 exported
    # GenAI operations by route template (gen_ai.operation.name), and the provider named on them
    genai_routes: Mapping[str, str] = field(default_factory=lambda: dict(genai.ROUTES))
    genai_provider: str = genai.OPENAI  # the API the gateway speaks; set_operation(name, provider) overrides
    model_from_body: bool = True  # read "model" from a JSON request body the app did not name
    max_body_sniff: int = 64 * 1024
    metrics_path: str | None = "/metrics"  # served by the middleware itself; None: not mounted
    metrics_port: int | None = None  # also serve /metrics on a port of its own (0: any free port)
    metrics_host: str = "127.0.0.1"
    registry: CollectorRegistry | None = None  # default: a fresh one
    metric_plugins: Sequence[str] | None = None  # None: every installed plugin that can work here
    untraced_paths: Sequence[str] = ()  # health checks and the like: passed through untouched
    interface: Literal["auto", "asgi", "wsgi"] = "auto"
    otel: otel_setup.OtelConfig = field(default_factory=otel_setup.OtelConfig)

    def __post_init__(self) -> None:
        for name in ("max_routes", "max_models", "max_worker_pools", "max_body_sniff"):
            if getattr(self, name) < 0:
                raise ValueError(f"InstrumentConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not isinstance(self.genai_provider, str) or not self.genai_provider:
            raise ValueError(f"InstrumentConfig.genai_provider must be a non-empty string, got {self.genai_provider!r}")
        if self.metrics_path is not None and not self.metrics_path.startswith("/"):
            raise ValueError(f"InstrumentConfig.metrics_path must start with '/', got {self.metrics_path!r}")
        unknown = [s for s in conventions.STAGES if s not in self.stages]
        if unknown:
            raise ValueError(f"InstrumentConfig.stages must include the standard stages; missing {unknown}")


class Instrumentation:
    """The shared state of one instrumented app. Thread-safe; one per app."""

    def __init__(self, config: InstrumentConfig) -> None:
        self.config = config
        self.registry = config.registry if config.registry is not None else CollectorRegistry()
        self.plugins = metric_plugins.load(None if config.metric_plugins is None else list(config.metric_plugins))
        for collector in self.plugins.collectors:
            self.registry.register(collector)
        self.metrics = GatewayMetrics(
            self.registry, gpu_gauge=conventions.GPU_MEMORY_UTILIZATION not in self.plugins.provided
        )
        otel = dataclasses.replace(config.otel, service_name=config.otel.service_name or config.service_name)
        self.otel = otel_setup.build(otel, on_span_drop=self.metrics.span_dropped)
        self.tracer = self.otel.tracer_provider.get_tracer("obsbox.exporters", __version__)
        self.server_spans = ServerSpans(self.tracer)
        self.stages = tuple(config.stages)
        self.stage_set = frozenset(self.stages)
        self.routes = RouteTemplates(config.routes, cap=config.max_routes)
        self.model_label = BoundedLabel("model", config.models, config.max_models)
        self.response_model_label = BoundedLabel("response_model", cap=config.max_models)
        self.genai_routes = dict(config.genai_routes)
        self.worker_pool_label = BoundedLabel("worker_pool", config.worker_pools, config.max_worker_pools)
        self.gpu_label = BoundedLabel("gpu", cap=16)
        self.worker_pool_header = config.worker_pool_header.lower()
        self.untraced = frozenset(config.untraced_paths)
        self.http_duration = None
        meter = None
        if self.otel.meter_provider is not None:
            meter = self.otel.meter_provider.get_meter("obsbox.exporters", __version__)
            self.http_duration = meter.create_histogram(
                "http.server.request.duration",
                unit="s",
                description="Duration of HTTP server requests.",
                explicit_bucket_boundaries_advisory=HTTP_DURATION_BUCKETS,
            )
        self.genai = genai.GenAi(meter, genai.latest_experimental())
        self.metrics_server = None
        if config.metrics_port is not None:
            self.metrics_server, _ = start_http_server(config.metrics_port, config.metrics_host, self.registry)

    @property
    def metrics_port(self) -> int | None:
        """The port ``/metrics`` is served on when ``metrics_port`` was set (useful with 0)."""
        return self.metrics_server.server_port if self.metrics_server else None

    def start(
        self,
        method: str,
        path: str,
        scheme: str,
        headers: dict[str, str],
        server: tuple[str, int] | None = None,
    ) -> tuple[RequestScope, Any, Any]:
        """Open the server span and make it and the request scope current. ``headers`` has
        lowercase names; only ``traceparent``, ``tracestate``, ``x-activity-id`` and the worker
        pool header are read; ``server`` is the local address the request came in on. Returns the
        scope and the two context tokens ``finish`` resets."""
        start = time.perf_counter()
        if "traceparent" in headers:
            parent, parent_span = extract_w3c(headers)
        else:
            parent, parent_span = None, trace.get_current_span().get_span_context()
        forced = None
        if "x-activity-id" in headers and not parent_span.is_valid:
            forced = trace_id_from_guid(headers["x-activity-id"])
        attributes = {"http.request.method": method, "url.path": path, "url.scheme": scheme}
        span = self.server_spans.start(method, parent_span, parent, attributes, forced)
        ctx = trace.set_span_in_context(span, parent)
        pool = self.worker_pool_label(headers.get(self.worker_pool_header) or self.config.default_worker_pool)
        scope = RequestScope(self, span, ctx, start, method, path, pool, server=server)
        scope.in_flight = self.metrics.child(self.metrics.in_flight, pool)
        scope.in_flight.inc()
        return scope, otel_context.attach(ctx), _request._current.set(scope)

    def response_headers(self, scope: RequestScope) -> list[tuple[str, str]]:
        ctx = scope.span.get_span_context()
        return [("x-span-id", format(ctx.span_id, "016x")), ("traceresponse", traceresponse(ctx))]

    def finish(
        self,
        scope: RequestScope,
        tokens: tuple[Any, Any] | list[Any],
        *,
        status: int,
        first_byte: float | None,
        body: list[bytes] | None = None,
        framework_route: str | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Close the request: observe the histograms (exemplar: the trace ID), end the span."""
        end = time.perf_counter()
        duration = end - scope.start
        if scope.model is None and body:
            scope.model = _model_from_body(body)
        named = scope.route or framework_route
        route = self.routes.admit(named) if named else self.routes(scope.path)
        model = self.model_label(scope.model)
        status_code = str(status)
        m = self.metrics
        exemplar = scope.make_exemplar  # formatted only when a bucket is due for one
        m.observe(m.request_duration, (route, model, status_code, scope.worker_pool), duration, exemplar)
        reply = duration if first_byte is None else first_byte - scope.start
        m.observe(m.reply_latency, (route, model), reply, exemplar)
        scope.in_flight.dec()
        span = scope.span
        attributes = {
            "http.route": route,
            "http.response.status_code": status,
            "gen_ai.request.model": scope.model or UNKNOWN,
        }
        error_type = None
        if error is not None:
            error_type = type(error).__qualname__
            span.record_exception(error)
            attributes["error.type"] = error_type
            span.set_status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
        elif status >= 500:
            error_type = status_code
            attributes["error.type"] = status_code
            span.set_status(trace.StatusCode.ERROR)
        operation = scope.operation or self.genai_routes.get(route)
        if operation is not None:
            if scope.provider is None:
                scope.provider = self.config.genai_provider
            response_model = self.response_model_label(scope.response_model) if scope.response_model else None
            self.genai.finish(
                scope,
                operation,
                attributes,
                request_model=model,
                response_model=response_model,
                duration=duration,
                first_byte=reply,
                error_type=error_type or (status_code if status >= 400 else None),
            )
        set_attributes(span, attributes, name=f"{scope.method} {route}")  # all at once: one lock, one pass
        span.end()
        if self.http_duration is not None:
            self.http_duration.record(
                duration,
                {"http.request.method": scope.method, "http.route": route, "http.response.status_code": status},
            )
        _request._current.reset(tokens[1])
        otel_context.detach(tokens[0])

    def shutdown(self) -> None:
        """Flush and stop the OTel providers and the metrics server."""
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
            self.metrics_server = None
        self.otel.shutdown()


def _model_from_body(chunks: list[bytes]) -> str | None:
    try:
        data = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None
