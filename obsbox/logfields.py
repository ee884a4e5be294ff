"""Well-known fields of a JSON log line: timestamp, severity, message and service, under their usual
spellings (ECS, Serilog CLEF, .NET, logrus/zap, pino/bunyan, OTel)."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any, NamedTuple

import orjson

TIME_KEYS = (
    "@timestamp",
    "timestamp",
    "Timestamp",
    "time",
    "@t",
    "ts",
    "Time",
    "datetime",
    "date",
    "eventTime",
    "TimeStamp",
    "timeUnixNano",  # OTLP/JSON log records (nanoseconds, as a decimal string)
    "observedTimeUnixNano",
    "t",  # Grafana's server log (`logger=... t=... level=...`); last: lines may use so short a key otherwise
)
LEVEL_KEYS = (
    "level",
    "Level",
    "@l",
    "severity",
    "Severity",
    "log.level",
    "lvl",
    "levelname",
    "loglevel",
    "SeverityText",
    "LogLevel",
    "severityText",  # OTLP/JSON log records
)
MESSAGE_KEYS = ("message", "msg", "Message", "@m", "@mt", "MessageTemplate", "log", "text", "body")
SERVICE_KEYS = ("service.name", "service_name", "service", "Service", "ServiceName", "app", "application")

# Loki's level words, the only values of detected_level it knows (v3.7.6 pkg/util/constants/levels.go).
TRACE, DEBUG, INFO, WARN, ERROR, CRITICAL, FATAL, UNKNOWN = (
    "trace", "debug", "info", "warn", "error", "critical", "fatal", "unknown",
)  # fmt: skip

# Every level word a common logger writes, lower-cased → (OTel severity number, Loki's level word).
# Numbers: the OTel logs data model, Appendix B (SeverityNumber example mappings). Loki's own
# normalizeLogLevel (pkg/distributor/field_detection.go) knows only the words Loki's words stand for
# plus trc, dbg, inf, wrn, err; any other word it keeps as written, so that word would become
# detected_level: every word here is sent with its Loki word instead.
LEVELS: dict[str, tuple[int, str]] = {
    # log4j, logback, Rust log/tracing, Go slog, zap, logrus, Ruby Logger, OTel's own short names
    "trace": (1, TRACE), "debug": (5, DEBUG), "info": (9, INFO), "warn": (13, WARN),
    "error": (17, ERROR), "fatal": (21, FATAL),
    # Loki's abbreviations (normalizeLogLevel)
    "trc": (1, TRACE), "dbg": (5, DEBUG), "inf": (9, INFO), "wrn": (13, WARN), "err": (17, ERROR),
    # Serilog (Verbose is below Debug: trace), .NET ILogger (Information, Warning, Critical = FATAL in
    # Appendix B), Python (WARNING, CRITICAL; the OTel Python handler maps CRITICAL to FATAL)
    "verbose": (1, TRACE), "information": (9, INFO), "warning": (13, WARN), "critical": (21, CRITICAL),
    # syslog (RFC 5424 names and Appendix B's numbers): crit and alert keep Loki's word critical
    "emerg": (21, FATAL), "emergency": (21, FATAL), "alert": (19, CRITICAL), "crit": (18, CRITICAL),
    "notice": (10, INFO), "informational": (9, INFO),
    # zap (DPanic is ERROR2 in Appendix B; logrus's panic is above fatal), java.util.logging, structlog
    "dpanic": (18, ERROR), "panic": (21, FATAL),
    "severe": (17, ERROR), "config": (7, DEBUG), "fine": (6, DEBUG), "finer": (5, DEBUG), "finest": (1, TRACE),
    "exception": (17, ERROR),
}  # fmt: skip
PINO = {10: "trace", 20: "debug", 30: "info", 40: "warn", 50: "error", 60: "fatal"}  # pino / bunyan numbers
# Go slog's names between levels: "ERROR+2", "DEBUG-4" (log/slog Level.String). OTel's slog bridge
# (contrib bridges/otelslog) sends severity slog level + 9, so the offset adds to the base's number.
SLOG_OFFSET = re.compile(r"([A-Za-z]+)([+-]\d{1,2})")


class Severity(NamedTuple):
    """A line's level: OTel's severity number (0: none), the text as written, Loki's level word
    ("" when the line has no level: Loki then reads the line itself)."""

    number: int
    text: str
    level: str


NO_LEVEL = Severity(0, "", "")
_UNIX_2001 = 978_307_200


_PRIORITY: dict[tuple[str, ...], tuple[frozenset[str], dict[str, int]]] = {}
_ZULU_SECONDS: dict[str, int] = {}  # "2026-11-30T12:00:00" → its Unix ns: lines share their second
_SEEN: dict[str, Severity] = {}  # a level's text → its Severity
_LAST: dict[tuple[str, ...], tuple[str, tuple[str, ...]]] = {}  # candidates → (key found last, keys before it)


def first(fields: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The value of the first of ``keys`` (in priority order) that the line has and is not null.

    This runs for every line, and a log's lines use the same spelling: the key found last time is
    tried first, after checking that none of higher priority is there. Otherwise one set
    intersection, not a ``get`` per candidate."""
    last = _LAST.get(keys)
    if last is not None:
        key, higher = last
        value = fields.get(key)
        if value is not None and not any(k in fields for k in higher):
            return value
    known = _PRIORITY.get(keys)
    if known is None:
        known = _PRIORITY[keys] = (frozenset(keys), {key: i for i, key in enumerate(keys)})
    hits = known[0].intersection(fields)
    if not hits:
        return None
    for key in sorted(hits, key=known[1].__getitem__) if len(hits) > 1 else hits:
        if fields[key] is not None:
            _LAST[keys] = (key, keys[: known[1][key]])
            return fields[key]
    return None


def timestamp_ns(fields: dict[str, Any] | None) -> int | None:
    """The line's own time in Unix nanoseconds: ISO 8601 text, or epoch s / ms / µs / ns numbers."""
    if not fields:
        return None
    value = first(fields, TIME_KEYS)
    if isinstance(value, str):
        return iso_ns(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return epoch_ns(value)
    return None


# (below this, times this): epoch seconds, milliseconds, microseconds, nanoseconds. Each unit's span from
# 2001 to the year 5138 lies below the next unit's start, so the magnitude tells them apart.
_EPOCH_UNITS = ((10**11, 10**9), (10**14, 10**6), (10**17, 10**3), (10**20, 1))


def epoch_ns(value: float) -> int | None:
    """An epoch time in s, ms, µs or ns (told apart by magnitude) in nanoseconds; None before 2001."""
    for below, scale in _EPOCH_UNITS:
        if value < below:
            if isinstance(value, int):
                ns = value * scale
            else:  # a float holds about 16 digits: microseconds, not nanoseconds, of an epoch time
                ns = round(value * (scale // 1000)) * 1000 if scale >= 1000 else int(value)
            return ns if ns > _UNIX_2001 * 10**9 else None
    return None


_FRACTION_SCALE: dict[int, int] = {n: 10 ** (9 - n) for n in range(10)}  # ns per unit of an n-digit fraction
_MILLIS: dict[str, int] = {f"{n:03d}": n * 1_000_000 for n in range(1000)}  # "123" → its ns


def iso_ns(text: str) -> int | None:
    """ISO 8601 / RFC 3339 text in Unix nanoseconds (None when it is not a time)."""
    # the common shape, 2026-11-30T12:00:00[.fraction]Z: parse the seconds once per second seen
    if len(text) >= 20 and text[19] in ".Z" and text[-1] == "Z" and text[10] == "T":
        second = _ZULU_SECONDS.get(text[:19])
        fraction = text[20:-1]
        if second is not None:
            if not fraction:
                return second
            millis = _MILLIS.get(fraction)  # the usual fraction: a lookup, not a parse
            if millis is not None:
                return second + millis
            if fraction.isdigit():
                return second + int(fraction[:9]) * _FRACTION_SCALE.get(len(fraction), 1)
        parsed = _parse_iso(text)
        if parsed is not None and (fraction.isdigit() or not fraction):
            if len(_ZULU_SECONDS) > 100_000:
                _ZULU_SECONDS.clear()
            _ZULU_SECONDS[text[:19]] = parsed - parsed % 1_000_000_000
        return parsed
    return _parse_iso(text)


def _parse_iso(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return _digits(text)
    try:
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        fraction = ""
        if "." in text:  # keep nanoseconds that datetime (microseconds) would drop
            head, _, rest = text.partition(".")
            digits = len(rest) - len(rest.lstrip("0123456789"))
            fraction, tail = rest[:digits], rest[digits:]
            text = head + tail
        moment = datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    seconds = int(moment.timestamp())
    return seconds * 1_000_000_000 + int((fraction + "000000000")[:9] or 0)


def _digits(text: str) -> int | None:
    return epoch_ns(int(text))


def loki_level(number: int) -> str:
    """Loki's word for an OTel severity number: its own ranges (field_detection.go
    detectLogLevelFromLogEntry), unknown outside 1-24."""
    if not 1 <= number <= 24:
        return UNKNOWN
    return (TRACE, DEBUG, INFO, WARN, ERROR, FATAL)[(number - 1) // 4]


def level_of(text: str) -> Severity:
    """The severity a level's text stands for, in any case; a word no logger above writes gets
    number 0 and Loki's ``unknown`` (Loki would keep the word itself as the level)."""
    word = text.strip().lower()
    if not word:  # an empty level is none: Loki reads the line
        return Severity(0, text, "")
    known = LEVELS.get(word)
    if known is not None:
        return Severity(known[0], text, known[1])
    if word.isdigit() and int(word) in PINO:
        return Severity(LEVELS[PINO[int(word)]][0], text, PINO[int(word)])
    offset = SLOG_OFFSET.fullmatch(word)
    if offset and offset.group(1) in LEVELS:
        number = min(max(LEVELS[offset.group(1)][0] + int(offset.group(2)), 1), 24)
        return Severity(number, text, loki_level(number))
    return Severity(0, text, UNKNOWN)


_NUMBERS = {n: level_of(str(n)) for n in PINO}


def severity(fields: dict[str, Any] | None) -> Severity:
    """The line's level (``Severity``); ``NO_LEVEL`` when it has none."""
    if not fields:
        return NO_LEVEL
    value = first(fields, LEVEL_KEYS)
    if isinstance(value, str):
        known = _SEEN.get(value)
        if known is None:
            known = level_of(value)
            if len(_SEEN) < 10_000:  # level values are few; a flood of odd ones is not cached
                _SEEN[value] = known
        return known
    if isinstance(value, int) and not isinstance(value, bool):
        return _NUMBERS.get(value) or level_of(str(value))  # pino / bunyan
    if "@mt" in fields or "@m" in fields:  # Serilog CLEF omits @l for Information
        return Severity(9, "Information", INFO)
    number = fields.get("severityNumber")  # an OTLP/JSON log record without severityText
    if isinstance(number, int) and not isinstance(number, bool) and 1 <= number <= 24:
        return Severity(number, "", loki_level(number))
    return NO_LEVEL


def message(fields: dict[str, Any] | None) -> str | None:
    if not fields:
        return None
    value = first(fields, MESSAGE_KEYS)
    if isinstance(value, dict):  # an OTLP/JSON body: {"stringValue": "..."}
        value = value.get("stringValue")
    return value if isinstance(value, str) else None


def service(fields: dict[str, Any] | None) -> str | None:
    if not fields:
        return None
    value = first(fields, SERVICE_KEYS)
    if isinstance(value, dict):
        value = value.get("name")
    return value if isinstance(value, str) and value else None


def lookup(fields: dict[str, Any], selector: str) -> Any:
    """A field by exact key, else by dotted path into nested objects."""
    if selector in fields:
        return fields[selector]
    value: Any = fields
    for part in selector.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def json_text(value: Any) -> str:
    """A field's value as JSON text, as the line wrote it where orjson would not: a NaN or Infinity
    stays that word (orjson writes null), and an integer past 64 bits, which lines with NaN or
    Infinity keep exactly (they are read by the standard library), is written whole (orjson
    refuses it). Inside an array or object orjson's null stands for NaN and Infinity."""
    if type(value) is float and not math.isfinite(value):
        return json.dumps(value)
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value)
