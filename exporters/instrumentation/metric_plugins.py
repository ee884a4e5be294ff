"""Metrics plugins: prometheus-client collectors that ``instrument()`` adds to its registry.

A plugin registers in the entry-point group ``obsbox.gateway_metrics``, the way bridge components
do. It is a ``Collector`` class with a ``name``, the metric names it ``provides``, and a
``probe()`` that says whether it can work here (and why not), so hardware-bound plugins such as
NVML are loaded only where their hardware is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

GROUP = "obsbox.gateway_metrics"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginStatus:
    available: bool
    reason: str


@dataclass(frozen=True)
class LoadedPlugins:
    collectors: list[Any]
    statuses: dict[str, PluginStatus]

    @property
    def provided(self) -> set[str]:
        return {name for collector in self.collectors for name in collector.provides}


def load(names: list[str] | None = None) -> LoadedPlugins:
    """Probe the registered plugins (or only ``names``) and build the available ones."""
    found = {ep.name: ep for ep in entry_points(group=GROUP)}
    if names is not None:
        unknown = sorted(set(names) - set(found))
        if unknown:
            raise ValueError(f"unknown metrics plugin(s) {unknown}; installed: {sorted(found) or 'none'}")
        found = {name: found[name] for name in names}
    collectors, statuses = [], {}
    for name, ep in sorted(found.items()):
        cls = ep.load()
        status = statuses[name] = cls.probe()
        if status.available:
            collectors.append(cls())
            log.info("metrics plugin %s loaded: %s", name, status.reason)
        else:
            log.info("metrics plugin %s not loaded: %s", name, status.reason)
    return LoadedPlugins(collectors, statuses)
