"""The WSGI side of ``instrument()``.

The response iterable is wrapped so that the request stays current (span and ``RequestScope``)
while a streaming app produces its chunks, time to first byte is taken at the first non-empty chunk,
and the request is closed when the server closes the iterable.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from opentelemetry import context as otel_context
from prometheus_client import make_wsgi_app

from obsbox.exporters.instrumentation import request as _request
from obsbox.exporters.instrumentation.core import Instrumentation
from obsbox.exporters.instrumentation.request import RequestScope

_HEADER_KEYS = {
    "HTTP_TRACEPARENT": "traceparent",
    "HTTP_TRACESTATE": "tracestate",
    "HTTP_X_ACTIVITY_ID": "x-activity-id",
}


class WsgiMiddleware:
    """A WSGI app wrapping another. Safe for threaded servers."""

    def __init__(self, app: Callable[..., Iterable[bytes]], instrumentation: Instrumentation) -> None:
        self.app = app
        self.instrumentation = instrumentation
        self.metrics_app = make_wsgi_app(instrumentation.registry)
        self.metrics_path = instrumentation.config.metrics_path
        pool = instrumentation.worker_pool_header
        self.header_keys = {**_HEADER_KEYS, "HTTP_" + pool.upper().replace("-", "_"): pool}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == self.metrics_path:
            return self.metrics_app(environ, start_response)
        inst = self.instrumentation
        if path in inst.untraced:
            return self.app(environ, start_response)
        headers = {key: environ[var] for var, key in self.header_keys.items() if var in environ}
        method = environ.get("REQUEST_METHOD", "GET")
        body = None
        if (
            inst.config.model_from_body
            and method in ("POST", "PUT", "PATCH")
            and "json" in environ.get("CONTENT_TYPE", "")
        ):
            body = _read_body(environ, inst.config.max_body_sniff)
        request, *tokens = inst.start(method, path, environ.get("wsgi.url_scheme", "http"), headers, _server(environ))
        response = _Response(inst, request, tokens, body)

        def start_watching(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            response.status = int(status.split(" ", 1)[0])
            return start_response(status, [*response_headers, *inst.response_headers(request)], exc_info)

        try:
            response.inner = self.app(environ, start_watching)
        except BaseException as exc:
            response.close(exc)
            raise
        # Each chunk is produced with the request current again (see _Response); leave it now.
        _request._current.reset(tokens[1])
        otel_context.detach(tokens[0])
        response.tokens = None
        return response


def _server(environ: dict[str, Any]) -> tuple[str, int] | None:
    """The server's own name and port (PEP 3333 requires both), for ``server.address``/``server.port``."""
    port = environ.get("SERVER_PORT", "")
    return (environ["SERVER_NAME"], int(port)) if environ.get("SERVER_NAME") and port.isdigit() else None


def _read_body(environ: dict[str, Any], limit: int) -> list[bytes] | None:
    """Read a small JSON body for its ``model`` and put it back for the app."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if not 0 < length <= limit:
        return None
    data = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(data)
    return [data]


class _Response:
    """The app's response iterable, observed. The server calls ``close()`` at the end."""

    def __init__(
        self, inst: Instrumentation, request: RequestScope, tokens: list[Any], body: list[bytes] | None
    ) -> None:
        self.inst = inst
        self.request = request
        self.tokens: list[Any] | None = tokens
        self.body = body
        self.inner: Iterable[bytes] = ()
        self.iterator: Iterator[bytes] | None = None
        self.status = 500
        self.first_byte: float | None = None
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        token = otel_context.attach(self.request.otel_context)
        scope_token = _request._current.set(self.request)
        failed: BaseException | None = None
        try:
            if self.iterator is None:
                self.iterator = iter(self.inner)
            chunk = next(self.iterator)
        except StopIteration:
            if self.first_byte is None:
                self.first_byte = time.perf_counter()
            raise
        except BaseException as exc:
            failed = exc
            raise
        finally:
            _request._current.reset(scope_token)
            otel_context.detach(token)
            if failed is not None:
                self.close(failed)
        if chunk and self.first_byte is None:
            self.first_byte = time.perf_counter()
        return chunk

    def close(self, error: BaseException | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            inner_close = getattr(self.inner, "close", None)
            if inner_close is not None:
                inner_close()
        finally:
            tokens = self.tokens
            if tokens is None:  # the request is no longer current: make it so for finish()
                tokens = [otel_context.attach(self.request.otel_context), _request._current.set(self.request)]
            self.inst.finish(
                self.request, tokens, status=self.status, first_byte=self.first_byte, body=self.body, error=error
            )
