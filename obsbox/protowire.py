"""Protobuf wire-format primitives, for encoders that write OTLP bytes directly.

Building protobuf message objects in Python and serializing them costs tens of microseconds per
record; joining pre-encoded byte fragments costs a few. The log bridge's OTLP sink and the span
exporter build their requests from these. Tags are passed already shifted: ``field number << 3 |
wire type``, one byte for field numbers up to 15.
"""

from __future__ import annotations

_SMALL = [bytes([i]) for i in range(128)]


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 127:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINTS = [_encode_varint(i) for i in range(1 << 14)]  # every one- and two-byte varint, precomputed


def varint(value: int) -> bytes:
    """An unsigned varint (``value`` >= 0; a negative int64 is passed as its two's complement)."""
    return _VARINTS[value] if value < 16384 else _encode_varint(value)


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): tag byte, length, payload."""
    size = len(payload)
    return _SMALL[tag] + (_VARINTS[size] if size < 16384 else _encode_varint(size)) + payload


def string_kv(key: str, value: str) -> bytes:
    """A KeyValue with a string AnyValue, not yet wrapped as a field."""
    return field(0x0A, key.encode()) + field(0x12, field(0x0A, value.encode()))


def bool_kv(key: str, value: bool) -> bytes:
    return field(0x0A, key.encode()) + field(0x12, b"\x10" + _SMALL[int(value)])
