"""A test double of Loki 3.7's OTLP log ingestion (POST /otlp/v1/logs), strict where Loki is strict.

Read from Loki v3.7's source, not its docs:
- pkg/loghttp/push/otlp_config.go: resource attributes on the default list
  (``distributor.otlp.default_resource_attributes_as_index_labels``) become index labels; every other
  resource, scope and log attribute becomes structured metadata. Names are normalised the way
  Prometheus normalises OTLP names (otlptranslator.LabelNamer: ``service.name`` -> ``service_name``).
- pkg/loghttp/push/otlp.go: without service.name the stream gets ``service_name="unknown_service"``;
  severity_number and severity_text, trace_id, span_id and flags go into structured metadata; the
  severity is never a label unless ``severity_text_as_label`` is set.
- pkg/distributor/field_detection.go and pkg/util/constants/levels.go: with discover_log_levels (on
  by default) and structured metadata allowed, ``detected_level`` is added as structured metadata,
  from a level-named label or structured-metadata entry (DefaultAllowedLevelFields), else from
  severity_number, normalised to trace, debug, info, warn, error, critical or fatal.
- pkg/loghttp/push/push.go (POST /loki/api/v1/push, JSON): the stream's labels are taken as sent;
  structured metadata is the third element of a value. Level detection then runs the same way, and
  falls back to the line's own JSON level field.
- pkg/validation/validate.go and pkg/ingester/stream.go: an entry older than
  now - reject_old_samples_max_age, newer than now + creation_grace_period, or older than its
  stream's newest entry - max_chunk_age / 2 is refused with its reason; structured metadata is refused
  while allow_structured_metadata is off.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import timedelta

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

DEFAULT_INDEX_LABELS = (
    "service.name",
    "service.namespace",
    "service.instance.id",
    "deployment.environment",
    "deployment.environment.name",
    "cloud.region",
    "cloud.availability_zone",
    "k8s.cluster.name",
    "k8s.namespace.name",
    "k8s.pod.name",
    "k8s.container.name",
    "container.name",
    "k8s.replicaset.name",
    "k8s.deployment.name",
    "k8s.statefulset.name",
    "k8s.daemonset.name",
    "k8s.cronjob.name",
    "k8s.job.name",
)
# validation.DefaultAllowedLevelFields: names of a label or structured-metadata entry read as the level.
LEVEL_FIELDS = (
    "level", "LEVEL", "Level", "log.level", "severity", "SEVERITY", "Severity", "SeverityText",
    "lvl", "LVL", "Lvl", "severity_text", "Severity_Text", "SEVERITY_TEXT",
)  # fmt: skip
LEVELS = {
    "trace": "trace", "trc": "trace", "debug": "debug", "dbg": "debug", "info": "info", "inf": "info",
    "information": "info", "warn": "warn", "wrn": "warn", "warning": "warn", "error": "error",
    "err": "error", "critical": "critical", "fatal": "fatal",
}  # fmt: skip
UNKNOWN_SERVICE = "unknown_service"


@dataclass(frozen=True)
class Limits:
    """The limits_config and ingester settings the mapping and the rejections depend on."""

    allow_structured_metadata: bool = True
    discover_log_levels: bool = True
    reject_old_samples: bool = True
    reject_old_samples_max_age: timedelta = timedelta(days=7)
    creation_grace_period: timedelta = timedelta(minutes=10)
    max_chunk_age: timedelta = timedelta(hours=2)


@dataclass(frozen=True)
class Entry:
    timestamp_ns: int
    line: str
    structured_metadata: dict[str, str]


@dataclass
class Result:
    accepted: dict[tuple[tuple[str, str], ...], list[Entry]] = field(default_factory=dict)
    rejected: list[tuple[Entry, str]] = field(default_factory=list)


def label_name(name: str) -> str:
    """otlptranslator.LabelNamer for the names we use: every character outside [a-zA-Z0-9_] becomes _."""
    out = re.sub(r"[^a-zA-Z0-9_]", "_", name)
    return f"key_{out}" if out[0].isdigit() else out


def as_string(value: AnyValue) -> str:
    """pcommon.Value.AsString for the scalar kinds."""
    kind = value.WhichOneof("value")
    raw = getattr(value, kind) if kind else ""
    if kind == "bool_value":
        return "true" if raw else "false"
    if kind == "bytes_value":
        return raw.hex()
    return str(raw)


def normalise_level(value: str) -> str:
    return LEVELS.get(value.lower(), value)


def level_from_severity_number(number: int) -> str:
    """field_detection.go detectLogLevelFromLogEntry: the OTel severity-number ranges."""
    for ceiling, level in ((0, "unknown"), (4, "trace"), (8, "debug"), (12, "info"), (16, "warn"), (20, "error")):
        if number <= ceiling:
            return level
    return "fatal" if number <= 24 else "critical"


class LokiOTLP:
    """Ingests ExportLogsServiceRequests the way Loki 3.7 does and remembers each stream's newest entry."""

    def __init__(self, limits: Limits | None = None, index_labels: tuple[str, ...] = DEFAULT_INDEX_LABELS):
        self.limits = limits or Limits()
        self.index_labels = index_labels
        self.newest: dict[tuple[tuple[str, str], ...], int] = {}

    def push(self, request: ExportLogsServiceRequest, now_ns: int) -> Result:
        result = Result()
        for resource_logs in request.resource_logs:
            labels: dict[str, str] = {}
            resource_metadata: dict[str, str] = {}
            for kv in resource_logs.resource.attributes:
                target = labels if kv.key in self.index_labels else resource_metadata
                target[label_name(kv.key)] = as_string(kv.value)
            labels.setdefault("service_name", UNKNOWN_SERVICE)
            stream = tuple(sorted(labels.items()))
            for scope_logs in resource_logs.scope_logs:
                scope_metadata = {label_name(kv.key): as_string(kv.value) for kv in scope_logs.scope.attributes}
                for record in scope_logs.log_records:
                    entry = self._entry(record, {**resource_metadata, **scope_metadata}, labels)
                    self._admit(result, stream, entry, now_ns)
        return result

    def _admit(self, result: Result, stream: tuple, entry: Entry, now_ns: int) -> None:
        """Store ``entry`` in its stream, or record why Loki refuses it."""
        reason = self._refusal(stream, entry, now_ns)
        if reason:
            result.rejected.append((entry, reason))
            return
        result.accepted.setdefault(stream, []).append(entry)
        self.newest[stream] = max(self.newest.get(stream, 0), entry.timestamp_ns)

    def push_json(self, payload: dict, now_ns: int) -> Result:
        """A /loki/api/v1/push JSON body: {"streams": [{"stream": {...}, "values": [[ns, line, {...}]]}]}."""
        result = Result()
        for pushed in payload["streams"]:
            labels = dict(pushed["stream"])
            stream = tuple(sorted(labels.items()))
            for value in pushed["values"]:
                timestamp, line, *rest = value
                metadata = dict(rest[0]) if rest else {}
                if self.limits.allow_structured_metadata and self.limits.discover_log_levels:
                    metadata.setdefault("detected_level", self._level(labels, metadata, line))
                self._admit(result, stream, Entry(int(timestamp), line, metadata), now_ns)
        return result

    def _entry(self, record, inherited: dict[str, str], labels: dict[str, str]) -> Entry:
        metadata = {**inherited, **{label_name(kv.key): as_string(kv.value) for kv in record.attributes}}
        if record.severity_number:
            metadata["severity_number"] = str(record.severity_number)
        if record.severity_text:
            metadata["severity_text"] = record.severity_text
        if record.flags:
            metadata["flags"] = str(record.flags)
        if record.trace_id:
            metadata["trace_id"] = record.trace_id.hex()
        if record.span_id:
            metadata["span_id"] = record.span_id.hex()
        timestamp = record.time_unix_nano or record.observed_time_unix_nano
        if self.limits.allow_structured_metadata and self.limits.discover_log_levels:
            metadata.setdefault("detected_level", self._level(labels, metadata, as_string(record.body)))
        return Entry(timestamp, as_string(record.body), metadata)

    @staticmethod
    def _level(labels: dict[str, str], metadata: dict[str, str], line: str) -> str:
        for source in (labels, metadata):
            for name in LEVEL_FIELDS:
                if name in source:
                    return normalise_level(source[name])
        if "severity_number" in metadata:
            return level_from_severity_number(int(metadata["severity_number"]))
        try:
            fields = json.loads(line)
        except ValueError:
            return "unknown"
        found = [fields[name] for name in LEVEL_FIELDS if isinstance(fields, dict) and name in fields]
        return normalise_level(str(found[0])) if found else "unknown"

    def _refusal(self, stream: tuple[tuple[str, str], ...], entry: Entry, now_ns: int) -> str:
        limits = self.limits
        if entry.structured_metadata and not limits.allow_structured_metadata:
            return "disallowed_structured_metadata"
        if limits.reject_old_samples and entry.timestamp_ns < now_ns - ns(limits.reject_old_samples_max_age):
            return "greater_than_max_sample_age"
        if entry.timestamp_ns > now_ns + ns(limits.creation_grace_period):
            return "too_far_in_future"
        newest = self.newest.get(stream)
        if newest is not None and entry.timestamp_ns < newest - ns(limits.max_chunk_age) // 2:
            return "entry too far behind"
        return ""


def ns(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1_000_000_000)
