"""``loki``: the Loki push API (``/loki/api/v1/push``), JSON, gzip, batched.

Streams are labelled as Loki's own OTLP ingestion labels them, so lines pushed here and lines sent
over OTLP land in the same streams and answer the same queries: ``service_name`` and the resource
attributes on Loki's default index list (``deployment_environment``, ``k8s_namespace_name``, ...),
from the file (Kubernetes), the ``resource`` config and ``OTEL_RESOURCE_ATTRIBUTES`` as the ``otlp``
sink takes them, plus static ``labels`` from the config; never the level, never an ID. Structured
metadata (Loki 3, schema v13) carries what OTLP ingestion stores there: ``trace_id``, ``span_id``,
``severity_text`` (the level as written), ``severity_number``, ``log_file_path``,
``log_file_name``, the record's attributes and the other resource attributes; and
``detected_level``, the level in Loki's words (``logfields.LEVELS``), which Loki keeps rather than
reading ``severity_text`` as it is (pino's ``50`` would stay ``50``). ``level`` and ``filename`` can
still be made labels with ``dynamic_labels``. The line sent is the original (redacted) line, so
``| json`` in LogQL sees the fields exactly as the service wrote them.

Why not python-logging-loki: it is a ``logging.Handler`` that sends one blocking request per
record, with no batching, no structured metadata, no gzip and no retry policy. The bridge needs all
of those, so it speaks the push API directly (``obsbox.exporters.logging`` still offers
python-logging-loki's queue handler for applications).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import orjson

from obsbox import conventions, logfields
from obsbox.config import FieldError
from obsbox.exporters.bridge.record import Record
from obsbox.exporters.bridge.retry import RetryPolicy
from obsbox.exporters.bridge.sinks.http import auth_headers, check_endpoint, compress, env, env_pairs
from obsbox.exporters.bridge.sinks.network import NetworkSink

PUSH_PATH = "/loki/api/v1/push"
INDEXED = frozenset(conventions.LOKI_INDEX_ATTRIBUTES)
DynamicLabel = Literal["service_name", "level", "filename"]
DYNAMIC: tuple[DynamicLabel, ...] = ("service_name",)
# what a stream's labels depend on: service, level, file path, the file's resource attributes
LabelKey = tuple[str, str, str, tuple[tuple[str, str], ...]]


@dataclass
class LokiConfig:
    url: str
    labels: dict[str, str] = field(default_factory=dict)
    dynamic_labels: list[DynamicLabel] = field(default_factory=lambda: list(DYNAMIC))
    service_name: str | None = None
    resource: dict[str, str] = field(default_factory=dict)
    structured_metadata: list[str] = field(default_factory=list)
    tenant_id: str | None = None
    username: str | None = None
    password: str | None = None
    bearer_token: str | None = None
    compression: Literal["gzip", "none"] = "gzip"
    max_request_bytes: int = 1024 * 1024
    timeout: float = 10.0
    retry: RetryPolicy | None = None  # None: settings.retry
    dead_letter: Path | None = None

    def __post_init__(self) -> None:
        check_endpoint(self.url, self.timeout, "url", "http://localhost:3100")
        query = urlsplit(self.url).query
        if query:  # Loki reads no query on a push (v3.7.6 pkg/loghttp/push, pkg/distributor/http.go)
            raise FieldError(
                "url",
                f"Loki's push API takes no query, so {query!r} would do nothing: the sink's options (such as "
                "tenant_id) are its own keys, and static labels go under labels: in a --config file",
            )
        bad = [k for k in self.labels if not k.replace("_", "a").isalnum() or k[0].isdigit()]
        if bad:
            raise ValueError(f"invalid Loki label names {bad}: use letters, digits and '_'")


class LokiSink(NetworkSink):
    type = "loki"
    url_option = "url"  # --to loki:URL
    Config = LokiConfig

    def __init__(self, config: LokiConfig, context) -> None:
        super().__init__(config, context)
        self.headers = {"Content-Type": "application/json"}
        tenant = config.tenant_id or env("LOKI_TENANT_ID")
        if tenant:
            self.headers["X-Scope-OrgID"] = tenant
        userinfo = self.endpoint.userinfo or (None, None)
        self.headers.update(
            auth_headers(
                config.username or userinfo[0] or env("LOKI_USERNAME"),
                config.password or userinfo[1] or env("LOKI_PASSWORD"),
                config.bearer_token or env("LOKI_BEARER_TOKEN"),
            )
        )
        self.dynamic = set(config.dynamic_labels)
        # the resource the otlp sink would send (OtlpHttpSink): OTEL_RESOURCE_ATTRIBUTES, then the config
        resource = {**env_pairs("OTEL_RESOURCE_ATTRIBUTES"), **config.resource}
        self.default_service = config.service_name or resource.pop("service.name", None) or env("OTEL_SERVICE_NAME")
        self.resource = tuple(resource.items())
        self.resource_metadata = {k.replace(".", "_"): v for k, v in self.resource if k not in INDEXED}
        self.label_sets: dict[LabelKey, tuple[tuple[str, str], ...]] = {}

    def target_url(self) -> str:
        url = self.config.url.rstrip("/")
        return url if url.endswith(PUSH_PATH) else url + PUSH_PATH

    def labels(self, rec: Record) -> tuple[tuple[str, str], ...]:
        fields = rec.fields
        resource = rec.origin.resource
        service = self.default_service or rec.service() or "unknown_service"
        level = logfields.severity(fields).level or logfields.UNKNOWN
        key: LabelKey = (service, level, rec.origin.path, resource)
        labels = self.label_sets.get(key)
        if labels is None:  # few distinct sets: build and sort each once
            if len(self.label_sets) > 10_000:
                self.label_sets.clear()
            labels = self.label_sets[key] = self._label_set(*key)
        return labels

    def _label_set(
        self, service: str, level: str, path: str, resource: tuple[tuple[str, str], ...]
    ) -> tuple[tuple[str, str], ...]:
        """Static labels, the resource attributes that Loki's OTLP ingestion indexes (the file's, then
        the configured ones, which win as in the otlp sink's resource), and the dynamic ones."""
        labels = dict(self.config.labels)
        labels.update((name.replace(".", "_"), value) for name, value in resource + self.resource if name in INDEXED)
        dynamic = {"service_name": service, "level": level, "filename": path}
        labels.update((name, value) for name, value in dynamic.items() if name in self.dynamic)
        return tuple(sorted(labels.items()))

    def metadata(self, rec: Record) -> dict[str, str]:
        meta = {"trace_id": rec.trace_id or "", "span_id": rec.span_id or ""}
        number, text, level = logfields.severity(rec.fields)  # as the otlp sink sends them
        if text:
            meta["severity_text"] = text
        if number:
            meta["severity_number"] = str(number)
        if level:  # kept by Loki (field_detection.go extractLogLevel): no level leaves Loki to read the line
            meta["detected_level"] = level
        path = rec.origin.path
        meta["log_file_path"], meta["log_file_name"] = path, os.path.basename(path)
        if rec.parse_error:
            meta["obsbox_parse_error"] = rec.parse_error
        if rec.truncated:
            meta["obsbox_truncated"] = "true"
        if rec.attributes:
            meta.update((key.replace(".", "_"), value) for key, value in rec.attributes.items())
        for key, value in rec.origin.resource:  # what Loki's OTLP ingestion would not index either
            if key not in INDEXED:
                meta[key.replace(".", "_")] = value
        if self.resource_metadata:
            meta.update(self.resource_metadata)
        fields = rec.fields
        if fields:
            for key in self.config.structured_metadata:
                found = fields.get(key)
                if found is not None:
                    meta[key.replace(".", "_")] = found if isinstance(found, str) else logfields.json_text(found)
        return meta

    def requests(self, records: Sequence[Record]) -> Iterator[tuple[bytes, dict[str, str], Sequence[Record]]]:
        now = time.time_ns()
        streams: dict[tuple[tuple[str, str], ...], list[list]] = {}
        chunk: list[Record] = []
        size = 0
        for rec in records:
            ts = rec.time_ns() or rec.read_ns() or now  # read_ns: the same on a replay, so Loki drops the copy
            streams.setdefault(self.labels(rec), []).append([str(ts), rec.text(), self.metadata(rec)])
            chunk.append(rec)
            size += len(rec.raw) + 200
            if size >= self.config.max_request_bytes:
                yield *self._request(streams), chunk
                streams, chunk, size = {}, [], 0
        if chunk:
            yield *self._request(streams), chunk

    def _request(self, streams: dict[tuple[tuple[str, str], ...], list[list]]) -> tuple[bytes, dict[str, str]]:
        payload = {"streams": [{"stream": dict(labels), "values": values} for labels, values in streams.items()]}
        headers = dict(self.headers)
        return compress(orjson.dumps(payload), self.config.compression, headers), headers
