"""Grafana's environment-variable expansion of provisioning files, as Grafana does it.

Grafana splits every string value on ``$$`` (the escape for a literal ``$``), expands each part with
Go's ``os.ExpandEnv`` and joins the parts with ``$``. ``os.ExpandEnv`` replaces ``$NAME`` and
``${anything}`` with the variable's value, or with nothing when it is unset, so an unescaped
``${__value.raw}`` would silently become an empty string. This is a line-by-line port of Go's
``os.Expand`` so tests can compute the value Grafana ends up with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SPECIAL = set("*#$@!?-0123456789")


def _is_alnum(c: str) -> bool:
    return c == "_" or (c.isascii() and c.isalnum())


def _shell_name(s: str) -> tuple[str, int]:
    """Go's getShellName: the variable name after a ``$`` and how many bytes it used."""
    if s[0] == "{":
        if len(s) > 2 and s[1] in SPECIAL and s[2] == "}":
            return s[1:2], 3
        for i in range(1, len(s)):
            if s[i] == "}":
                return ("", 2) if i == 1 else (s[1:i], i + 1)
        return "", 1
    if s[0] in SPECIAL:
        return s[0:1], 1
    i = 0
    while i < len(s) and _is_alnum(s[i]):
        i += 1
    return s[:i], i


def go_expand(s: str, env: Mapping[str, str]) -> str:
    """Go's ``os.Expand(s, env.get)`` with missing variables expanding to ``""``."""
    out: list[str] = []
    i = j = 0
    while j < len(s):
        if s[j] == "$" and j + 1 < len(s):
            out.append(s[i:j])
            name, width = _shell_name(s[j + 1 :])
            if name == "" and width == 0:
                out.append("$")
            elif name:
                out.append(env.get(name, ""))
            j += width
            i = j + 1
        j += 1
    return "".join(out) + s[i:]


def expand(value: Any, env: Mapping[str, str]) -> Any:
    """What Grafana sees for a provisioned value (recursively for lists and mappings)."""
    if isinstance(value, str):
        return "$".join(go_expand(part, env) for part in value.split("$$"))
    if isinstance(value, list):
        return [expand(v, env) for v in value]
    if isinstance(value, dict):
        return {k: expand(v, env) for k, v in value.items()}
    return value
