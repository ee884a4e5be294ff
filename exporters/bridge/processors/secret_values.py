"""Where the value of a secret-named key is in a line: JSON fields, and ``key=value`` in text.

A key is found from its words, not by a regex for whole keys run over the line: the secret words
(``pass``, ``token``, ...) are looked for in the lowercased line (literals, which ``re`` skips to
by their first bytes), the run of ``[\\w.-]`` around each is the key, and
:func:`secret_rules.is_secret_key` decides. A case-insensitive regex for a key holding a word
tries every word at every byte: ten times slower on a line that has one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from obsbox.exporters.bridge.processors.secret_rules import AUTH_SCHEME, KEY_WORDS, MASK, is_secret_key

Span = tuple[int, int, bytes]  # what to replace: start, end, replacement

_KEY_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_KEY_RUN = re.compile(rb"[\w.-]*")
_KEY_WORD = re.compile(b"|".join(KEY_WORDS))  # literals only: ``re`` skips to their first bytes


class _Last:
    """The last line's keys, as one (line, keys) pair (replaced whole, so threads never mix two):
    ``secret_pair`` asks about the line ``secret_field`` left unchanged, most lines with a word."""

    entry: tuple[bytes, list[tuple[int, int]]] = (b"", [])


def _secret_keys(raw: bytes) -> list[tuple[int, int]]:
    """Start and end of each key in ``raw`` that names a secret, left to right."""
    last, keys = _Last.entry
    if last is raw:
        return keys
    keys = []
    done = -1
    for word in _KEY_WORD.finditer(raw.lower()):
        at = word.start()
        if at < done:  # another word of the same key
            continue
        start = at
        while start and raw[start - 1] in _KEY_BYTES:
            start -= 1
        done = _KEY_RUN.match(raw, at).end()  # type: ignore[union-attr]
        if is_secret_key(raw[start:done].decode("ascii")):
            keys.append((start, done))
    _Last.entry = (raw, keys)
    return keys


# -- JSON fields ---------------------------------------------------------------------------------
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
_COLON = re.compile(rb"\s*:\s*")


def field_values(raw: bytes, _in_json: bool) -> Iterator[Span]:
    """The value of each JSON field with a secret key, to become the string ``"[REDACTED]"``; of
    any type but ``true``, ``false`` and ``null``, and whole when it is an object or array."""
    for start, end in _secret_keys(raw):
        quote = b'\\"' if raw[start - 2 : start] == b'\\"' else b'"'
        if raw[start - len(quote) : start] != quote or not raw.startswith(quote, end):
            continue
        colon = _COLON.match(raw, end + len(quote))
        if colon is not None and (span := _json_value(raw, colon.end(), quote)):
            yield span


def _json_value(raw: bytes, start: int, quote: bytes) -> Span | None:
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


# -- key=value in text ---------------------------------------------------------------------------
_SEPARATOR = re.compile(rb"[\"']?\s*(?:=>|:|=)\s*")
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


def pair_values(raw: bytes, in_json: bool) -> Iterator[Span]:
    """The value after each secret-named key in text (``password=x``, ``pwd: x``, ``?token=x&``,
    ``'password': 'x'``); an ``Authorization`` scheme stays readable."""
    for _start, end in _secret_keys(raw):
        separator = _SEPARATOR.match(raw, end)
        if separator is not None and (span := _text_value(raw, separator.end(), in_json)):
            yield span


def _text_value(raw: bytes, start: int, in_json: bool) -> Span | None:
    opening = next((o for o in _OPENINGS if raw.startswith(o, start)), b"")
    if opening == b'"' and in_json:  # a bare quote ends the JSON string the pair is in
        opening = b""
    start += len(opening)
    if not opening and raw[start : start + 1] in _STRUCTURES:  # a list or object in text: its own keys tell
        return None
    if scheme := AUTH_SCHEME.match(raw, start):
        start = scheme.end()
    end = _CONTENT[opening].match(raw, start).end()  # type: ignore[union-attr]
    value = raw[start:end]
    if not value or value.startswith(MASK) or value.lower() in _NOT_SECRET_VALUES:
        return None
    return start, end, MASK
