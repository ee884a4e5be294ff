"""The ASGI side of ``instrument()``: HTTP requests get a span and metrics; ``/metrics`` is served;
lifespan and websocket traffic pass through untouched.

Time to first byte is taken at the first non-empty ``http.response.body`` message, which for a
streamed (SSE) reply is the first chunk, not the end of the stream.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import make_asgi_app

from obsbox.exporters.instrumentation.core import Instrumentation
from obsbox.exporters.instrumentation.propagation import response_headers

Scope = dict[str, Any]
_SNIFFED_METHODS = frozenset({"POST", "PUT", "PATCH"})
_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate", b"x-activity-id"})


class AsgiMiddleware:
    """An ASGI app wrapping another. Safe for any number of concurrent requests."""

    def __init__(self, app: Any, instrumentation: Instrumentation) -> None:
        self.app = app
        self.instrumentation = instrumentation
        self.metrics_app = make_asgi_app(instrumentation.registry)
        self.metrics_path = instrumentation.config.metrics_path
        self.sniff_body = instrumentation.config.model_from_body
        self.sniff_budget = instrumentation.config.max_body_sniff

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path == self.metrics_path:
            await self.metrics_app(scope, receive, send)
            return
        inst = self.instrumentation
        if path in inst.untraced:
            await self.app(scope, receive, send)
            return
        headers, sniff = _read_headers(scope["headers"], inst.worker_pool_header)
        method = scope["method"]
        server = scope.get("server")  # (host, port), or (path, None) on a unix socket
        request, context_token, scope_token = inst.start(
            method, path, scope.get("scheme", "http"), headers, (server[0], server[1]) if server and server[1] else None
        )
        extra = response_headers(request.span.get_span_context())
        status = 500
        first_byte: float | None = None
        body: list[bytes] | None = None
        sniff = sniff and self.sniff_body and method in _SNIFFED_METHODS
        budget = self.sniff_budget

        async def receive_sniffing() -> dict[str, Any]:
            nonlocal body, budget
            message = await receive()
            chunk = message.get("body")
            if chunk and budget >= len(chunk):
                budget -= len(chunk)
                if body is None:
                    body = []
                body.append(chunk)
            elif chunk:
                budget = -1
            return message

        async def send_watching(message: dict[str, Any]) -> None:
            nonlocal status, first_byte
            kind = message["type"]
            if kind == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            elif (
                first_byte is None
                and kind == "http.response.body"
                and (message.get("body") or not message.get("more_body", False))
            ):
                first_byte = time.perf_counter()
            await send(message)

        error: BaseException | None = None
        try:
            await self.app(scope, receive_sniffing if sniff else receive, send_watching)
        except BaseException as exc:
            error = exc
            raise
        finally:
            route = scope.get("route")
            inst.finish(
                request,
                (context_token, scope_token),
                status=status,
                first_byte=first_byte,
                body=body if budget >= 0 else None,
                framework_route=getattr(route, "path", None),
                error=error,
            )

    def __getattr__(self, name: str) -> Any:
        # ``app.state``, ``app.router`` and friends of the wrapped app stay reachable.
        return getattr(self.app, name)


def _read_headers(raw: list[tuple[bytes, bytes]], worker_pool_header: str) -> tuple[dict[str, str], bool]:
    """The headers the instrumentation reads (lowercase names), and whether the body is JSON.
    Names are compared as bytes: only the few wanted are decoded."""
    headers: dict[str, str] = {}
    json_body = False
    pool = worker_pool_header.encode("latin-1")
    for name, value in raw:
        if name in _TRACE_HEADERS or name == pool:
            headers[name.decode("latin-1")] = value.decode("latin-1")
        elif name == b"content-type" and b"json" in value:
            json_body = True
        elif not name.islower():  # the ASGI spec has names lowercased; a server that does not is read as well
            key = name.lower()
            if key in _TRACE_HEADERS or key == pool:
                headers[key.decode("latin-1")] = value.decode("latin-1")
            elif key == b"content-type" and b"json" in value:
                json_body = True
    return headers, json_body
