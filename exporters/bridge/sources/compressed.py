"""Compressed files: logrotate's ``compress`` leaves ``app.log.1.gz`` (``.bz2``, ``.xz``, ``.zst`` with
``compresscmd``), and a glob or a rotated name may name one. Read as bytes it is lines of binary.

A file is known by its first bytes (its magic number), never by its name: gzip ``1f 8b`` (RFC 1952,
2.3.1), bzip2 ``BZh`` and a block size digit, xz ``fd 37 7a 58 5a 00``, zstd ``28 b5 2f fd`` (RFC
8878, 3.1.1), and, to be refused, lz4 frames ``04 22 4d 18`` and zip ``PK 03 04``. A compressed
file is written once (a rotation compresses a file that is no longer written to), so it is read
whole: decompressed into an unlinked temporary file (in ``TMPDIR``) whose descriptor then stands for
the file, and every offset, fingerprint and saved position of it is one of the decompressed bytes.
Its first lines are then the first lines of the plain file it was compressed from, which the tracker
already knows how to match. The collector's filelog (``compression: auto``) does the same for gzip:
known by ``1f 8b`` (``pkg/stanza/fileconsumer/internal/compression/gzip.go``), fingerprinted over
decompressed bytes, and a plain file's offset carried to its ``.gz`` as decompressed bytes to skip
(``internal/reader/factory.go``, ``decompressedBytesToSkip``).

Once read and acknowledged to its end, the copy is replaced by a sparse one of the same size that
keeps only its first and last bytes (:func:`sparse_copy`), so the generations a rotation keeps do not
each hold a whole copy while their names last.

gzip, bzip2 and xz come with Python; zstd needs the ``zstandard`` wheel. A stream that ends early or
does not decode raises :class:`CompressionError`, and nothing of it is shipped.
"""

from __future__ import annotations

import bz2
import gzip
import importlib
import importlib.util
import lzma
import os
import tempfile
import zlib
from collections.abc import Iterator
from typing import IO, Any, Literal

Compression = Literal["auto", "none"]

MAGIC = {
    b"\x1f\x8b": "gzip",
    **{b"BZh" + digit.encode(): "bzip2" for digit in "123456789"},  # its block size follows: 100k to 900k
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\x04\x22\x4d\x18": "lz4",
    b"PK\x03\x04": "zip",
}
LONGEST = max(map(len, MAGIC))
CHUNK = 1 << 20


class CompressionError(Exception):
    """A compressed file that cannot be read as lines: ``kind`` for the problem metric, and why."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind


def sniff(head: bytes) -> str | None:
    """The compression ``head`` (a file's first bytes) starts with; None for a plain file, "" while it
    is too short to tell (a prefix of a magic number)."""
    for magic, kind in MAGIC.items():
        if head.startswith(magic):
            return kind
    if len(head) < LONGEST and any(magic.startswith(head) for magic in MAGIC):
        return ""
    return None


def _zstandard() -> Any:
    """The ``zstandard`` module, where its wheel is installed (it is optional)."""
    return importlib.import_module("zstandard") if importlib.util.find_spec("zstandard") else None


def _zstd_chunks(zstandard: Any, raw: IO[bytes]) -> Iterator[bytes]:
    """zstd frames one after another (``zstd`` appends a frame per input); a frame left unfinished
    at the end is an ``EOFError``, as the stdlib's readers raise (``stream_reader`` just stops)."""
    context = zstandard.ZstdDecompressor()
    frame, open_frame = context.decompressobj(), False
    while data := raw.read(CHUNK):
        while data:
            yield frame.decompress(data)
            open_frame = not frame.eof
            if open_frame:
                break
            data = frame.unused_data
            frame = context.decompressobj()
    if open_frame:
        raise EOFError("the stream ended inside a zstd frame")


def _chunks(kind: str, raw: IO[bytes]) -> Iterator[bytes]:
    """``raw`` decompressed as ``kind``, in chunks."""
    if kind == "zstd":
        yield from _zstd_chunks(_zstandard(), raw)
        return
    stream: gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile
    if kind == "gzip":
        stream = gzip.GzipFile(fileobj=raw, mode="rb")
    else:
        stream = bz2.BZ2File(raw) if kind == "bzip2" else lzma.LZMAFile(raw)  # noqa: SIM115 -- closed just below
    with stream:
        while chunk := stream.read(CHUNK):
            yield chunk


def _supported(kind: str) -> None:
    """Refuse, with :class:`CompressionError`, what cannot be read here."""
    if kind in ("gzip", "bzip2", "xz") or (kind == "zstd" and _zstandard() is not None):
        return
    hint = "; install the zstandard wheel to read it" if kind == "zstd" else ""
    raise CompressionError("compression_unsupported", f"is {kind}-compressed, which the bridge cannot read{hint}")


def decompress(fd: int, kind: str) -> int:
    """A new descriptor, on an unlinked temporary file holding ``fd``'s content decompressed."""
    _supported(kind)
    zstandard = _zstandard()
    data_errors = (EOFError, zlib.error, lzma.LZMAError, *((zstandard.ZstdError,) if zstandard else ()))
    out = tempfile.TemporaryFile()  # noqa: SIM115 -- closed below; only a duplicate of its descriptor is kept
    try:
        with os.fdopen(os.dup(fd), "rb") as raw:  # its own buffer; the offset is shared, and unused
            raw.seek(0)
            for chunk in _chunks(kind, raw):
                out.write(chunk)
        out.flush()
        return os.dup(out.fileno())
    except (*data_errors, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:  # the disk, not the data: said, tried again
            raise
        why = f"is {kind}-compressed but cut short or corrupt ({exc})"
        raise CompressionError("compression_corrupt", why) from None
    finally:
        out.close()


def sparse_copy(fd: int, size: int, keep: list[tuple[int, int]]) -> int:
    """A new descriptor, on an unlinked sparse temporary file of ``size`` bytes that holds only the
    ``keep`` ranges (offset, length) of ``fd``: what is still looked at in a decompressed copy read
    to its end, in a few blocks of ``TMPDIR`` instead of the whole copy."""
    with tempfile.TemporaryFile() as out:
        for offset, length in keep:
            os.pwrite(out.fileno(), os.pread(fd, length, offset), offset)
        os.ftruncate(out.fileno(), size)
        return os.dup(out.fileno())
