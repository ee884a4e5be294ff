"""Cardinality guard: every label value the instrumentation emits comes from a bounded set.

Routes are templated (``/v1/models/{model}``), models and worker pools are either from a configured
list or the first ``cap`` values seen, and everything else folds into ``other``. A label that could
take one value per request would make Prometheus store one series per request.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

OTHER = "other"
UNKNOWN = "unknown"
_PARAM = re.compile(r"\{[^/{}]+\}")
# Path segments that are IDs rather than names: numbers, UUIDs/GUIDs, long hex strings.
_ID_SEGMENT = re.compile(r"\d+|[0-9a-fA-F]{8}(-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}|[0-9a-fA-F]{16,}")


class BoundedLabel:
    """Values of one label: the ``allowed`` ones, else the first ``cap`` distinct ones seen, else
    ``other``. Thread-safe; the common case (a value already admitted) takes no lock."""

    def __init__(self, name: str, allowed: Iterable[str] = (), cap: int = 20) -> None:
        if cap < 0:
            raise ValueError(f"{name}: the cap must be >= 0, got {cap}")
        self.name = name
        self.allowed = frozenset(allowed)
        self.cap = cap
        self.admitted: set[str] = set(self.allowed)
        self._lock = threading.Lock()

    def __call__(self, value: str | None) -> str:
        if not value:
            return UNKNOWN
        if value in self.admitted:
            return value
        if self.allowed:  # an explicit list is closed
            return OTHER
        with self._lock:
            if value in self.admitted:
                return value
            if len(self.admitted) < self.cap:
                self.admitted.add(value)
                return value
        return OTHER


class RouteTemplates:
    """Map a request path to its route template.

    Configured templates win (``/v1/models/{model}``); a path that matches none keeps its shape
    with ID-like segments replaced by ``{id}``, and past ``cap`` distinct routes folds into ``other``.
    Results are memoised in a bounded table, so a path costs one dict lookup after its first time.
    """

    def __init__(self, templates: Iterable[str] = (), cap: int = 50, memo_size: int = 4096) -> None:
        self.templates: list[tuple[str, re.Pattern[str]]] = []
        for template in templates:
            if not template.startswith("/"):
                raise ValueError(f"route template {template!r} must start with '/'")
            pattern = "".join(
                "[^/]+" if _PARAM.fullmatch(part) else re.escape(part) for part in _split_params(template)
            )
            self.templates.append((template, re.compile(pattern)))
        self.fallback = BoundedLabel("route", cap=cap)
        self.memo: dict[str, str] = {}
        self.memo_size = memo_size

    def __call__(self, path: str) -> str:
        route = self.memo.get(path)
        if route is not None:
            return route
        route = self._resolve(path)
        if len(self.memo) < self.memo_size:
            self.memo[path] = route
        return route

    def _resolve(self, path: str) -> str:
        for template, pattern in self.templates:
            if pattern.fullmatch(path):
                return template
        shape = "/".join("{id}" if _ID_SEGMENT.fullmatch(seg) else seg for seg in path.split("/"))
        return self.fallback(shape)

    def admit(self, template: str) -> str:
        """A template the app or its framework named (``set_route``, Starlette's ``scope['route']``)."""
        if any(template == known for known, _ in self.templates):
            return template
        return self.fallback(template)


def _split_params(template: str) -> list[str]:
    parts: list[str] = []
    last = 0
    for match in _PARAM.finditer(template):
        parts.extend((template[last : match.start()], match.group()))
        last = match.end()
    parts.append(template[last:])
    return [p for p in parts if p]
