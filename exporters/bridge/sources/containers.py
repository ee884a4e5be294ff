"""Container runtime log files: detect their format, unwrap the application's line, join partials,
and read Kubernetes metadata from the path.

- **CRI** (containerd, CRI-O; Kubernetes' ``parseCRILog``): ``<RFC3339Nano> <stdout|stderr> <tag> <content>``,
  the tag ``P`` (partial) or ``F`` (full), optionally followed by ``:``-separated extras.
- **Docker json-file**: ``{"log": "...", "stream": "stdout", "time": "..."}``. moby's log copier
  (``daemon/logger/copier.go``, the same in 20.10 and 28) reads a stream into a 16 KiB buffer and
  logs a line that fills it without a newline as a partial of exactly 16 KiB; json-file writes a
  partial's ``log`` without the trailing newline and marks it no other way. The copier also logs
  what is left when the stream ends (the container's last line written without a newline) as a
  partial, shorter than the buffer: no entry ever continues it, so it ends its line. The invalid
  UTF-8 of a character cut at a split is written as U+FFFD, which only lengthens an entry: a split
  entry never decodes to less than 16 KiB.

Partials are joined per stream, in the file reader, until the entry that completes the line, so a
saved position never falls inside a half-joined line: the reader's ``emitted`` offset stays at the
first partial of any join still open (see :class:`Joiner`). The application's line becomes the
record; the stream and the runtime's timestamp go along as attributes (``log.iostream``,
``obsbox.runtime_time``), and the timestamp is the record's time when the line has none.
"""

from __future__ import annotations

import os
import re
from typing import Literal

import orjson

from obsbox.exporters.bridge import logfmt
from obsbox.exporters.bridge.record import Origin, Record

Format = Literal["json", "cri", "docker"]
STREAM = "log.iostream"
RUNTIME_TIME = "obsbox.runtime_time"
DOCKER_SPLIT = 16 * 1024  # moby's copier: defaultBufSize, the size of every entry that splits a line

_CRI = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) (?:stdout|stderr) [PF](?::\S*)? ?")
_POD_LOG = re.compile(
    r"/var/log/pods/(?P<namespace>[^_/]+)_(?P<pod>[^_/]+)_(?P<uid>[^_/]+)/(?P<container>[^/]+)/(?P<restart>\d+)\.log"
)
_CONTAINER_LOG = re.compile(
    r"/var/log/containers/(?P<pod>[^_/]+)_(?P<namespace>[^_/]+)_(?P<container>.+)-(?P<id>[0-9a-f]{64})\.log"
)


def detect_format(path: str, first_line: bytes) -> Format:
    """The format of a file, from the start of its first line (the fingerprint's head, which may be
    cut short of a long line) and its path, for kubelet's folders."""
    line = first_line.lstrip(b"\xef\xbb\xbf")
    if _CRI.match(line):
        return "cri"
    if line.startswith(b'{"log":"'):  # Docker writes its fields in this order; the line may exceed the head
        return "docker"
    if in_kubelet_folders(path):
        return "cri"  # kubelet's folders hold CRI files; a first line that is not CRI is reported per line
    return "json"


def logfmt_inside(fmt: Format, first_line: bytes) -> bool:
    """Are the application's lines logfmt, judged from the first (inside its CRI or Docker entry, where
    Loki, Tempo or Prometheus in Kubernetes write logfmt to stdout)? A file whose first line is not
    (a banner) still has its logfmt lines read as such, line by line (``parse``)."""
    line = first_line.lstrip(b"\xef\xbb\xbf")
    if fmt == "cri":
        prefix = _CRI.match(line)
        line = line[prefix.end() :] if prefix else b""
    elif fmt == "docker":
        line = line[len(b'{"log":"') :]  # the JSON string's first key needs no unescaping to be seen
    return logfmt.sniff(line)


def rotated_by_a_runtime(path: str) -> bool:
    """Is ``path`` a log file a container runtime rotates itself: kubelet's (``/var/log/pods``,
    ``/var/log/containers``) or Docker's json-file (``<id>-json.log``, ``.1``...)? They rename and
    compress in their own code, which does not mind a file's other hard links."""
    return in_kubelet_folders(path) or "-json.log" in os.path.basename(path)


def in_kubelet_folders(path: str) -> bool:
    """Is ``path`` in kubelet's log folders (``/var/log/pods``, or its links in ``/var/log/containers``)?"""
    return "/var/log/pods/" in path or "/var/log/containers/" in path


def kubernetes_resource(path: str) -> tuple[tuple[str, str], ...]:
    """OTel semantic-convention resource attributes that kubelet's log path names (none elsewhere)."""
    match = _POD_LOG.search(path)
    if match:
        return (
            ("k8s.namespace.name", match["namespace"]),
            ("k8s.pod.name", match["pod"]),
            ("k8s.pod.uid", match["uid"]),
            ("k8s.container.name", match["container"]),
            ("k8s.container.restart_count", match["restart"]),
            ("service.name", match["container"]),
        )
    match = _CONTAINER_LOG.search(path)
    if match:
        return (
            ("k8s.namespace.name", match["namespace"]),
            ("k8s.pod.name", match["pod"]),
            ("k8s.container.name", match["container"]),
            ("container.id", match["id"]),
            ("service.name", match["container"]),
        )
    return ()


class Join:
    """An application line being put together from partial entries of one stream."""

    __slots__ = ("carried", "chunks", "offset", "origin", "size", "time", "truncated")

    def __init__(self, offset: int, time: str) -> None:
        self.offset, self.time = offset, time
        self.origin: Origin | None = None  # the older generation's, for a join carried across a rotation
        self.carried = False
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False


class Joiner:
    """Unwraps CRI or Docker entries into application lines, joining partials per stream.

    ``feed`` takes one physical line and its offset; a complete application line is appended to
    ``out`` with the offset of its first entry, so its derived IDs do not depend on how the runtime
    split it. Threading: owned by one file reader."""

    def __init__(self, fmt: Format, max_line_bytes: int) -> None:
        self.format = fmt
        self.max_line = max_line_bytes
        self.open: dict[str, Join] = {}
        self.malformed = 0  # entries that are not in the file's format: passed through as they are

    def pending_start(self) -> int | None:
        """Offset of the first entry of the oldest join still open (0 for one carried from the
        generation before: this file's position stays before its continuation)."""
        return min((0 if join.carried else join.offset for join in self.open.values()), default=None)

    def hand_over(self, successor: Joiner, origin: Origin) -> None:
        """The file was rotated with joins open (Docker cuts a long line between 16 KiB pieces, and
        may rotate between two): ``successor``, the next generation's joiner, completes them. They
        keep this file's origin and offset, so their IDs do not depend on where the cut fell."""
        for stream, join in self.open.items():
            join.origin, join.carried = join.origin or origin, True  # from where the line began
            successor.open.setdefault(stream, join)
        self.open.clear()

    def carrying(self) -> bool:
        """A join handed over from the generation before is still open."""
        return any(join.carried for join in self.open.values())

    def feed(self, line: bytes, offset: int, origin: Origin, out: list[Record]) -> None:
        entry = self._cri(line) if self.format == "cri" else self._docker(line)
        if entry is None:
            self.malformed += 1
            out.append(Record(line[: self.max_line], origin, offset, truncated=len(line) > self.max_line))
            return
        time, stream, partial, content = entry
        join = self.open.get(stream)
        if join is None:
            join = Join(offset, time)
            if not partial:  # the common case: a whole line in one entry
                join.chunks.append(content)
                self._emit(join, stream, origin, out)
                return
            self.open[stream] = join
        room = self.max_line - join.size
        if len(content) > room:
            content, join.truncated = content[: max(room, 0)], True
        if content:
            join.chunks.append(content)
            join.size += len(content)
        if not partial:
            del self.open[stream]
            self._emit(join, stream, origin, out)

    def flush(self, origin: Origin, out: list[Record]) -> None:
        """Emit every open join as it stands (the writer moved on, or a bounded read ended)."""
        for stream, join in sorted(self.open.items(), key=lambda item: item[1].offset):
            self._emit(join, stream, origin, out)
        self.open.clear()

    def reset(self) -> None:
        self.open.clear()

    def _emit(self, join: Join, stream: str, origin: Origin, out: list[Record]) -> None:
        content = b"".join(join.chunks)
        if self.format == "docker" and content.endswith(b"\r"):
            content = content[:-1]  # a CRLF, in one entry or split between two ("...\r", then "\n")
        truncated = join.truncated or len(content) > self.max_line
        record = Record(content[: self.max_line], join.origin or origin, join.offset, truncated=truncated)
        record.attributes = {STREAM: stream, RUNTIME_TIME: join.time}
        out.append(record)

    @staticmethod
    def _cri(line: bytes) -> tuple[str, str, bool, bytes] | None:
        """Kubernetes' ``parseCRILog``: time, stream, tag (``P`` partial, else full), content."""
        parts = line.split(b" ", 3)
        if len(parts) < 3 or parts[1] not in (b"stdout", b"stderr") or not parts[0][:1].isdigit():
            return None
        tag = parts[2].split(b":", 1)[0]
        if tag not in (b"P", b"F"):
            return None
        return parts[0].decode("ascii", "replace"), parts[1].decode(), tag == b"P", parts[3] if len(parts) == 4 else b""

    @staticmethod
    def _docker(line: bytes) -> tuple[str, str, bool, bytes] | None:
        """Docker's json-file entry; ``log`` without its newline is a partial when it is a 16 KiB split
        (see the module docstring); a shorter one is the end of a stream, which ends its line."""
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(entry, dict) or not isinstance(entry.get("log"), str):
            return None
        text: str = entry["log"]
        ended = text.endswith("\n")
        if ended:
            text = text[:-1]  # a "\r" before it is taken off the whole line, which a split may end in
        content = text.encode("utf-8", "surrogatepass")
        stream = entry.get("stream")
        time = entry.get("time")
        return (
            time if isinstance(time, str) else "",
            stream if isinstance(stream, str) else "stdout",
            not ended and len(content) >= DOCKER_SPLIT,
            content,
        )
