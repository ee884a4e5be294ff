"""``redact``: replace secrets with ``[REDACTED]`` before anything leaves the host. On by default.

Built-in rules (names for ``disable:``, and the ``rule`` label of ``obsbox_bridge_redactions_total``):

- ``secret_field``: a JSON field whose key holds a secret word (``"db_password"``, ``"secretKey"``,
  ``"X-Amz-Security-Token"``; see :func:`secret_rules.is_secret_key`), in the line and in JSON
  carried inside a string (``"body": "{\\"password\\": \\"x\\"}"``). Its value, of any type but
  ``true``, ``false`` and ``null``, becomes the string ``"[REDACTED]"``; a nested object or array
  under the key goes whole, so the line still parses.
- ``secret_pair``: the same keys in text: logfmt ``password=x``, ``pwd: x``, URL queries and
  fragments (``?api_key=x&``, ``#access_token=x``), headers (``Authorization: Basic x`` keeps
  ``Basic``), Python and Ruby reprs.
- token shapes from Gitleaks' rules (see ``secret_rules``): ``private_key``, ``jwt``, ``api_key``
  (``sk-…``, ``gh*_…``, ``github_pat_…``, ``AKIA…``), ``slack_token``, ``slack_webhook``,
  ``stripe_key``, ``google_api_key``, ``gitlab_token``, ``bearer``, and ``url_password``
  (``scheme://user:password@host``).

Rules run on the line's bytes, so lines that are not JSON are redacted too; a redacted JSON line is
parsed again so later stages see clean fields.

Speed: a batch is scanned once, as one buffer, by Hyperscan (SIMD, all rules at once, in prefilter
mode) where it is installed; only lines with a candidate match go through Python's ``re``. Without
Hyperscan the same rules run through one combined ``re`` over the buffer, correct but slower.
Threading: pipeline thread only.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from obsbox.exporters.bridge.component import Processor
from obsbox.exporters.bridge.processors import secret_rules
from obsbox.exporters.bridge.processors.secret_rules import AUTH_SCHEME, KEYWORDS, MASK, SHAPES, is_secret_key
from obsbox.exporters.bridge.record import Record

hyperscan: Any
try:  # x86_64 wheels; elsewhere the ``re`` path serves
    import hyperscan
except ImportError:  # pragma: no cover - depends on the platform
    hyperscan = None

Span = tuple[int, int, bytes]  # what to replace: start, end, replacement
Finder = Callable[["re.Match[bytes]", bool], "Span | None"]


# -- JSON values under a secret key ------------------------------------------------------------
# Each level of JSON has its quote: ``"`` in the line, ``\"`` in JSON carried inside a string.
_STRING = {
    b'"': re.compile(rb'"((?:[^"\\]|\\.)*)"'),
    b'\\"': re.compile(rb'\\"((?:[^"\\]|\\[^"\\]|\\\\(?:\\.|[^"\\]))*)\\"'),
}
# Inside a composite value: strings, brackets, and (one level down) the end of the outer string.
_TOKENS = {
    b'"': re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]'),
    b'\\"': re.compile(_STRING[b'\\"'].pattern + rb'|\\.|"|[\[\]{}]'),
}
_NUMBER = re.compile(rb"-?\d[\d.eE+-]*")


def _composite_end(raw: bytes, start: int, quote: bytes) -> int:
    """Where the object or array at ``start`` ends; if it never closes, where its string or line does."""
    depth = 0
    for token in _TOKENS[quote].finditer(raw, start):
        kind = token.group()
        if kind in (b"{", b"["):
            depth += 1
        elif kind in (b"}", b"]"):
            depth -= 1
            if depth == 0:
                return token.end()
        elif kind == b'"':  # the string carrying this JSON ends: so does the value
            return token.start()
    return len(raw)


def _field_value(match: re.Match[bytes], _in_json: bool) -> Span | None:
    """The value of a JSON field with a secret key, to be replaced by the string ``"[REDACTED]"``."""
    quote, key, closing = match.group(1, 2, 3)
    if quote != closing or not is_secret_key(key.decode("ascii", "replace")):
        return None
    raw, start = match.string, match.end()
    if raw.startswith(quote, start):
        string = _STRING[quote].match(raw, start)
        if string is None or not string.group(1) or string.group(1) == MASK:
            return None
        end = string.end()
    elif raw[start : start + 1] in (b"{", b"["):
        end = _composite_end(raw, start, quote)
    elif number := _NUMBER.match(raw, start):
        end = number.end()
    else:  # true, false, null: no secret, and useful as they are
        return None
    return start, end, quote + MASK + quote


# -- key=value in text -------------------------------------------------------------------------
_KEY_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_KEY_TAIL = re.compile(rb"[\w.-]*")
_OPENINGS = (b"b'", b"'", b'\\"', b'"')
_CONTENT = {
    b"b'": re.compile(rb"[^'\"\\\n]*"),
    b"'": re.compile(rb"[^'\"\\\n]*"),
    b'\\"': re.compile(rb'(?:[^"\\]|\\[^"])*'),
    b'"': re.compile(rb'(?:[^"\\]|\\.)*'),
    b"": re.compile(rb"[^\s\"'\\&,;)\]}>]*"),
}
_STRUCTURES = (b"[", b"{", b"(", b"<")
_NOT_SECRET_VALUES = frozenset({b"true", b"false", b"null", b"none", b"nil"})


def _run_end(run: re.Pattern[bytes], raw: bytes, start: int) -> int:
    """Where ``run`` (a pattern that may match nothing) stops matching from ``start``."""
    found = run.match(raw, start)
    return found.end() if found else start


def _pair_value(match: re.Match[bytes], in_json: bool) -> Span | None:
    """The value after a secret-named key in text; an ``Authorization`` scheme stays readable."""
    raw = match.string
    key_start = match.start()
    while key_start and raw[key_start - 1] in _KEY_BYTES:
        key_start -= 1
    key_end = _run_end(_KEY_TAIL, raw, match.start())
    if not is_secret_key(raw[key_start:key_end].decode("ascii")):
        return None
    start = match.end()
    opening = next((o for o in _OPENINGS if raw.startswith(o, start)), b"")
    if opening == b'"' and in_json:  # a bare quote ends the JSON string the pair is in
        opening = b""
    start += len(opening)
    if not opening and raw[start : start + 1] in _STRUCTURES:  # a list or object in text: its own keys tell
        return None
    if scheme := AUTH_SCHEME.match(raw, start):
        start = scheme.end()
    end = _run_end(_CONTENT[opening], raw, start)
    value = raw[start:end]
    if not value or value.startswith(MASK) or value.lower() in _NOT_SECRET_VALUES:
        return None
    return start, end, MASK


# -- rules ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """A named rule: a pattern, and what replaces a match (a template, or a finder that reads the
    value after the match and says what to replace, or None to keep it). ``keywords`` (lowercase)
    are what a line must contain for the rule to be tried; without them the pattern itself is
    the prefilter's."""

    name: str
    pattern: bytes
    replacement: bytes | Finder
    keywords: tuple[bytes, ...] = ()

    def apply(self, regex: re.Pattern[bytes], raw: bytes, in_json: bool) -> tuple[bytes, int]:
        if isinstance(self.replacement, bytes):
            return regex.subn(self.replacement, raw)
        pieces: list[bytes] = []
        done = hits = 0
        match = regex.search(raw)
        while match is not None:
            span = self.replacement(match, in_json)
            if span is None:
                match = regex.search(raw, match.end())
                continue
            start, end, text = span
            pieces += (raw[done:start], text)
            done, hits = end, hits + 1
            match = regex.search(raw, end)
        return (b"".join(pieces) + raw[done:], hits) if hits else (raw, 0)


def _builtin(name: str, pattern: bytes, replacement: bytes | Finder) -> Rule:
    return Rule(name, pattern, replacement, KEYWORDS[name])


# The order matters: a private key first (its body would look like other things), then JSON
# fields, the token shapes, and last the looser key=value pairs of text.
BUILTIN: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        _builtin("private_key", *SHAPES["private_key"]),
        _builtin("secret_field", secret_rules.FIELD, _field_value),
        *(_builtin(name, *spec) for name, spec in SHAPES.items() if name != "private_key"),
        _builtin("secret_pair", secret_rules.PAIR, _pair_value),
    )
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
        rules = [rule for name, rule in BUILTIN.items() if config.builtin and name not in config.disable]
        rules += [Rule(r.name, r.pattern.encode(), r.replacement.encode()) for r in config.rules]
        self.rules = [(rule, re.compile(rule.pattern)) for rule in rules]
        self.prefilter = (_HyperscanPrefilter if hyperscan else _RePrefilter)(rules) if rules else None

    def candidates(self, records: list[Record]) -> dict[int, set[int] | None]:
        """The records in which some rule may match, by index: each with the rules to try (indexes
        into ``self.rules``), or None for all of them."""
        if self.prefilter is None:
            return {}
        blob = b"\n".join(rec.raw for rec in records)
        hits = self.prefilter.scan(blob)
        if not hits:
            return {}
        starts = list(itertools.accumulate((len(rec.raw) + 1 for rec in records), initial=0))
        found: dict[int, set[int] | None] = {}
        for rule, end in hits:
            line = bisect.bisect_right(starts, end - 1) - 1
            tried = found.setdefault(line, set())
            if rule is None:
                found[line] = None
            elif tried is not None:
                tried.add(rule)
        return found

    def process(self, records: list[Record]) -> list[Record]:
        counts: Counter[str] = Counter()
        for index, tried in sorted(self.candidates(records).items()):
            rec = records[index]
            raw, out = rec.raw, rec.out
            in_json = raw.lstrip()[:1] == b"{"
            for number, (rule, regex) in enumerate(self.rules):
                if tried is not None and number not in tried:
                    continue
                raw, hits = rule.apply(regex, raw, in_json)
                if hits:
                    counts[rule.name] += hits
                    if out is not None:
                        out = rule.apply(regex, out, True)[0]
            if raw is not rec.raw:
                rec.raw, rec.out = raw, out
                if rec.fields is not None:
                    self.reparse(rec)
        for name, count in counts.items():
            self.context.metrics.redactions.labels(name).inc(count)
        return records

    def reparse(self, rec: Record) -> None:
        """Read the clean line's fields again. A custom rule may have broken the JSON: the line then
        goes on as text, flagged and counted, with its secrets gone."""
        try:
            rec.fields = orjson.loads(rec.raw)
        except orjson.JSONDecodeError:
            rec.fields, rec.parse_error = None, "redaction left a line that is not JSON"
            rec.out, rec.injector = None, None
            self.context.metrics.errors.labels("redact").inc()


Hit = tuple["int | None", int]  # the rule a prefilter match is for (None: unknown, try all), and its end


class _HyperscanPrefilter:
    """Every rule's keywords (caseless) and the patterns of rules without any, in one Hyperscan
    database: one pass over a batch says which rules to try on which lines."""

    def __init__(self, rules: list[Rule]) -> None:
        expressions, ids, flags = [], [], []
        for number, rule in enumerate(rules):
            for pattern in rule.keywords or (rule.pattern,):
                expressions.append(pattern)
                ids.append(number)
                flags.append(hyperscan.HS_FLAG_CASELESS if rule.keywords else hyperscan.HS_FLAG_PREFILTER)
        self.db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self.db.compile(expressions=expressions, ids=ids, elements=len(expressions), flags=flags)
        self.scratch = hyperscan.Scratch(self.db)

    def scan(self, blob: bytes) -> list[Hit]:
        hits: list[Hit] = []

        def on_match(rule: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            hits.append((rule, end))

        self.db.scan(blob, match_event_handler=on_match, scratch=self.scratch)
        return hits


class _RePrefilter:
    """Without Hyperscan: each keyword searched for on its own in the lowercased batch (a literal
    search in ``re`` is a fast scan; one alternation of them all is forty times slower), and the
    patterns of rules without keywords as one ``re``, whose lines are tried with every rule."""

    def __init__(self, rules: list[Rule]) -> None:
        owners: dict[bytes, list[int]] = {}
        for number, rule in enumerate(rules):
            for keyword in rule.keywords:
                owners.setdefault(keyword, []).append(number)
        self.keywords = [(re.compile(keyword), numbers) for keyword, numbers in owners.items()]
        patterns = [rule.pattern for rule in rules if not rule.keywords]
        self.patterns = re.compile(b"|".join(b"(?:" + p + b")" for p in patterns)) if patterns else None

    def scan(self, blob: bytes) -> list[Hit]:
        hits: list[Hit] = []
        lowered = blob.lower()
        for keyword, numbers in self.keywords:
            hits += ((number, m.end()) for m in keyword.finditer(lowered) for number in numbers)
        if self.patterns is not None:
            hits += ((None, m.end()) for m in self.patterns.finditer(blob))
        return hits
