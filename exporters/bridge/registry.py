"""The plugin registry: components are found by entry point, built-ins exactly like third-party ones.

A package adds a component by declaring, in its pyproject.toml::

    [project.entry-points."obsbox.sinks"]
    kafka = "my_package.kafka:KafkaSink"
"""

from __future__ import annotations

from importlib.metadata import entry_points

from obsbox.exporters.bridge.component import Component

KINDS = {"sources": "obsbox.sources", "processors": "obsbox.processors", "sinks": "obsbox.sinks"}

_extra: dict[str, dict[str, type[Component]]] = {kind: {} for kind in KINDS}


class UnknownComponentError(LookupError):
    pass


def register(kind: str, cls: type[Component]) -> None:
    """Register a component in this process (tests, embedded use) without an entry point."""
    _extra[kind][cls.type] = cls


def available(kind: str) -> list[str]:
    names = {ep.name for ep in entry_points(group=KINDS[kind])}
    return sorted(names | set(_extra[kind]))


def load(kind: str, type_name: str) -> type[Component]:
    """The class registered as ``type_name`` in the entry-point group for ``kind``."""
    if type_name in _extra[kind]:
        return _extra[kind][type_name]
    for ep in entry_points(group=KINDS[kind], name=type_name):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Component)):
            raise UnknownComponentError(f"entry point {ep.value} does not name a Source, Processor or Sink class")
        if getattr(cls, "type", None) != type_name:
            raise UnknownComponentError(
                f"entry point {ep.value} registers {type_name!r} but its class says type={getattr(cls, 'type', None)!r}"
            )
        return cls
    raise UnknownComponentError(f"no {kind[:-1]} named {type_name!r} (available: {', '.join(available(kind))})")
