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
  by default) and structured metadata allowed, ``detected_level`` is added as structured metadata.
  One sent with the entry wins, normalised (``normalizeLogLevel``: a word it knows becomes trace,
  debug, info, warn, error, critical or fatal; any other word is kept as written); else a
  level-named label, then structured-metadata entry (DefaultAllowedLevelFields, ``severity_text``
  among them), normalised the same way; else severity_number by OTel's ranges; else the line: its
  JSON (string values, two levels deep) or logfmt level field, else a level word in its text.
- pkg/loghttp/push/push.go (POST /loki/api/v1/push, JSON): the stream's labels are taken as sent;
  structured metadata is the third element of a value. Level detection then runs the same way.
- pkg/distributor/validator.go ValidateEntry, in this order: an entry older than
  now - reject_old_samples_max_age, newer than now + creation_grace_period, longer than
  max_line_size, or with structured metadata while allow_structured_metadata is off is refused by the
  distributor; pkg/ingester/stream.go: one older than its stream's newest entry - max_chunk_age / 2 by
  the ingester. The texts are pkg/validation/validate.go's and pkg/chunkenc/interface.go's.
- Duplicates: an entry with the same timestamp, line and structured metadata as one its stream
  already holds is dropped without an error (pkg/chunkenc/unordered.go unorderedHeadBlock.Append,
  pkg/ingester/stream.go validateEntries' lastLine check); a copy differing in any of them is
  stored. Over OTLP, an entry with both time_unix_nano and observed_time_unix_nano set keeps the
  latter as ``observed_timestamp`` structured metadata (pkg/loghttp/push/otlp.go), so the copies of
  a line must carry the same observed time to be dropped.
- The answer (``LokiServer``): pkg/util/errors.go GroupedErrors joins the distributor's distinct
  texts with "; " in a Go map's random order, each as "N errors like: ..." when there is more than
  one text or it occurred more than once; pkg/ingester/stream.go errorForFailedEntries lists at most
  max_returned_stream_errors of one stream's refusals and counts them all, and pkg/ingester/instance.go
  Push returns only the last stream's error (a later stream that succeeded clears it), which then
  replaces the distributor's answer (pkg/distributor/distributor.go). The push API writes it with
  http.Error (text/plain, a newline after it); /otlp as a google.rpc.Status (pkg/loghttp/push/push.go
  OTLPError).

The refusal texts, their grouping and order, the ingester's list cut at ten and its answer replacing
the distributor's, and both content types are as a real Loki 3.7.6 (built from its source, run with
compose/loki/loki.yaml on loopback) answered the bridge's own requests.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.rpc.status_pb2 import Status
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
# detectLevelFromLogLine's words, in its order, and its word boundaries
LEVEL_WORDS = (
    ("trace", "trace"), ("debug", "debug"), ("fatal", "fatal"), ("critical", "critical"), ("error", "error"),
    ("err", "error"), ("warning", "warn"), ("warn", "warn"), ("info", "info"),
)  # fmt: skip
LEFT_BOUNDARY = ' \t\n[({"='
RIGHT_BOUNDARY = ' \t\n[](){}:,!"='
JSON_MAX_DEPTH = 2  # validation.log-level-from-json-max-depth
LOGFMT_PAIR = re.compile(r'([^\s=]+)=("(?:[^"\\]|\\.)*"|\S*)')
UNKNOWN_SERVICE = "unknown_service"
# OTLPError sets its Content-Type after WriteHeader, too late for Go's net/http: Loki 3.7.6 sent the
# sniffed type of the Status's bytes
OTLP_ERROR_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class Limits:
    """The limits_config and ingester settings the mapping and the rejections depend on."""

    allow_structured_metadata: bool = True
    discover_log_levels: bool = True
    reject_old_samples: bool = True
    reject_old_samples_max_age: timedelta = timedelta(days=7)
    creation_grace_period: timedelta = timedelta(minutes=10)
    max_chunk_age: timedelta = timedelta(hours=2)
    max_line_size: int = 256 * 1024
    max_returned_stream_errors: int = 10


@dataclass(frozen=True)
class Entry:
    timestamp_ns: int
    line: str
    structured_metadata: dict[str, str]


Stream = tuple[tuple[str, str], ...]


@dataclass
class Result:
    accepted: dict[Stream, list[Entry]] = field(default_factory=dict)
    duplicates: list[tuple[Stream, Entry]] = field(default_factory=list)  # dropped: their stream held them
    rejected: list[tuple[Entry, str]] = field(default_factory=list)  # (entry, Loki's reason label)
    validation_errors: list[str] = field(default_factory=list)  # the distributor's texts, in entry order
    # per stream that reached the ingester, in request order: (entries it got, what it refused)
    ingested: dict[Stream, tuple[int, list[tuple[Entry, str]]]] = field(default_factory=dict)

    def answer(self, limits: Limits, order: random.Random) -> tuple[int, str]:
        """Loki's status and error text for this push (204 and "" when nothing was refused)."""
        last = list(self.ingested.items())[-1:]
        if last and last[0][1][1]:  # instance.Push: only the last stream's error survives
            stream, (total, failed) = last[0]
            return 400, ingester_error(stream, total, failed, limits.max_returned_stream_errors)
        if self.validation_errors:
            return 400, grouped(self.validation_errors, order)
        return 204, ""


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
    """normalizeLogLevel: Loki's word for a word it knows (any case), else the value as it is."""
    return LEVELS.get(value.lower(), value)


def level_from_severity_number(text: str) -> str:
    """detectLogLevelFromLogEntry: the OTel severity-number ranges; text Atoi refuses reads as info."""
    if not re.fullmatch(r"[+-]?\d+", text):
        return "info"
    number = int(text)
    if number == 0:
        return "unknown"
    for ceiling, level in ((4, "trace"), (8, "debug"), (12, "info"), (16, "warn"), (20, "error"), (24, "fatal")):
        if number <= ceiling:
            return level
    return "unknown"


def json_level(fields: dict, depth: int = 0) -> str | None:
    """getLevelUsingJSONParser: the first string value under a level-named key, in document order,
    looking into nested objects down to log_level_from_json_max_depth (2)."""
    if depth >= JSON_MAX_DEPTH:
        return None
    for key, value in fields.items():
        if isinstance(value, str) and key in LEVEL_FIELDS:
            return value
        if isinstance(value, dict):
            found = json_level(value, depth + 1)
            if found is not None:
                return found
    return None


def logfmt_level(line: str) -> str | None:
    """getValueUsingLogfmtParser: the value of the first of LEVEL_FIELDS (case-insensitive keys)."""
    found: dict[int, str] = {}
    for key, value in LOGFMT_PAIR.findall(line):
        rank = next((i for i, name in enumerate(LEVEL_FIELDS) if name.lower() == key.lower()), None)
        if rank is not None and rank not in found:
            found[rank] = value[1:-1] if value.startswith('"') else value
    return found[min(found)] if found else None


def level_in_text(line: str) -> str:
    """detectLevelFromLogLine: the level word found first in the line, as a whole word."""
    lower, best, where = line.lower(), "unknown", len(line)
    for word, level in LEVEL_WORDS:
        for match in re.finditer(re.escape(word), lower):
            at, end = match.start(), match.end()
            left = at == 0 or lower[at - 1] in LEFT_BOUNDARY
            right = end >= len(lower) or lower[end] in RIGHT_BOUNDARY
            if left and right:
                if at < where:
                    where, best = at, level
                break
    return best


def line_level(line: str) -> str:
    """extractLogLevelFromLogLine: the line's JSON or logfmt level field, else a word in its text."""
    stripped = line.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        try:
            fields = json.loads(line)
        except ValueError:
            fields = None
        value = json_level(fields) if isinstance(fields, dict) else None
    elif "=" in line:
        value = logfmt_level(line)
    else:
        return level_in_text(line)
    known = LEVELS.get((value or "").lower())
    return known or level_in_text(line)


class LokiOTLP:
    """Ingests ExportLogsServiceRequests the way Loki 3.7 does and remembers each stream's newest entry."""

    def __init__(self, limits: Limits | None = None, index_labels: tuple[str, ...] = DEFAULT_INDEX_LABELS):
        self.limits = limits or Limits()
        self.index_labels = index_labels
        self.newest: dict[tuple[tuple[str, str], ...], int] = {}
        self.held: set[tuple[Stream, int, str, frozenset[tuple[str, str]]]] = set()  # what duplicates are

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

    def _admit(self, result: Result, stream: Stream, entry: Entry, now_ns: int) -> None:
        """Store ``entry`` in its stream, or record why Loki refuses it, and in which words."""
        refusal = self._validation(stream, entry, now_ns)
        if refusal:
            reason, text = refusal
            result.rejected.append((entry, reason))
            result.validation_errors.append(text)
            return
        total, failed = result.ingested.get(stream, (0, []))
        result.ingested[stream] = (total + 1, failed)
        newest = self.newest.get(stream)
        cutoff = None if newest is None else newest - ns(self.limits.max_chunk_age) // 2
        if cutoff is not None and entry.timestamp_ns < cutoff:
            result.rejected.append((entry, "entry too far behind"))
            failed.append((entry, too_far_behind(entry.timestamp_ns, cutoff)))
            return
        key = (stream, entry.timestamp_ns, entry.line, frozenset(entry.structured_metadata.items()))
        if key in self.held:
            result.duplicates.append((stream, entry))
            return
        self.held.add(key)
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
                    metadata["detected_level"] = self._level(labels, metadata, line)
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
        if record.time_unix_nano and record.observed_time_unix_nano:
            metadata["observed_timestamp"] = str(record.observed_time_unix_nano)
        if self.limits.allow_structured_metadata and self.limits.discover_log_levels:
            metadata["detected_level"] = self._level(labels, metadata, as_string(record.body))
        return Entry(timestamp, as_string(record.body), metadata)

    @staticmethod
    def _level(labels: dict[str, str], metadata: dict[str, str], line: str) -> str:
        """extractLogLevel, in its order."""
        if "detected_level" in metadata:
            return normalise_level(metadata["detected_level"])
        for source in (labels, metadata):
            for name in LEVEL_FIELDS:
                if name in source:
                    return normalise_level(source[name])
        if metadata.get("severity_number"):
            return level_from_severity_number(metadata["severity_number"])
        return line_level(line)

    def _validation(self, stream: Stream, entry: Entry, now_ns: int) -> tuple[str, str] | None:
        """validator.go ValidateEntry: (the discard reason, the error text), or None."""
        limits, labels, ts = self.limits, stream_text(stream), entry.timestamp_ns
        oldest = now_ns - ns(limits.reject_old_samples_max_age)
        if limits.reject_old_samples and ts < oldest:
            text = (
                f"entry for stream '{labels}' has timestamp too old: {rfc3339(ts)}, "
                f"oldest acceptable timestamp is: {rfc3339(oldest)}"
            )
            return "greater_than_max_sample_age", text
        if ts > now_ns + ns(limits.creation_grace_period):
            return "too_far_in_future", f"entry for stream '{labels}' has timestamp too new: {rfc3339(ts)}"
        size = len(entry.line.encode())
        if limits.max_line_size and size > limits.max_line_size:
            text = (
                f"max entry size '{limits.max_line_size}' bytes exceeded for stream '{labels}' "
                f"while adding an entry with length '{size}' bytes"
            )
            return "line_too_long", text
        if entry.structured_metadata and not limits.allow_structured_metadata:
            text = (
                f"stream '{labels}' includes structured metadata, but this feature is disallowed. Please see "
                "`limits_config.allow_structured_metadata` or contact your Loki administrator to enable it"
            )
            return "disallowed_structured_metadata", text
        return None


def too_far_behind(ts: int, cutoff: int) -> str:
    """chunkenc.ErrTooFarBehind."""
    return f"entry too far behind, entry timestamp is: {rfc3339(ts)}, oldest acceptable timestamp is: {rfc3339(cutoff)}"


def stream_text(stream: Stream) -> str:
    """labels.Labels.String(): {a="b", c="d"}, sorted."""
    return "{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in stream) + "}"


def rfc3339(ns_: int) -> str:
    """Go's time.RFC3339 in UTC (Loki's timeFormat): to the second."""
    return datetime.fromtimestamp(ns_ // 1_000_000_000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def go_time(ns_: int) -> str:
    """Go's time.Time.String() in UTC: 2006-01-02 15:04:05.999999999 +0000 UTC."""
    seconds, fraction = divmod(ns_, 1_000_000_000)
    text = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    digits = f"{fraction:09d}".rstrip("0")
    return f"{text}{'.' + digits if digits else ''} +0000 UTC"


def grouped(texts: list[str], order: random.Random) -> str:
    """util.GroupedErrors.Error(): distinct texts counted, in a map's random order."""
    counts = list(Counter(texts).items())
    order.shuffle(counts)
    prefix = len(counts) > 1
    return "; ".join(f"{n} errors like: {text}" if prefix or n > 1 else text for text, n in counts)


def ingester_error(stream: Stream, total: int, failed: list[tuple[Entry, str]], limit: int) -> str:
    """stream.go errorForFailedEntries (tenant 'fake': auth_enabled off)."""
    listed = failed[:limit] if limit > 0 else failed
    lines = "".join(f"entry with timestamp {go_time(e.timestamp_ns)} ignored, reason: '{why}',\n" for e, why in listed)
    return f"{lines}user 'fake', total ignored: {len(failed)} out of {total} for stream: {stream_text(stream)}"


def ns(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1_000_000_000)


Answer = tuple[int, str, bytes]  # status, Content-Type, body


def serve(answer: Callable[[str, bytes], Answer]) -> tuple[ThreadingHTTPServer, str]:
    """An HTTP server on loopback that answers each POST (path, body without gzip) with ``answer``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            status, content_type, reply = answer(self.path, body)
            self.send_response(status)
            if reply:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class LokiServer:
    """Loki's push API and /otlp/v1/logs on loopback, storing and refusing as ``LokiOTLP`` does and
    answering in Loki's words (see the module's docstring); ``seed`` fixes the groups' order."""

    def __init__(self, limits: Limits | None = None, seed: int | None = None) -> None:
        self.loki = LokiOTLP(limits)
        self.order = random.Random(seed)
        self.stored: list[tuple[Stream, Entry]] = []
        self.duplicates: list[tuple[Stream, Entry]] = []  # pushed again, dropped as Loki drops them
        self.answers: list[tuple[int, str]] = []
        self.lock = threading.Lock()
        self.server, self.url = serve(self.answer)

    def answer(self, path: str, body: bytes) -> Answer:
        otlp = path == "/otlp/v1/logs"
        status, text = self.push(body, otlp)
        if status == 204:
            return 204, "", b""
        if otlp:  # push.OTLPError: a Status with code 0
            return status, OTLP_ERROR_TYPE, Status(message=text).SerializeToString()
        return status, "text/plain; charset=utf-8", (text + "\n").encode()  # http.Error: a newline after

    def push(self, body: bytes, otlp: bool) -> tuple[int, str]:
        with self.lock:
            now = time.time_ns()
            if otlp:
                result = self.loki.push(ExportLogsServiceRequest.FromString(body), now)
            else:
                result = self.loki.push_json(json.loads(body), now)
            self.stored += [(stream, entry) for stream, entries in result.accepted.items() for entry in entries]
            self.duplicates += result.duplicates
            answer = result.answer(self.loki.limits, self.order)
            self.answers.append(answer)
            return answer

    def lines(self) -> list[str]:
        return [entry.line for _, entry in self.stored]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
