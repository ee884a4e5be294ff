"""File fingerprints: what a file's first bytes say about which content it holds.

Two prints, for two jobs:

- the **first line** (at most ``limit`` bytes), :class:`Fingerprint`: complete once the first
  newline (or ``limit`` bytes) has been written. Its digest is the file half of every line's
  derived identity (digest + byte offset), so two runs over the same content derive the same trace
  and span IDs however much of the file existed when each run first saw it.
- the **head** (the first ``limit`` bytes, fewer while the file is shorter), :func:`head_print`:
  what a saved position is checked against on resume. A first line alone is often a startup banner
  that a new file on a reused inode repeats; the head also covers the lines after it. As the
  collector's ``fileconsumer/internal/fingerprint`` (``StartsWith``) does, a position saves how many
  bytes its print covers, and the file is judged on that many bytes: a file that grew since still
  matches, a shorter one or one with other bytes does not.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

DEFAULT_LIMIT = 1024


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16, person=b"obsbox-fp").digest()


@dataclass(frozen=True, slots=True)
class Fingerprint:
    head: bytes
    complete: bool

    @property
    def digest(self) -> bytes:
        return digest(self.head)

    @property
    def hex(self) -> str:
        return self.digest.hex()


def read_fingerprint(fd: int, limit: int = DEFAULT_LIMIT) -> Fingerprint:
    head = os.pread(fd, limit, 0)
    newline = head.find(b"\n")
    if newline >= 0:
        return Fingerprint(head[: newline + 1], True)
    return Fingerprint(head, len(head) >= limit)


def head_print(fd: int, covers: int) -> str | None:
    """The hex digest of the file's first ``covers`` bytes; None when it holds fewer (it cannot be
    the file that print was taken of)."""
    head = os.pread(fd, covers, 0)
    return digest(head).hex() if len(head) == covers else None
