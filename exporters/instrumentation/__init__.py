"""Instrumentation for Python gateways: ``instrument(app)`` (``instrument``) wraps an ASGI (``asgi``)
or WSGI (``wsgi``) app around what both share (``core``): the OTel SDK set up (``otel_setup``, with
the span encoder ``span_wire`` and exporter ``span_exporter``), the Prometheus instruments
(``gateway_metrics``, ``metric_plugins``, ``gpu``), label guards (``labels``), legacy trace context
(``propagation``), per-request state (``request``, ``stages``) and trace-aware logging (``jsonlog``,
``loki_handler``). Its public names are imported from ``obsbox.exporters``, on first use.
"""
