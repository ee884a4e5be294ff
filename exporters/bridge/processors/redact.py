"""``redact``: replace secrets with ``[REDACTED]`` before anything leaves the host. On by default.

Built-in rules: secret-named JSON fields (``"password": "..."``, ``"authorization": "..."``),
Bearer tokens, JWTs, common API-key shapes (``sk-…``, ``ghp_…``, ``github_pat_…``, ``AKIA…``) and
passwords in URLs (``scheme://user:password@host``). Rules run on the line's bytes, so lines that are
not JSON are redacted too; a redacted JSON line is parsed again so later stages see clean fields.

Speed: a batch is scanned once, as one buffer, by Hyperscan (SIMD, all rules at once) where it is
installed; only lines with a candidate match go through Python's ``re``. Without Hyperscan the
same rules run through ``re`` over the buffer, correct but several times slower.
Threading: pipeline thread only.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from obsbox.exporters.bridge.component import Processor
from obsbox.exporters.bridge.record import Record

hyperscan: Any
try:  # x86_64 wheels; elsewhere the ``re`` path serves
    import hyperscan
except ImportError:  # pragma: no cover - depends on the platform
    hyperscan = None

MASK = b"[REDACTED]"

SECRET_KEYS = (
    r"password|passwd|pwd|secret|client_secret|api_?key|x-api-key|authorization|"
    r"proxy-authorization|access_token|refresh_token|id_token|private_key|cookie|set-cookie"
)

BUILTIN: dict[str, tuple[bytes, bytes]] = {
    "secret_field": (rb'("(?i:' + SECRET_KEYS.encode() + rb')"\s*:\s*")(?:[^"\\]|\\.)+"', rb"\1" + MASK + b'"'),
    "bearer": (rb"(\b[Bb]earer\s+)[A-Za-z0-9\-._~+/]{8,}=*", rb"\1" + MASK),
    "jwt": (rb"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", MASK),
    "api_key": (
        rb"\b(?:sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}"
        rb"|github_pat_[A-Za-z0-9_]{40,}|(?:AKIA|ASIA)[0-9A-Z]{16})\b",
        MASK,
    ),
    "url_password": (rb"(\b[a-zA-Z][a-zA-Z0-9+.\-]*:(?:\\?/){2}[^\s:/@\"\\]+:)[^\s@/\"\\]+@", rb"\1" + MASK + b"@"),
}


@dataclass
class RuleConfig:
    name: str
    pattern: str
    replacement: str = MASK.decode()

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern.encode())
        except re.error as exc:
            raise ValueError(f"rule {self.name!r}: invalid regular expression: {exc}") from None


@dataclass
class RedactConfig:
    builtin: bool = True
    disable: list[str] = field(default_factory=list)
    rules: list[RuleConfig] = field(default_factory=list)

    def __post_init__(self) -> None:
        unknown = [name for name in self.disable if name not in BUILTIN]
        if unknown:
            raise ValueError(f"cannot disable unknown rules {unknown} (built-in: {', '.join(BUILTIN)})")


class RedactProcessor(Processor):
    type = "redact"
    Config = RedactConfig

    def __init__(self, config: RedactConfig, context) -> None:
        super().__init__(config, context)
        rules = {name: spec for name, spec in BUILTIN.items() if config.builtin and name not in config.disable}
        rules.update({r.name: (r.pattern.encode(), r.replacement.encode()) for r in config.rules})
        self.rules = [(name, re.compile(pattern), repl) for name, (pattern, repl) in rules.items()]
        self.scanner = _HyperscanPrefilter([p for _, (p, _) in rules.items()]) if hyperscan and rules else None
        self.combined = re.compile(b"|".join(b"(?:" + p + b")" for _, (p, _) in rules.items())) if rules else None

    def candidates(self, records: list[Record]) -> list[int]:
        """Indexes of the records in which some rule may match."""
        if self.combined is None:
            return []
        blob = b"\n".join(rec.raw for rec in records)
        ends = self.scanner.scan(blob) if self.scanner else [m.end() for m in self.combined.finditer(blob)]
        if not ends:
            return []
        starts = list(itertools.accumulate((len(rec.raw) + 1 for rec in records), initial=0))
        return sorted({bisect.bisect_right(starts, end - 1) - 1 for end in ends})

    def process(self, records: list[Record]) -> list[Record]:
        counts: Counter[str] = Counter()
        for index in self.candidates(records):
            rec = records[index]
            raw, out = rec.raw, rec.out
            for name, regex, repl in self.rules:
                raw, hits = regex.subn(repl, raw)
                if hits:
                    counts[name] += hits
                    if out is not None:
                        out = regex.sub(repl, out)
            if raw is not rec.raw:
                rec.raw, rec.out = raw, out
                if rec.fields is not None:
                    rec.fields = orjson.loads(raw)
        for name, count in counts.items():
            self.context.metrics.redactions.labels(name).inc(count)
        return records


class _HyperscanPrefilter:
    """All rules compiled into one Hyperscan database; reports where candidate matches end."""

    def __init__(self, patterns: list[bytes]) -> None:
        self.db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        flags = [hyperscan.HS_FLAG_PREFILTER] * len(patterns)
        self.db.compile(expressions=patterns, ids=list(range(len(patterns))), elements=len(patterns), flags=flags)
        self.scratch = hyperscan.Scratch(self.db)

    def scan(self, blob: bytes) -> list[int]:
        ends: list[int] = []

        def on_match(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            ends.append(end)

        self.db.scan(blob, match_event_handler=on_match, scratch=self.scratch)
        return ends
