"""Well-known fields of a JSON log line: timestamp, severity, message and service, under their usual
spellings (ECS, Serilog CLEF, .NET, logrus/zap, pino/bunyan, OTel)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

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

# OTel severity numbers (logs data model): the first number of each range.
SEVERITY = {
    "trace": 1,
    "verbose": 1,
    "debug": 5,
    "info": 9,
    "information": 9,
    "informational": 9,
    "notice": 10,
    "warn": 13,
    "warning": 13,
    "error": 17,
    "err": 17,
    "critical": 21,
    "crit": 21,
    "fatal": 21,
    "panic": 21,
    "emergency": 21,
    "alert": 21,
}
SHORT = {1: "trace", 5: "debug", 9: "info", 10: "info", 13: "warn", 17: "error", 21: "fatal"}
PINO = {10: 1, 20: 5, 30: 9, 40: 13, 50: 17, 60: 21}  # pino / bunyan numeric levels
_UNIX_2001 = 978_307_200


_PRIORITY: dict[tuple[str, ...], tuple[frozenset[str], dict[str, int]]] = {}
_ZULU_SECONDS: dict[str, int] = {}  # "2026-11-30T12:00:00" → epoch seconds: lines share their second
_LEVELS: dict[str, tuple[int, str]] = {}  # a level's text → (severity number, text)
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


def iso_ns(text: str) -> int | None:
    """ISO 8601 / RFC 3339 text in Unix nanoseconds (None when it is not a time)."""
    # the common shape, 2026-11-30T12:00:00[.fraction]Z: parse the seconds once per second seen
    if len(text) >= 20 and text[19] in ".Z" and text[-1] == "Z" and text[10] == "T":
        seconds = _ZULU_SECONDS.get(text[:19])
        fraction = text[20:-1]
        if seconds is not None and not fraction:
            return seconds * 1_000_000_000
        if seconds is not None and fraction.isdigit():
            return seconds * 1_000_000_000 + int(fraction[:9]) * _FRACTION_SCALE.get(len(fraction), 1)
        parsed = _parse_iso(text)
        if parsed is not None and (fraction.isdigit() or not fraction):
            if len(_ZULU_SECONDS) > 100_000:
                _ZULU_SECONDS.clear()
            _ZULU_SECONDS[text[:19]] = parsed // 1_000_000_000
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


def severity(fields: dict[str, Any] | None) -> tuple[int, str]:
    """(OTel severity number, the line's own level text); (0, "") when the line has no level."""
    if not fields:
        return 0, ""
    value = first(fields, LEVEL_KEYS)
    if isinstance(value, str):
        known = _LEVELS.get(value)
        if known is None:
            number = SEVERITY.get(value.strip().lower())
            if number is None and value[:4].lower() in SEVERITY:
                number = SEVERITY[value[:4].lower()]
            known = (number or 0, value)
            if len(_LEVELS) < 10_000:  # level values are few; a flood of odd ones is not cached
                _LEVELS[value] = known
        return known
    if isinstance(value, int) and not isinstance(value, bool):
        return PINO.get(value, 0), str(value)
    if "@mt" in fields or "@m" in fields:  # Serilog CLEF omits @l for Information
        return 9, "Information"
    number = fields.get("severityNumber")  # an OTLP/JSON log record without severityText
    if isinstance(number, int) and not isinstance(number, bool) and 1 <= number <= 24:
        return number, ""
    return 0, ""


def level_label(number: int) -> str:
    """A low-cardinality level for a Loki label."""
    return SHORT.get(number, "unknown") if number else "unknown"


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
