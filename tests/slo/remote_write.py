"""Native histograms into a real Prometheus by remote write, encoded by hand (no client library has them).

A ``prometheus.WriteRequest`` (prometheus/prompb remote.proto and types.proto: TimeSeries with labels
and ``Histogram`` points of schema 0, where bucket i holds (2^(i-1), 2^i]), snappy-compressed as a
single uncompressed literal block, which every snappy decoder accepts. Debian's Prometheus 2.42 stores
them with ``--enable-feature=native-histograms --web.enable-remote-write-receiver``.
"""

from __future__ import annotations

import itertools
import struct
import urllib.request
from collections.abc import Mapping, Sequence


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _uint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _sint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint((value << 1) ^ (value >> 63))


def _double(number: int, value: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", value)


def histogram(at_ms: int, counts: Mapping[int, int], total: float) -> bytes:
    """One native histogram point of schema 0: ``counts`` by bucket index, contiguous, and their sum."""
    first = min(counts)
    ordered = [counts[i] for i in range(first, first + len(counts))]
    deltas = [ordered[0]] + [b - a for a, b in itertools.pairwise(ordered)]
    return (
        _uint(1, sum(ordered))  # count_int
        + _double(3, total)  # sum
        + _sint(4, 0)  # schema
        + _double(5, 1e-128)  # zero_threshold
        + _uint(6, 0)  # zero_count_int
        + _field(11, _sint(1, first) + _uint(2, len(ordered)))  # positive_spans: offset, length
        + _field(12, b"".join(_varint((d << 1) ^ (d >> 63)) for d in deltas))  # positive_deltas
        + _uint(15, at_ms)  # timestamp
    )


def _snappy(data: bytes) -> bytes:
    """Snappy's block format with literals only: the length, then chunks of at most 64 KiB."""
    out = bytearray(_varint(len(data)))
    for start in range(0, len(data), 1 << 16):
        chunk = data[start : start + (1 << 16)]
        size = len(chunk) - 1
        out += bytes([size << 2]) if size < 60 else bytes([61 << 2]) + struct.pack("<H", size)
        out += chunk
    return bytes(out)


def push(url: str, labels: Mapping[str, str], points: Sequence[bytes]) -> None:
    """Send one series of histogram points (from ``histogram``) to Prometheus' /api/v1/write."""
    pairs = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in labels.items())
    series = pairs + b"".join(_field(4, point) for point in points)
    request = urllib.request.Request(
        f"{url}/api/v1/write",
        data=_snappy(_field(1, series)),
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 204, response.status
