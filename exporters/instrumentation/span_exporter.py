"""An OTLP/HTTP (``http/protobuf``) span exporter that writes the protobuf bytes itself.

Why not the SDK's ``OTLPSpanExporter``: its encoding (``encode_spans`` then ``SerializeToString``)
builds protobuf message objects in Python and costs 24-27 µs per span of the middleware's shape,
in a thread of the instrumented process, under the same GIL as the requests: most of what exporting
a span added to a request. ``SpanEncoder`` (``span_wire``) writes the same request directly, about
3 µs a span, and the post goes over one keep-alive ``http.client`` connection (a
``requests.Session`` post of the same body took about six times the CPU). See BENCHMARKS.md,
"Instrumentation overhead".

Configured as the SDK's exporter is, from the same environment variables (an argument wins):

- endpoint: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as given, else ``OTEL_EXPORTER_OTLP_ENDPOINT``
  (default ``http://localhost:4318``) with ``/v1/traces`` appended;
- headers: ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``, else ``OTEL_EXPORTER_OTLP_HEADERS``
  (``key=value,...``, values URL-decoded), added to ``Content-Type: application/x-protobuf``;
- timeout: ``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT``, else ``OTEL_EXPORTER_OTLP_TIMEOUT``, in seconds as
  the Python SDK reads it (default 10): the bound on one export, retries included;
- compression: ``OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION``, ``gzip``, ``deflate`` or ``none``;
- TLS: ``OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`` (CA bundle), ``..._CLIENT_CERTIFICATE`` and
  ``..._CLIENT_KEY`` (mTLS).

Retries as the SDK's: 429, 502, 503 and 504 and connection errors are retried after 1, 2, 4, ... s
(±20% jitter) or the server's ``Retry-After``, at most 6 attempts and never past the timeout (a
connection error is first tried again at once, on a new connection: the server may have closed a
kept-alive one); any other status fails the batch at once; a status below 400 is success.
``shutdown()`` interrupts a backoff.
What it does not do: HTTP(S)_PROXY, the SDK's credential-provider entry points and its own
exporter metrics. ``OBSBOX_SDK_SPAN_EXPORTER=1`` (or ``OtelConfig(sdk_span_exporter=True)``)
brings back the SDK's exporter.

Threading: ``export``, ``encode_span`` and ``export_encoded`` may be called from any thread: the
encoder's caches have a lock of their own, held while a span is encoded, and posts are serialized
by another (the batch processor posts from its worker thread, and from the caller's thread on
``force_flush``), so encoding in a request thread never waits for a post.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import math
import os
import random
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from datetime import timezone
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.util.re import parse_env_headers

from obsbox import __version__
from obsbox.exporters.instrumentation.span_wire import EncodedSpan, SpanEncoder

_logger = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "http://localhost:4318"
DEFAULT_TIMEOUT = 10.0
MAX_REQUEST_BYTES = 64 * 1024 * 1024  # the SDK's limit on a serialized request, before compression
RETRYABLE = frozenset({429, 502, 503, 504})
MAX_ATTEMPTS = 6
JITTER = 0.2
COMPRESSIONS = ("none", "gzip", "deflate")


def _env(name: str, default: str = "") -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>``, else ``default``."""
    return (
        os.environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or os.environ.get(f"OTEL_EXPORTER_OTLP_{name}") or default
    )


def endpoint_from_env() -> str:
    if endpoint := os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return endpoint
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
    return f"{base.removesuffix('/')}/v1/traces"


def timeout_from_env() -> float:
    raw = _env("TIMEOUT")
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        return float(raw)
    except ValueError:
        _logger.warning("Invalid timeout value %r, using default of %s seconds", raw, DEFAULT_TIMEOUT)
        return DEFAULT_TIMEOUT


def compression_from_env() -> str:
    value = _env("COMPRESSION", "none").strip().lower()
    if value not in COMPRESSIONS:
        _logger.warning("Unsupported compression type: %s", value)
        return "none"
    return value


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(when.timestamp() - time.time(), 0.0)


class OtlpHttpSpanExporter(SpanExporter):
    """Spans as OTLP ``http/protobuf`` requests, encoded by ``SpanEncoder``; see the module doc."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        compression: str | None = None,
        certificate_file: str | None = None,
        client_certificate_file: str | None = None,
        client_key_file: str | None = None,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        self.endpoint = endpoint or endpoint_from_env()
        parts = urlsplit(self.endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {self.endpoint!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.timeout = timeout if timeout is not None else timeout_from_env()
        self.compression = (compression or compression_from_env()).strip().lower()
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression {compression!r}: expected one of {', '.join(COMPRESSIONS)}")
        self.headers = {"content-type": "application/x-protobuf", "user-agent": f"obsbox/{__version__}"}
        self.headers.update(parse_env_headers(_env("HEADERS"), liberal=True))
        self.headers.update({key.lower(): value for key, value in (headers or {}).items()})
        if self.compression != "none":
            self.headers.setdefault("content-encoding", self.compression)
        self.max_request_bytes = max_request_bytes
        self._context: ssl.SSLContext | None = None
        if self._https:
            self._context = ssl.create_default_context(cafile=certificate_file or _env("CERTIFICATE") or None)
            client_certificate = client_certificate_file or _env("CLIENT_CERTIFICATE")
            if client_certificate:
                self._context.load_cert_chain(client_certificate, client_key_file or _env("CLIENT_KEY") or None)
        self._encoder = SpanEncoder()
        self._encode_lock = threading.Lock()  # the encoder's caches; held for microseconds
        self._lock = threading.Lock()  # the connection; held for a whole post
        self._conn: http.client.HTTPConnection | None = None
        self._shutdown = False
        self._stopping = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        try:
            with self._encode_lock:
                body = self._encoder.encode(spans)
        except Exception as error:  # a span the encoder cannot read fails its batch, not the thread
            _logger.error("Failed to encode span batch: %s", error)
            return SpanExportResult.FAILURE
        return self._export_body(body)

    def encode_span(self, span: ReadableSpan) -> EncodedSpan:
        """One span encoded now, for ``export_encoded`` later (``SpanBatcher`` queues these bytes
        instead of span objects). Any thread; raises what the encoder raises."""
        with self._encode_lock:
            return self._encoder.piece(span)

    def export_encoded(self, pieces: Sequence[EncodedSpan]) -> SpanExportResult:
        """Send spans encoded by ``encode_span``, as one request."""
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        return self._export_body(SpanEncoder.assemble(pieces))

    def _export_body(self, body: bytes) -> SpanExportResult:
        if 0 < self.max_request_bytes < len(body):
            _logger.warning(
                "Dropping span batch: serialized size %d bytes exceeds max_request_bytes %d bytes.",
                len(body),
                self.max_request_bytes,
            )
            return SpanExportResult.FAILURE
        with self._lock:
            return SpanExportResult.SUCCESS if self._send(self._compress(body)) else SpanExportResult.FAILURE

    def _compress(self, body: bytes) -> bytes:
        if self.compression == "gzip":
            return gzip.compress(body, compresslevel=6, mtime=0)
        if self.compression == "deflate":
            return zlib.compress(body)
        return body

    def _send(self, body: bytes) -> bool:
        """POST with the SDK's retry policy; True when the server took it."""
        deadline = time.monotonic() + self.timeout
        for attempt in range(MAX_ATTEMPTS):
            backoff = 2**attempt * random.uniform(1 - JITTER, 1 + JITTER)
            try:
                status, reason, after = self._post(body, deadline)
            except (OSError, http.client.HTTPException) as error:  # refused, reset, timed out: retried
                status, reason, after = None, str(error) or type(error).__name__, None
            if status is not None and 200 <= status < 400:
                return True
            if status is not None and status not in RETRYABLE:
                _logger.error("Failed to export spans batch code: %s, reason: %s", status, reason)
                return False
            if after is not None:
                backoff = after
            if attempt + 1 == MAX_ATTEMPTS or backoff > deadline - time.monotonic() or self._stopping.is_set():
                _logger.error("Failed to export spans batch due to timeout, max retries or shutdown.")
                return False
            _logger.warning(
                "Transient error %s encountered while exporting spans batch, retrying in %.2fs.", reason, backoff
            )
            if self._stopping.wait(backoff):
                _logger.warning("Shutdown in progress, aborting retry.")
                return False
        return False

    def _post(self, body: bytes, deadline: float) -> tuple[int, str, float | None]:
        """One POST: (status, reason, Retry-After seconds). After a connection error it is tried once
        more at once, on a new connection (the server may have closed a kept-alive one), as the SDK does."""
        try:
            return self._post_once(body, deadline)
        except (OSError, http.client.HTTPException):
            if deadline - time.monotonic() <= 0:
                raise
        return self._post_once(body, deadline)

    def _post_once(self, body: bytes, deadline: float) -> tuple[int, str, float | None]:
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            conn = self._connection(remaining)
            conn.sock.settimeout(remaining)
            conn.request("POST", self._path, body=body, headers=self.headers)
            response = conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            self._close()
            raise
        if response.will_close:
            self._close()
        after = retry_after(response.getheader("Retry-After")) if response.status in RETRYABLE else None
        return response.status, response.reason, after

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            conn: http.client.HTTPConnection
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._context)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no wait for a delayed ACK
            self._conn = conn
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def shutdown(self) -> None:
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring call")
            return
        self._shutdown = True
        self._stopping.set()  # wakes an export waiting to retry
        with self._lock:
            self._close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered here: each ``export`` call sends its batch before it returns."""
        return True
