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

Which secrets a line has is not decided by a regex run over it: like Gitleaks, each rule has
keywords (``xox`` for Slack tokens, ``pass`` or ``token`` for secret-named keys), and a rule is
tried only on the lines that contain one of its keywords.

Speed: a batch is scanned once, as one buffer, for every rule's keywords: by Hyperscan (SIMD, all
at once) where it is installed, else by one ``re`` search per keyword (each a fast literal scan).
Only the rules whose keywords a line holds then run on it. Custom rules have no keywords: their
own patterns are scanned for (Hyperscan in prefilter mode, else ``re``).
Threading: pipeline thread only.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from obsbox.exporters.bridge import logfmt
from obsbox.exporters.bridge.component import Processor
from obsbox.exporters.bridge.logfmt import LogfmtFields
from obsbox.exporters.bridge.processors.parse import python_json
from obsbox.exporters.bridge.processors.secret_rules import KEYWORDS, MASK, SHAPES
from obsbox.exporters.bridge.processors.secret_values import Span, field_values, pair_values
from obsbox.exporters.bridge.record import Record

hyperscan: Any
try:  # x86_64 wheels; elsewhere the ``re`` path serves
    import hyperscan
except ImportError:  # pragma: no cover - depends on the platform
    hyperscan = None

Finder = Callable[[bytes, bool], Iterable[Span]]  # (line, whether it is JSON) -> what to replace


@dataclass(frozen=True)
class Rule:
    """A named rule: a pattern and its replacement template, or a finder that says what to replace.
    ``keywords`` (lowercase) are what a line must contain for the rule to be tried; without them
    the pattern itself is the prefilter's."""

    name: str
    pattern: bytes | None
    replacement: bytes | Finder
    keywords: tuple[bytes, ...] = ()

    def apply(self, regex: re.Pattern[bytes] | None, raw: bytes, in_json: bool) -> tuple[bytes, int]:
        if regex is not None and isinstance(self.replacement, bytes):
            return regex.subn(self.replacement, raw)
        assert callable(self.replacement)
        pieces: list[bytes] = []
        done = 0
        for start, end, text in self.replacement(raw, in_json):
            if start < done:  # inside a value already replaced (a nested object's own keys)
                continue
            pieces += (raw[done:start], text)
            done = end
        return (b"".join(pieces) + raw[done:], len(pieces) // 2) if pieces else (raw, 0)


def _builtin(name: str, pattern: bytes | None, replacement: bytes | Finder) -> Rule:
    return Rule(name, pattern, replacement, KEYWORDS[name])


# The order matters: a private key first (its body would look like other things), then JSON
# fields, the token shapes, and last the looser key=value pairs of text.
BUILTIN: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        _builtin("private_key", *SHAPES["private_key"]),
        _builtin("secret_field", None, field_values),
        *(_builtin(name, *spec) for name, spec in SHAPES.items() if name != "private_key"),
        _builtin("secret_pair", None, pair_values),
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
        if hyperscan is not None:  # the prefilter compiles it too: say so now, not at start-up
            try:
                _HyperscanPrefilter([Rule(self.name, self.pattern.encode(), b"")])
            except hyperscan.error as exc:
                raise ValueError(
                    f"rule {self.name!r}: Hyperscan cannot compile the pattern ({exc}); "
                    "use syntax both Python's re and Hyperscan read (no (?a), verbose comments or huge repeats)"
                ) from None


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
        self.rules = [(rule, re.compile(rule.pattern) if rule.pattern else None) for rule in rules]
        self.prefilter = (_HyperscanPrefilter if hyperscan else _RePrefilter)(rules) if rules else None

    def candidates(self, records: list[Record]) -> dict[int, set[int]]:
        """The records in which some rule may match, by index, each with the rules to try on it
        (indexes into ``self.rules``)."""
        return self.candidate_lines([rec.raw for rec in records])

    def candidate_lines(self, lines: list[bytes]) -> dict[int, set[int]]:
        """``candidates`` of lines given as bytes."""
        if self.prefilter is None:
            return {}
        hits = self.prefilter.scan(b"\n".join(lines))
        if not hits:
            return {}
        starts = list(itertools.accumulate((len(raw) + 1 for raw in lines), initial=0))
        found: dict[int, set[int]] = {}
        for numbers, end in hits:
            found.setdefault(bisect.bisect_right(starts, end - 1) - 1, set()).update(numbers)
        return found

    def scrub(self, raw: bytes, tried: set[int]) -> tuple[bytes, list[int]]:
        """``raw`` with the rules numbered in ``tried`` applied in order, and the numbers of those
        that replaced something, as many times each as they did. ``raw`` itself when none did."""
        in_json = raw.lstrip()[:1] == b"{"
        hit: list[int] = []
        for number, (rule, regex) in enumerate(self.rules):
            if number in tried:
                raw, hits = rule.apply(regex, raw, in_json)
                hit += [number] * hits
        return raw, hit

    def process(self, records: list[Record]) -> list[Record]:
        counts: Counter[str] = Counter()
        for index, tried in sorted(self.candidates(records).items()):
            rec = records[index]
            raw, hit = self.scrub(rec.raw, tried)
            out = rec.out
            for number in dict.fromkeys(hit):  # each rule that hit, in order
                rule, regex = self.rules[number]
                counts[rule.name] += hit.count(number)
                if out is not None:
                    out = rule.apply(regex, out, True)[0]
            if raw is not rec.raw:
                rec.raw, rec.out = raw, out
                if rec.fields is not None:
                    self.reparse(rec)
        for rec in records:
            if rec.rest:
                rec.rest = self.clean_rest(rec.rest, counts)
        for name, count in counts.items():
            self.context.metrics.redactions.labels(name).inc(count)
        return records

    def clean_rest(self, rest: bytes, counts: Counter[str]) -> bytes:
        """The lines a multiline record adds to its first one (a stack trace: exception messages
        hold secrets), redacted as text by every rule the prefilter finds a match for."""
        tried = {number for numbers, _ in self.prefilter.scan(rest) for number in numbers} if self.prefilter else ()
        for number, (rule, regex) in enumerate(self.rules):
            if number in tried:
                rest, hits = rule.apply(regex, rest, False)
                counts[rule.name] += hits
        return rest

    def reparse(self, rec: Record) -> None:
        """Read the clean line's fields again. A custom rule may have broken the JSON (or logfmt): the
        line then goes on as text, flagged and counted, with its secrets gone."""
        kind = "logfmt" if type(rec.fields) is LogfmtFields else "JSON"
        if kind == "logfmt":
            with contextlib.suppress(logfmt.LogfmtError):
                rec.fields = None
                rec.fields = logfmt.decode(rec.raw.decode("utf-8", "replace"))
        else:
            try:
                rec.fields = orjson.loads(rec.raw)
            except orjson.JSONDecodeError:
                rec.fields = python_json(rec.raw)  # NaN and Infinity, as ``parse`` reads them
        if rec.fields is None:
            rec.parse_error = f"redaction left a line that is not {kind}"
            rec.out, rec.injector = None, None
            self.context.metrics.errors.labels("redact").inc()


Hit = tuple[tuple[int, ...], int]  # the rules a prefilter match is for, and an offset just past a byte of its line


def _searches(rules: list[Rule]) -> list[tuple[bytes, tuple[int, ...]]]:
    """What a prefilter looks for, each once, with the rules it is for: every keyword, and the
    pattern of each rule without any (a keyword is shared by ``secret_field`` and ``secret_pair``)."""
    owners: dict[bytes, list[int]] = {}
    for number, rule in enumerate(rules):
        for search in rule.keywords or ((rule.pattern,) if rule.pattern else ()):
            owners.setdefault(search, []).append(number)
    return [(search, tuple(numbers)) for search, numbers in owners.items()]


class _HyperscanPrefilter:
    """Every keyword (caseless), and the patterns of rules without any (in prefilter mode), in one
    Hyperscan database: one pass over a batch says which rules to try on which lines. Keywords, not
    patterns: Hyperscan reports every offset where a match may end, so a pattern with an open tail
    (a private key's body) would call back once per byte of it."""

    def __init__(self, rules: list[Rule]) -> None:
        searches = _searches(rules)
        self.owners = [numbers for _, numbers in searches]
        keyword = [bool(rules[numbers[0]].keywords) for _, numbers in searches]
        flags = [hyperscan.HS_FLAG_CASELESS if k else hyperscan.HS_FLAG_PREFILTER for k in keyword]
        self.db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        expressions = [search for search, _ in searches]
        self.db.compile(expressions=expressions, ids=list(range(len(searches))), elements=len(searches), flags=flags)
        self.scratch = hyperscan.Scratch(self.db)

    def scan(self, blob: bytes) -> list[Hit]:
        hits: list[Hit] = []
        owners = self.owners

        def on_match(search: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            hits.append((owners[search], end))

        self.db.scan(blob, match_event_handler=on_match, scratch=self.scratch)
        return hits


class _RePrefilter:
    """Without Hyperscan: each keyword searched for on its own in the lowercased batch (a literal
    search in ``re`` is a fast scan; one alternation of them all is forty times slower), and the
    pattern of each rule without keywords in the batch as it is."""

    def __init__(self, rules: list[Rule]) -> None:
        self.searches = [
            (re.compile(search), numbers, bool(rules[numbers[0]].keywords)) for search, numbers in _searches(rules)
        ]

    def scan(self, blob: bytes) -> list[Hit]:
        hits: list[Hit] = []
        lowered = blob.lower()
        for search, numbers, keyword in self.searches:
            hits += ((numbers, m.start() + 1) for m in search.finditer(lowered if keyword else blob))
        return hits
