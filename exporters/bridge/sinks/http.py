"""One keep-alive HTTP/1.1 connection per sink (http.client), with reconnect on failure.

The sinks send large batched bodies from one thread, so a pooled async client buys nothing here,
while http.client keeps the hot path free of extra dependencies and allocations.
"""

from __future__ import annotations

import base64
import os
import re
import socket
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, unquote, urlsplit

from obsbox.config import FieldError
from obsbox.exporters.bridge.retry import Attempt, parse_retry_after

if TYPE_CHECKING:
    import http.client

try:  # ISA-L's deflate (binary wheels on PyPI): at level 1 about 5x zlib's speed, at a better ratio
    from isal.igzip import compress as gzip_compress
except ImportError:  # pragma: no cover - a platform without its wheel: the standard library's zlib
    from gzip import compress as gzip_compress  # type: ignore[assignment] # the same call, typed apart


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


_USERINFO = re.compile(r"(//)[^/@]*@")


def http_url(url: str, option: str = "url", example: str = "http://localhost:4318") -> SplitResult:
    """``url`` split, when it is an http(s) URL with a host and a valid port; else a FieldError
    naming ``option`` and the fix, so a typo is a config error at start-up, not a traceback at the
    first export. The message shows the URL without its credentials."""
    fix = f"write http://HOST:PORT or https://HOST:PORT, e.g. {example}"
    shown = _USERINFO.sub(r"\1***@", url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed [
        raise FieldError(option, f"{shown!r} is not a valid URL ({exc}): {fix}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FieldError(option, f"{shown!r} is not an http(s) URL with a host: {fix}")
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    if port == 0:
        raise FieldError(option, f"{shown!r}: the port must be a number from 1 to 65535: {fix}")
    return parts


def check_endpoint(url: str, timeout: float, option: str, example: str) -> None:
    """What an HttpEndpoint needs of a sink's config: an http(s) URL (``option``, see ``http_url``),
    and a timeout above 0 (at 0 the socket does not block, so every request fails at once)."""
    http_url(url, option, example)
    if timeout <= 0:
        raise FieldError("timeout", "must be more than 0 (such as 10s)")


def _client() -> ModuleType:
    """``http.client``, imported on the first connection (it brings ``ssl`` and ``email``): a worker
    process builds sinks to encode with them, and never connects."""
    import http.client  # noqa: PLC0415

    return http.client


class HttpEndpoint:
    def __init__(self, url: str, timeout: float) -> None:
        parts = http_url(url)
        self.url = url
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.timeout = timeout
        self.userinfo = (parts.username, parts.password) if parts.username else None
        self.conn: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self.conn is None:
            client = _client()
            conn: http.client.HTTPConnection
            if self.https:
                import ssl  # noqa: PLC0415 - as http.client

                context = ssl.create_default_context()
                conn = client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=context)
            else:
                conn = client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            conn.connect()  # raises OSError when the peer is down: the caller retries
            # small requests must not wait for the peer's delayed ACK (Nagle)
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conn = conn
        return self.conn

    def post(self, body: bytes, headers: dict[str, str]) -> Response:
        """POST once. Raises OSError / HTTPException on connection problems (the caller retries)."""
        conn = self._connect()
        try:
            conn.request("POST", self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, _client().HTTPException):
            self.close()
            raise
        if resp.getheader("Connection", "").lower() == "close":
            self.close()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def auth_headers(username: str | None, password: str | None, bearer: str | None) -> dict[str, str]:
    if bearer:
        return {"Authorization": f"Bearer {bearer}"}
    if username:
        token = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
        return {"Authorization": f"Basic {token}"}
    return {}


def env(name: str | None) -> str | None:
    return os.environ.get(name) if name else None


def env_pairs(name: str) -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS`` / ``OTEL_RESOURCE_ATTRIBUTES`` style: ``k=v,k2=v2``, URL-encoded."""
    pairs = {}
    for item in os.environ.get(name, "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            pairs[unquote(key.strip())] = unquote(value.strip())
    return pairs


def compress(body: bytes, compression: str, headers: dict[str, str]) -> bytes:
    if compression == "gzip":
        headers["Content-Encoding"] = "gzip"
        return gzip_compress(body, compresslevel=1)  # level 1: most of the ratio for a fraction of the CPU
    return body


def post_attempt(
    endpoint: HttpEndpoint, body: bytes, headers: dict[str, str], retryable: frozenset[int] | None
) -> tuple[Attempt, Response | None]:
    """One POST classified for ``with_retry``. ``retryable=None`` means "429 and every 5xx"."""
    try:
        resp = endpoint.post(body, headers)
    except (OSError, _client().HTTPException) as exc:
        return Attempt("retry", f"connection: {type(exc).__name__}: {exc}"), None
    if 200 <= resp.status < 300:
        return Attempt("ok", status=resp.status), resp
    detail = resp.body[:500].decode("utf-8", "replace").strip()
    is_retryable = resp.status in retryable if retryable is not None else (resp.status == 429 or resp.status >= 500)
    if is_retryable:
        return Attempt(
            "retry", f"HTTP {resp.status}: {detail}", parse_retry_after(resp.headers.get("retry-after")), resp.status
        ), resp
    return Attempt("reject", f"HTTP {resp.status}: {detail}", status=resp.status), resp
