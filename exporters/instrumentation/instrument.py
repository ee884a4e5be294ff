"""``instrument(app)``: traces, Prometheus metrics and trace-aware logs for an ASGI or WSGI app.

It picks the middleware for the app's interface. The middlewares (``asgi``, ``wsgi``) and what they
share (``core``) never import this module, so the import graph has no loop.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from obsbox.exporters.instrumentation.asgi import AsgiMiddleware
from obsbox.exporters.instrumentation.core import Instrumentation, InstrumentConfig
from obsbox.exporters.instrumentation.wsgi import WsgiMiddleware


def is_asgi(app: Callable[..., Any]) -> bool:
    call = app if inspect.isfunction(app) or inspect.ismethod(app) else getattr(app, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(call)


def instrument(
    app: Callable[..., Any], service_name: str | None = None, config: InstrumentConfig | None = None, **options: Any
) -> Any:
    """Wrap an ASGI or WSGI ``app``: one server span per request, the gateway's Prometheus metrics
    (at ``/metrics`` or on a port of their own), ``X-Span-ID`` and ``traceresponse`` on responses.

    ``options`` are ``InstrumentConfig`` fields (``instrument(app, "gateway", models=["gpt-4o"])``).
    The returned middleware has ``.instrumentation`` (registry, metrics, tracer, ``shutdown()``).
    """
    config = config or InstrumentConfig()
    known = {f.name for f in dataclasses.fields(InstrumentConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"instrument(): unknown option(s) {unknown}; InstrumentConfig has {sorted(known)}")
    if service_name is not None:
        options["service_name"] = service_name
    config = dataclasses.replace(config, **options)
    interface = config.interface
    if interface == "auto":
        interface = "asgi" if is_asgi(app) else "wsgi"
    instrumentation = Instrumentation(config)
    if interface == "asgi":
        return AsgiMiddleware(app, instrumentation)
    if interface == "wsgi":
        return WsgiMiddleware(app, instrumentation)
    raise ValueError(f"instrument(): interface must be 'auto', 'asgi' or 'wsgi', got {interface!r}")
