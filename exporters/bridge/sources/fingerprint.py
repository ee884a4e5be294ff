"""File fingerprints: the first line of a file (at most ``limit`` bytes) identifies its content.

A fingerprint is *complete* once the first newline (or ``limit`` bytes) has been written; only a
complete fingerprint is trusted to say "this is the same content" (a rename, a copy, a restart).
The digest is also the file half of every line's derived identity (digest + byte offset), so two
runs over the same content derive the same trace and span IDs.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

DEFAULT_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class Fingerprint:
    head: bytes
    complete: bool

    @property
    def digest(self) -> bytes:
        return hashlib.blake2b(self.head, digest_size=16, person=b"obsbox-fp").digest()

    @property
    def hex(self) -> str:
        return self.digest.hex()


def read_fingerprint(fd: int, limit: int = DEFAULT_LIMIT) -> Fingerprint:
    head = os.pread(fd, limit, 0)
    newline = head.find(b"\n")
    if newline >= 0:
        return Fingerprint(head[: newline + 1], True)
    return Fingerprint(head, len(head) >= limit)
