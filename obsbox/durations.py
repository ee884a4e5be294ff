"""Durations as people write them in configs and Prometheus writes them in rules: ``250ms``, ``1.5s``,
``5m``, ``1h30m``, ``30d``. One parser for the bridge's config, the SLO spec and the report."""

from __future__ import annotations

import re

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(text: str, bare_seconds: bool = False) -> float:
    """Seconds in ``text`` ("5m", "1h30m", "250ms"); a plain number is seconds when ``bare_seconds``.

    Raises ValueError for anything else, naming the text."""
    compact = text.strip()
    if bare_seconds and _NUMBER.fullmatch(compact):
        return float(compact)
    parts = _PART.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"{text!r} is not a Prometheus duration (such as 250ms, 5s, 1h30m or 30d)")
    return sum(float(n) * UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """Seconds as the shortest Prometheus duration: 300 → "5m", 180000 → "2d2h"."""
    out, rest = "", int(seconds)
    for unit in ("d", "h", "m", "s"):
        count, rest = divmod(rest, int(UNITS[unit]))
        out += f"{count}{unit}" if count else ""
    return out or "0s"
