"""The plugin registry: components are found by entry point, built-ins exactly like third-party ones.

A package adds a component by declaring, in its pyproject.toml::

    [project.entry-points."obsbox.sinks"]
    kafka = "my_package.kafka:KafkaSink"
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points

from obsbox.exporters.bridge.component import Component

KINDS = {"sources": "obsbox.sources", "processors": "obsbox.processors", "sinks": "obsbox.sinks"}

_extra: dict[str, dict[str, type[Component]]] = {kind: {} for kind in KINDS}


class UnknownComponentError(LookupError):
    pass


def register(kind: str, cls: type[Component]) -> None:
    """Register a component in this process (tests, embedded use) without an entry point."""
    _extra[kind][cls.type] = cls


@cache
def _installed(group: str) -> dict[str, EntryPoint]:
    """The group's entry points, by name, read once per process: reading them scans the metadata of
    every installed distribution (about 60 ms here), and a bridge looks up each of its components."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        found.setdefault(ep.name, ep)  # the first of a name wins, as a lookup by name finds it
    return found


def available(kind: str) -> list[str]:
    return sorted(set(_installed(KINDS[kind])) | set(_extra[kind]))


def load(kind: str, type_name: str) -> type[Component]:
    """The class registered as ``type_name`` in the entry-point group for ``kind``."""
    if type_name in _extra[kind]:
        return _extra[kind][type_name]
    if (ep := _installed(KINDS[kind]).get(type_name)) is not None:
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Component)):
            raise UnknownComponentError(f"entry point {ep.value} does not name a Source, Processor or Sink class")
        if getattr(cls, "type", None) != type_name:
            raise UnknownComponentError(
                f"entry point {ep.value} registers {type_name!r} but its class says type={getattr(cls, 'type', None)!r}"
            )
        return cls
    raise UnknownComponentError(f"no {kind[:-1]} named {type_name!r} (available: {', '.join(available(kind))})")
