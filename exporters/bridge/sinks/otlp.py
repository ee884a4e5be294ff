"""``otlp``: OTLP/HTTP protobuf logs (``/v1/logs``).

The IDs go in the LogRecord's native ``trace_id``/``span_id`` fields; the body is the original
(redacted) line; time and severity are read from the line; the resource carries ``service.name``.
Retries follow the OTLP spec: 429, 502, 503 and 504 are retried (honouring ``Retry-After``), any
other failure is permanent and goes to the dead-letter file. Partial success is counted and logged.
Requests are encoded straight to protobuf wire bytes (see ``wire``); replies are decoded with the
official ``opentelemetry-proto`` messages.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from obsbox import __version__, logfields, protowire
from obsbox.exporters.bridge import logfmt
from obsbox.exporters.bridge.deferred import complete
from obsbox.exporters.bridge.record import Origin, Record, context_service, time_ns
from obsbox.exporters.bridge.retry import RetryPolicy
from obsbox.exporters.bridge.sinks import wire
from obsbox.exporters.bridge.sinks.http import Response, check_endpoint, compress, env_pairs
from obsbox.exporters.bridge.sinks.network import NetworkSink

log = logging.getLogger(__name__)
ResourceKey = tuple[str, tuple[tuple[str, str], ...]]  # (service.name, the file's resource attributes)
Request = tuple[bytes, dict[str, str], int, int]  # (body, headers, first record, end)
LOGS_PATH = "/v1/logs"
PROTOBUF = re.compile(r"application/(?:x-protobuf|protobuf|octet-stream)")
SCOPE_NAME = "obsbox.bridge"


@dataclass
class OtlpConfig:
    """OTLP/HTTP transport settings, shared by the ``otlp`` (logs) and ``spans`` (traces) sinks."""

    endpoint: str
    headers: dict[str, str] = field(default_factory=dict)
    compression: Literal["none", "gzip"] = "none"
    service_name: str | None = None
    resource: dict[str, str] = field(default_factory=dict)
    max_request_bytes: int = 4 * 1024 * 1024
    timeout: float = 10.0
    retry: RetryPolicy | None = None  # None: settings.retry
    dead_letter: Path | None = None

    def __post_init__(self) -> None:
        check_endpoint(self.endpoint, self.timeout, "endpoint", "http://localhost:4318")


def untimed(rec: Record, observed: bytes) -> bytes:
    """The observed-time field of a line without a time of its own: when it was first read
    (``Record.read_ns``), else ``observed`` (the batch's time). Its time_unix_nano stays 0, which
    Loki's OTLP ingestion replaces with the observed time and then stores no ``observed_timestamp``
    (pkg/loghttp/push/otlp.go at v3.7.6, timestampFromLogRecord): the entry gets the timestamp the
    Loki sink pushes for that line, and a replay after a crash the same one, which Loki drops."""
    read = rec.read_ns()
    return wire.observed_field(read) if read else observed


def _parsed(records: Sequence[Record]) -> list[Record]:
    """Give back what a worker process did to records it encoded: the IDs, redaction, parse errors
    (``complete``) and the parsed fields, which stayed there."""
    records = complete(records)
    for rec in records:
        if rec.fields is None and rec.parse_error is None and not rec.truncated:
            try:
                fields = orjson.loads(rec.raw)
                rec.fields = fields if type(fields) is dict else None
            except orjson.JSONDecodeError:  # a logfmt record (parse gave it no error)
                with contextlib.suppress(logfmt.LogfmtError):
                    rec.fields = logfmt.fields_of(rec.raw, rec.origin.logfmt)
    return records


def well_known_keys(fields: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """The keys of a line's time, level and service: the first of each spelling it has, in
    ``logfields``' priority order."""
    time_key, level_key, service_key = (
        next((key for key in keys if key in fields), None)
        for keys in (logfields.TIME_KEYS, logfields.LEVEL_KEYS, logfields.SERVICE_KEYS)
    )
    return time_key, level_key, service_key


class Encoding:
    """One batch's export requests, encoded a chunk of records at a time (``component.Encoding``):
    the requests cut so far, and the open one's items grouped by resource."""

    def __init__(self, sink: OtlpHttpSink) -> None:
        self.sink = sink
        self.now = time.time_ns()
        self.out: list[Request] = []
        self.open: dict[ResourceKey, list[Any]] = {}
        self.start = 0  # the open request's first record
        self.size = 0  # its lines' bytes, plus an allowance per record for the fields around them
        self.count = 0  # records added so far

    def add(self, records: list[Record]) -> None:
        self.sink.add(self, records)

    def cut(self) -> None:
        """Close the open request at the records added so far (nothing to send when it has no items)."""
        if self.open:
            self.out.append((*self.sink.encoded(self.sink.body(self.open)), self.start, self.count))
        self.open, self.start, self.size = {}, self.count, 0

    def payload(self) -> list[Request]:
        self.cut()
        return self.out


class OtlpHttpSink(NetworkSink):
    """OTLP/HTTP protobuf transport: endpoint path, headers and resource from config and OTEL_* env."""

    retryable = frozenset({429, 502, 503, 504})
    signal = "logs"  # or "traces": the URL path and the per-signal header variable

    def __init__(self, config: OtlpConfig, context) -> None:
        super().__init__(config, context)
        self.headers = {"Content-Type": "application/x-protobuf", "User-Agent": f"obsbox-bridge/{__version__}"}
        self.headers.update(env_pairs("OTEL_EXPORTER_OTLP_HEADERS"))
        self.headers.update(env_pairs(f"OTEL_EXPORTER_OTLP_{self.signal.upper()}_HEADERS"))
        self.headers.update(config.headers)
        self.resource_attrs = {**env_pairs("OTEL_RESOURCE_ATTRIBUTES"), **config.resource}
        self.prepared: list[Request] | None = None
        self.default_service = (
            config.service_name or self.resource_attrs.get("service.name") or os.environ.get("OTEL_SERVICE_NAME")
        )

    def target_url(self) -> str:
        path = f"/v1/{self.signal}"
        url = self.config.endpoint.rstrip("/")
        return url if url.endswith(path) else url + path

    def resource_attributes(self, key: ResourceKey) -> dict[str, str]:
        """The resource of a group: the configured attributes, the file's own (Kubernetes), service.name."""
        service, from_file = key
        return {**dict(from_file), **self.resource_attrs, "service.name": service}

    def service_of(self, rec: Record) -> str:
        """The configured service, else the record's own (see ``Record.service``), else unknown."""
        return self.default_service or rec.service() or "unknown_service"

    def encoded(self, body: bytes) -> tuple[bytes, dict[str, str]]:
        headers = dict(self.headers)
        return compress(body, self.config.compression, headers), headers

    def items(self, rec: Record, now: int) -> list[Any]:
        """What one record becomes (encoded LogRecords, Span messages); may be nothing."""
        raise NotImplementedError

    def body(self, by_service: dict[ResourceKey, list[Any]]) -> bytes:
        """The serialized export request for items grouped by resource."""
        raise NotImplementedError

    def encoding(self) -> Encoding:
        """A batch's requests, to be encoded a chunk of records at a time (see ``Encoding``)."""
        return Encoding(self)

    def encode(self, records: list[Record]) -> list[Request]:
        """The batch's requests: (body, headers, first record, end) each, at most ``max_request_bytes``
        of lines per request. Pure: a worker process runs it (see ``make_encoder``)."""
        encoding = self.encoding()
        encoding.add(records)
        return encoding.payload()

    def add(self, encoding: Encoding, records: list[Record]) -> None:
        """Encode ``records`` into ``encoding``: what each becomes (``items``), grouped by resource."""
        limit, now = self.config.max_request_bytes, encoding.now
        for rec in records:
            items = self.items(rec, now)
            if items:
                encoding.open.setdefault((self.service_of(rec), rec.origin.resource), []).extend(items)
            encoding.size += len(rec.raw) + 120
            encoding.count += 1
            if encoding.size >= limit:
                encoding.cut()

    @classmethod
    def make_encoder(cls, config: OtlpConfig, context) -> Callable[[], Encoding]:
        """For worker processes: requests are encoded (and compressed) there, and sent from here."""
        return cls(config, context).encoding

    def requests(self, records: Sequence[Record]) -> Iterator[tuple[bytes, dict[str, str], Sequence[Record]]]:
        prepared, self.prepared = self.prepared, None
        for body, headers, start, end in prepared if prepared is not None else self.encode(complete(records)):
            yield body, headers, records[start:end]

    def export_encoded(self, payload: list[Request], records: Sequence[Record]) -> Any:
        """Send requests a worker encoded from ``records`` (see ``encode``), as ``export`` would."""
        self.prepared = payload
        try:
            return self.export(records)
        finally:
            self.prepared = None

    def refuse(
        self, chunk: Sequence[Record], message: str | None, reason: str, status: int | None, expected: int | None = None
    ) -> None:
        chunk = _parsed(chunk)  # telling which lines a message names reads their times
        super().refuse(chunk, message, reason, status, expected)

    def answer_text(self, response: Response) -> str:
        """OTLP/HTTP answers a failure with a protobuf ``google.rpc.Status``; its ``message`` is what
        was said (Loki's ``push.OTLPError``). A body that is not one is read as text."""
        # protobuf's messages only here, on a failure: a worker process encodes requests without them
        from google.protobuf.message import DecodeError  # noqa: PLC0415
        from google.rpc.status_pb2 import Status  # noqa: PLC0415

        if response.body and PROTOBUF.search(response.headers.get("content-type", "")):
            with contextlib.suppress(DecodeError):
                return Status.FromString(response.body).message
        return super().answer_text(response)

    def rejected(self, rejected: int, message: str, records: Sequence[Record], status: int) -> None:
        """Partial success: the receiver took the request but refused ``rejected`` items. Which ones,
        OTLP does not say; unless ``message`` names exactly that many (Loki's wording), every record
        of the request goes to the dead-letter file, marked as possibly refused."""
        if not rejected:
            return
        reason = f"partial success: {rejected} of {len(records)} rejected: {message}"
        self.refuse(records, message or reason, reason, status, expected=rejected)


class OtlpSink(OtlpHttpSink):
    type = "otlp"
    url_option = "endpoint"  # --to otlp:ENDPOINT
    Config = OtlpConfig

    def __init__(self, config: OtlpConfig, context) -> None:
        super().__init__(config, context)
        self.file_attrs: dict[str, bytes] = {}
        self.severities: dict[logfields.Severity, bytes] = {}
        self.scope = wire.scope(SCOPE_NAME, __version__)
        # key shape → the keys of its time, level and service
        self.shapes: dict[tuple[str, ...], tuple[str | None, str | None, str | None]] = {}
        self.levels: dict[str, bytes] = {}  # a level's text → its encoded severity fields and detected_level

    def _attributes(self, rec: Record) -> bytes:
        attrs = self.file_attrs.get(rec.origin.path) or self.file_attributes(rec.origin)
        if rec.parse_error:
            attrs += wire.attribute(protowire.string_kv("obsbox.parse_error", rec.parse_error))
        if rec.truncated:
            attrs += wire.attribute(protowire.bool_kv("obsbox.truncated", True))
        if rec.attributes:
            attrs += b"".join(wire.attribute(protowire.string_kv(k, v)) for k, v in rec.attributes.items())
        return attrs

    def file_attributes(self, origin: Origin) -> bytes:
        """The attributes every plain line of a file carries: its path and name."""
        if len(self.file_attrs) > 10_000:
            self.file_attrs.clear()
        attrs = self.file_attrs[origin.path] = b"".join(
            wire.attribute(protowire.string_kv(key, value))
            for key, value in (
                ("log.file.path", origin.path),
                ("log.file.name", os.path.basename(origin.path)),
            )
        )
        return attrs

    def _severity(self, fields: dict[str, Any] | None) -> bytes:
        key = logfields.severity(fields)
        encoded = self.severities.get(key)
        if encoded is None:
            if len(self.severities) > 1000:
                self.severities.clear()
            encoded = self.severities[key] = wire.severity_fields(*key)
        return encoded

    def _plan(self, shape: tuple[str, ...], fields: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
        """The keys a line of this key shape uses for time, level and service (the first of each
        spelling, in ``logfields``' priority order), found once per shape: a log's lines share it."""
        if len(self.shapes) >= 4096:  # lines whose keys are data: start over
            self.shapes.clear()
        plan = self.shapes[shape] = well_known_keys(fields)
        return plan

    def _well_known(
        self, fields: dict[str, Any], attributes: dict[str, str] | None, origin: Origin
    ) -> tuple[int | None, bytes, str]:
        """(time, encoded severity, service) as ``logfields`` reads them, through the shape's plan;
        a value of another type, or null, takes ``logfields``' general path. ``attributes`` and
        ``origin``: the record's (see ``Record.time_ns`` and ``Record.service``)."""
        shape = tuple(fields)
        time_key, level_key, service_key = self.shapes.get(shape) or self._plan(shape, fields)
        value = fields[time_key] if time_key else None
        ts = logfields.iso_ns(value) if type(value) is str else None
        if ts is None and time_key:
            ts = logfields.timestamp_ns(fields)
        if ts is None:
            ts = time_ns(fields, attributes)
        level = fields[level_key] if level_key else None
        severity = self.levels.get(level) if type(level) is str else None
        if severity is None:
            severity = self._severity(fields)
            if type(level) is str and len(self.levels) < 1000:
                self.levels[level] = severity
        service = self.default_service
        if not service:
            value = fields[service_key] if service_key else None
            if type(value) is str and value:
                service = value
            elif service_key is None:  # what service_of finds when the line names none
                service = context_service(attributes, origin) or "unknown_service"
            else:  # service_of, without a configured service
                service = logfields.service(fields) or context_service(attributes, origin) or "unknown_service"
        return ts, severity, service

    def add_line(  # noqa: PLR0917 - called once per line, where keyword arguments cost more
        self,
        encoding: Encoding,
        observed: bytes,
        fields: dict[str, Any],
        raw: bytes,
        origin: Origin,
        offset: int,
        trace_id: str,
        span_id: str,
        attributes: dict[str, str] | None = None,
    ) -> None:
        """``add`` of one line that parsed as a JSON object, given without a Record: no parse error,
        truncation or lines of a multiline record (``observed``: the batch's observed-time field)."""
        ts, severity, service = self._well_known(fields, attributes, origin)
        attrs = self.file_attrs.get(origin.path) or self.file_attributes(origin)
        if attributes:
            attrs += b"".join(wire.attribute(protowire.string_kv(k, v)) for k, v in attributes.items())
        if ts:
            seen = observed
        else:  # see ``untimed``
            read = origin.read_ns(offset)
            seen = wire.observed_field(read) if read else observed
        item = wire.log_record(ts or 0, seen, severity, raw, attrs, trace_id, span_id)
        key = (service, origin.resource)
        group = encoding.open.get(key)
        if group is None:
            group = encoding.open[key] = []
        group.append(item)
        encoding.size += len(raw) + 120
        encoding.count += 1
        if encoding.size >= self.config.max_request_bytes:
            encoding.cut()

    def add(self, encoding: Encoding, records: list[Record]) -> None:
        """As ``OtlpHttpSink.add``, with the well-known fields read through per-shape plans and the
        attributes of a plain line (its file's) looked up once per file."""
        observed = wire.observed_field(encoding.now)
        log_record, limit, well_known = wire.log_record, self.config.max_request_bytes, self._well_known
        file_attrs = self.file_attrs
        by_service, size, count = encoding.open, encoding.size, encoding.count
        for rec in records:
            fields = rec.fields
            if fields is not None:
                ts, severity, service = well_known(fields, rec.attributes, rec.origin)
                body = rec.text().encode() if rec.rest else rec.raw  # parsed JSON is valid UTF-8
            else:
                ts, severity, service = rec.time_ns(), self._severity(None), self.service_of(rec)
                body = rec.text().encode()
            attrs = file_attrs.get(rec.origin.path)
            if attrs is None or rec.parse_error or rec.truncated or rec.attributes:
                attrs = self._attributes(rec)
            # no time of its own: observed when first read, the same on a replay (see ``untimed``)
            seen = observed if ts else untimed(rec, observed)
            item = log_record(ts or 0, seen, severity, body, attrs, rec.trace_id, rec.span_id)
            key = (service, rec.origin.resource)
            group = by_service.get(key)
            if group is None:
                group = by_service[key] = []
            group.append(item)
            size += len(body) + 120
            count += 1
            if size >= limit:
                encoding.size, encoding.count = size, count
                encoding.cut()
                by_service, size = encoding.open, 0
        encoding.size, encoding.count = size, count

    def body(self, by_service: dict[ResourceKey, list[bytes]]) -> bytes:
        parts: list[bytes] = []
        for key, records in by_service.items():
            parts += wire.resource_logs(self._resource_attributes(key), self.scope, records)
        return b"".join(parts)

    def _resource_attributes(self, key: ResourceKey) -> list[bytes]:
        return [protowire.string_kv(k, v) for k, v in self.resource_attributes(key).items()]

    def accepted(self, response: Response, records: Sequence[Record]) -> None:
        if response.body and "protobuf" in response.headers.get("content-type", ""):
            from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (  # noqa: PLC0415 - as answer_text's
                ExportLogsServiceResponse,
            )

            reply = ExportLogsServiceResponse.FromString(response.body)
            partial = reply.partial_success
            self.rejected(partial.rejected_log_records, partial.error_message, records, response.status)
