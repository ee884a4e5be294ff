"""logfmt lines (``level=info ts=... traceID=... msg="query stats"``): Go services write them (Loki,
Tempo, Prometheus, Grafana, go-kit/log, log/slog's TextHandler, logrus' TextFormatter), and so does
Heroku's router.

Decoded by go-logfmt's rules (github.com/go-logfmt/logfmt v0.6.1, ``decode.go`` ``ScanKeyval`` and
``jsonstring.go`` ``unquoteBytes``), which Promtail's ``logfmt`` stage uses (grafana/loki v3.7.6
``clients/pkg/logentry/stages/logfmt.go``; go-logfmt v0.6.1 in its ``go.mod``):

- bytes up to and including the space (``<= ' '``) between pairs are skipped;
- a key runs up to ``=`` or a space; a ``"`` in a key, or an ``=`` with no key before it, is an error;
  a key holding U+FFFD (or bytes that are not UTF-8) is an error;
- ``key`` alone and ``key=`` have an empty value; an unquoted value runs up to a space, and an ``=``
  or ``"`` in it is an error;
- a quoted value runs to the first ``"`` not escaped by ``\\``; without a backslash its bytes are taken
  as they are, with one it is unquoted as a JSON string (``\\" \\\\ \\/ \\' \\b \\f \\n \\r \\t \\uXXXX``,
  surrogate pairs joined, a lone surrogate U+FFFD; any other escape, or a control byte, is an error);
  a quoted value may be followed directly by the next key.

The values are strings (go-logfmt's nil value is "", as the stage's ``string(decoder.Value())``); a key
given twice keeps its last value, as in the stage (and as orjson does for a JSON object).
"""

from __future__ import annotations

import re

# One pair: the garbage before it, a key, then "=" and a quoted or an unquoted value (or nothing).
_PAIR = re.compile(r'[\x00-\x20]*([^\x00-\x20="]+)(=(?:"((?:[^"\\]|\\.)*)"|([^\x00-\x20="]*)))?', re.S)
_END = re.compile(r"[\x00-\x20]*")
_CONTROL = re.compile(r"[\x00-\x1f]")
_U4 = re.compile(r"\\u([0-9a-fA-F]{4})")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "'": "'", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
# A line that starts like a logfmt record: a key made of the characters loggers use, then "=". Lines of
# a file not detected as logfmt are read as logfmt only when they start so (see ``sniff``).
_START = re.compile(rb"[A-Za-z_@][\w.\-/@:]*=")


class LogfmtError(ValueError):
    """The line breaks go-logfmt's rules; the message says where, as go-logfmt's ``SyntaxError`` does."""


class LogfmtFields(dict):
    """A logfmt line's pairs, key → value. A dict like a JSON line's fields, so levels, times and IDs
    are found the same way; its type tells the trace processor to append the IDs as pairs."""

    __slots__ = ()


def decode(line: str) -> LogfmtFields:
    """The pairs of one line as fields (a key given twice keeps its last value); LogfmtError when
    the line breaks go-logfmt's rules."""
    return LogfmtFields(pairs(line))


def pairs(line: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of one line, in order, by go-logfmt's rules (module docstring);
    LogfmtError, with the position in characters, when the line breaks them."""
    out: list[tuple[str, str]] = []
    pos, size = 0, len(line)
    match, end = _PAIR.match, _END.match
    while True:
        pos = end(line, pos).end()  # type: ignore[union-attr] # matches the empty string
        if pos >= size:
            return out
        pair = match(line, pos)
        if pair is None:
            raise LogfmtError(f"unexpected {line[pos]!r} at pos {pos + 1}")
        key, quoted, plain = pair.group(1, 3, 4)
        if "\ufffd" in key:
            raise LogfmtError(f"invalid key at pos {pair.end(1) + 1}")
        pos = pair.end()
        if quoted is not None:
            value = unquote(quoted) if "\\" in quoted else quoted
            if value is None:
                raise LogfmtError(f"invalid quoted value at pos {pos + 1}")
        elif pos < size and line[pos] > " ":
            if line[pos] == '"' and plain == "":
                raise LogfmtError(f"unterminated quoted value at pos {size + 1}")
            raise LogfmtError(f"unexpected {line[pos]!r} at pos {pos + 1}")
        else:
            value = plain or ""
        out.append((key, value))


def unquote(body: str) -> str | None:
    """A quoted value's text between its quotes, unquoted as go-logfmt's ``unquoteBytes`` does; None
    where it fails (an unknown escape, a control byte, a ``\\u`` without four hex digits)."""
    if _CONTROL.search(body):
        return None
    out: list[str] = []
    at = 0
    while (i := body.find("\\", at)) >= 0:
        out.append(body[at:i])
        c = body[i + 1 : i + 2]
        if c != "u":
            if c not in _ESCAPES:
                return None
            out.append(_ESCAPES[c])
            at = i + 2
            continue
        high = _U4.match(body, i)
        if high is None:
            return None
        code, at = int(high.group(1), 16), i + 6
        if 0xD800 <= code < 0xE000:  # Go's utf16.DecodeRune: a pair, else U+FFFD for the first
            low = _U4.match(body, at)
            second = int(low.group(1), 16) if low else -1
            if code < 0xDC00 and 0xDC00 <= second < 0xE000:
                code, at = 0x10000 + ((code - 0xD800) << 10) + (second - 0xDC00), at + 6
            else:
                code = 0xFFFD
        out.append(chr(code))
    out.append(body[at:])
    return "".join(out)


def sniff(line: bytes) -> bool:
    """Does the line start like a logfmt record (``level=``, ``ts=``, ``at=``...)? Cheap: one anchored
    match, for lines that are not JSON."""
    return _START.match(line) is not None


def fields_of(raw: bytes, whole_file: bool) -> LogfmtFields | None:
    """The pairs of a line that is not JSON, when it is a logfmt record: it decodes, and has at least one
    ``key=value`` pair. ``whole_file``: the file is logfmt (detected or forced), so any line may be one;
    otherwise only a line that starts like one (``sniff``) is tried. Raises LogfmtError for a line
    of a logfmt file that breaks the rules or holds no pair."""
    if not whole_file and not _START.match(raw):
        return None
    try:
        fields = decode(raw.decode("utf-8", "replace"))  # go-logfmt: a key with bytes not UTF-8 is an error
    except LogfmtError:
        if whole_file:
            raise
        return None
    if b"=" not in raw:  # decoded, so an "=" separates a pair: without one, the line is words
        if whole_file:
            raise LogfmtError("no key=value pair")
        return None
    return fields


def appended(raw: bytes, pairs: list[tuple[str, str]]) -> bytes:
    """The line with ``key=value`` pairs appended, every byte of it kept (a trailing CR stays last)."""
    end = len(raw) - 1 if raw.endswith(b"\r") else len(raw)
    added = "".join(f" {key}={value}" for key, value in pairs).encode()
    return raw[:end] + added + raw[end:]
