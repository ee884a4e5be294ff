"""Protobuf wire encoding of OTLP logs, written directly as bytes.

Building one ``LogRecord`` message object per line and serializing the batch cost about half of
the bridge's CPU. Encoding by hand costs a few byte joins per line: everything constant for a file
(its attributes) or a batch (the observed time) is encoded once. The layout follows
opentelemetry/proto/logs/v1/logs.proto; the tests decode every request with the official
``opentelemetry-proto`` messages, so a mistake here fails them.
"""

from __future__ import annotations

from obsbox.protowire import _VARINTS, _encode_varint, field, string_kv, varint

# LogRecord field tags (field number << 3 | wire type)
TIME = b"\x09"  # 1 time_unix_nano, fixed64
SEVERITY_NUMBER = b"\x10"  # 2 severity_number, varint
SEVERITY_TEXT = 0x1A  # 3 severity_text, string
BODY = 0x2A  # 5 body, AnyValue
ATTRIBUTE = 0x32  # 6 attributes, KeyValue
TRACE_ID = b"\x4a\x10"  # 9 trace_id, 16 bytes
SPAN_ID = b"\x52\x08"  # 10 span_id, 8 bytes
OBSERVED = b"\x59"  # 11 observed_time_unix_nano, fixed64
LOG_RECORD = 0x12  # ScopeLogs.log_records (2)
DETECTED_LEVEL = "detected_level"  # Loki's name (pkg/util/constants/levels.go LevelLabel)


def log_record(  # noqa: PLR0917 - called once per line, where keyword arguments cost more
    time_ns: int,
    observed: bytes,
    severity: bytes,
    body: bytes,
    attributes: bytes,
    trace_id: str | None,
    span_id: str | None,
) -> bytes:
    """One LogRecord, wrapped as a ScopeLogs.log_records field. Positional: it runs once per line.

    ``observed`` is the pre-encoded observed-time field, ``severity`` the pre-encoded number and
    text fields and the ``detected_level`` attribute (``severity_fields``), ``attributes`` the
    pre-encoded attribute fields, ``body`` the UTF-8 line.
    """
    size = len(body)
    inner = b"\x0a" + (_VARINTS[size] if size < 16384 else _encode_varint(size)) + body
    size = len(inner)
    record = b"".join(
        (
            TIME + time_ns.to_bytes(8, "little") if time_ns else b"",
            severity,
            b"\x2a",  # BODY
            _VARINTS[size] if size < 16384 else _encode_varint(size),
            inner,
            attributes,
            TRACE_ID + bytes.fromhex(trace_id) if trace_id else b"",
            SPAN_ID + bytes.fromhex(span_id) if span_id else b"",
            observed,
        )
    )
    size = len(record)
    return b"\x12" + (_VARINTS[size] if size < 16384 else _encode_varint(size)) + record  # LOG_RECORD


def attribute(kv: bytes) -> bytes:
    """A LogRecord.attributes field holding ``kv``, a KeyValue (``protowire.string_kv``/``bool_kv``)."""
    return field(ATTRIBUTE, kv)


def severity_fields(number: int, text: str, level: str) -> bytes:
    """severity_number, severity_text and the attribute ``detected_level`` (the level in Loki's words,
    which Loki keeps: without it, it reads severity_text as written). A repeated field's items may
    sit anywhere in a message (the protobuf encoding guide), so this attribute leads the others."""
    return (
        (SEVERITY_NUMBER + varint(number) if number else b"")
        + (field(SEVERITY_TEXT, text.encode()) if text else b"")
        + (attribute(string_kv(DETECTED_LEVEL, level)) if level else b"")
    )


def observed_field(now_ns: int) -> bytes:
    return OBSERVED + now_ns.to_bytes(8, "little")


def scope(name: str, version: str) -> bytes:
    """InstrumentationScope as the ScopeLogs.scope field."""
    return field(0x0A, field(0x0A, name.encode()) + field(0x12, version.encode()))


def resource_logs(resource_attributes: list[bytes], scope_field: bytes, records: list[bytes]) -> list[bytes]:
    """A ResourceLogs as an ExportLogsServiceRequest.resource_logs field, in parts to be joined once
    with the request's others: a request is a megabyte, and every copy of it, into memory the
    process has to fault in, cost more than encoding the resource's Python."""
    resource = field(0x0A, b"".join(field(0x0A, kv) for kv in resource_attributes))
    scope_size = len(scope_field) + sum(map(len, records))
    scope_logs = b"\x12" + varint(scope_size)
    size = len(resource) + len(scope_logs) + scope_size
    return [b"\x0a" + varint(size) + resource + scope_logs + scope_field, *records]
