"""Static checks of a Collector config against the component list of the distribution it runs on.

No collector binary is needed: the checks read the config, the distribution's builder manifest
(which Go modules it was built from) and a map from those modules to component type names. A type
the map does not list is looked up by the contrib naming rule (module ``<type without
underscores><kind>``: ``memory_limiter`` is ``memorylimiterprocessor``), so a user's config may use
any component of the distribution, not only the ones our configs use.

- every component the config defines is a type that the distribution contains;
- every component a pipeline (or ``service.extensions``) names is defined, and every defined one is
  used; a connector is the exporter of one pipeline and the receiver of another;
- every ``${env:VAR}`` carries a default (``${env:VAR:-default}``), so the file runs anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from obsbox.config import ENV_REFERENCE

KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")
SUFFIX = {kind: kind[:-1] for kind in KINDS}  # the module name ends in the kind: ...exporter
SIGNALS = ("traces", "metrics", "logs", "profiles")


@dataclass(frozen=True)
class EnvRef:
    name: str
    default: str | None


def env_refs(text: str) -> list[EnvRef]:
    """The ``${env:VAR[:-default]}`` references in a config's text (``$${...}`` is an escape)."""
    refs = []
    for match in ENV_REFERENCE.finditer(text):
        if match.start() > 0 and text[match.start() - 1] == "$":
            continue
        refs.append(EnvRef(match.group(1), match.group(2)))
    return refs


@dataclass
class Distribution:
    """What a collector distribution contains: module versions per kind, type → module, and the
    deprecated type names of renamed components (old → current)."""

    modules: dict[str, dict[str, str]] = field(default_factory=dict)
    types: dict[str, dict[str, str]] = field(default_factory=dict)
    renamed: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def load(cls, manifest: Path, types: Path) -> Distribution:
        data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
        modules: dict[str, dict[str, str]] = {}
        for kind in KINDS:
            modules[kind] = {}
            for entry in data.get(kind) or []:
                path, _, version = entry["gomod"].partition(" ")
                modules[kind][entry.get("import", path)] = version
        type_map = yaml.safe_load(types.read_text(encoding="utf-8"))
        by_type: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        renamed: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        for kind in KINDS:
            for module, entry in (type_map.get(kind) or {}).items():
                # "type" or {type: NEW, deprecated_type: OLD}, as in the module's metadata.yaml
                current = entry["type"] if isinstance(entry, dict) else entry
                by_type[kind][current] = module
                if isinstance(entry, dict) and entry.get("deprecated_type"):
                    by_type[kind][entry["deprecated_type"]] = module
                    renamed[kind][entry["deprecated_type"]] = current
        return cls(modules, by_type, renamed)

    def module_of(self, kind: str, component_type: str) -> str | None:
        """The module providing ``component_type``, if the distribution was built with it.

        The type map wins; without an entry, the module whose last path element is the type without
        underscores followed by the kind (``k8sattributes`` → ``.../k8sattributesprocessor``).
        """
        module = self.types.get(kind, {}).get(component_type)
        if module is not None:
            return module if module in self.modules.get(kind, {}) else None
        wanted = component_type.replace("_", "") + SUFFIX[kind]
        return next((m for m in self.modules.get(kind, {}) if m.rsplit("/", 1)[-1] == wanted), None)


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def defined(config: dict[str, Any]) -> dict[str, set[str]]:
    return {kind: set(config.get(kind) or {}) for kind in KINDS}


def pipelines(config: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    return ((config.get("service") or {}).get("pipelines")) or {}


def used(config: dict[str, Any]) -> dict[str, set[str]]:
    """Component IDs named by the pipelines and by ``service.extensions``, by the section they live in."""
    conns = set(config.get("connectors") or {})
    refs: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for pipeline in pipelines(config).values():
        for role in ("receivers", "processors", "exporters"):
            for ref in pipeline.get(role) or []:
                refs["connectors" if role != "processors" and ref in conns else role].add(ref)
    refs["extensions"] = set((config.get("service") or {}).get("extensions") or [])
    return refs


def problems(config: Any, text: str, dist: Distribution) -> list[str]:
    """Everything wrong with ``config`` (parsed from ``text``) on ``dist``; empty when all is well."""
    if not isinstance(config, dict) or not pipelines(config):
        return ["no service.pipelines: the collector would not start"]
    return [
        *component_problems(config, dist),
        *pipeline_problems(config),
        *connector_problems(config),
        *(
            f"${{env:{ref.name}}} has no default (write ${{env:{ref.name}:-value}})"
            for ref in env_refs(text)
            if ref.default is None
        ),
    ]


def component_problems(config: dict[str, Any], dist: Distribution) -> list[str]:
    """Defined components whose type the distribution lacks, or that nothing uses."""
    found = []
    have, refs = defined(config), used(config)
    for kind in KINDS:
        for cid in sorted(have[kind]):
            if dist.module_of(kind, component_type(cid)) is None:
                found.append(f"{kind}.{cid}: type {component_type(cid)!r} is not in the distribution")
            elif (new := dist.renamed.get(kind, {}).get(component_type(cid))) is not None:
                found.append(f"{kind}.{cid}: type {component_type(cid)!r} is deprecated (renamed {new!r})")
            if cid not in refs[kind]:
                found.append(f"{kind}.{cid}: defined but not used by any pipeline")
    found += [
        f"{ext}: service.extensions names it but it is not defined"
        for ext in sorted(refs["extensions"] - have["extensions"])
    ]
    return found


def pipeline_problems(config: dict[str, Any]) -> list[str]:
    """Pipelines with an unknown signal, no receiver or exporter, or a reference to nothing."""
    found = []
    have = defined(config)
    for name, pipeline in pipelines(config).items():
        if component_type(name) not in SIGNALS:
            found.append(f"service.pipelines.{name}: the signal must be one of {', '.join(SIGNALS)}")
        if not pipeline.get("receivers") or not pipeline.get("exporters"):
            found.append(f"service.pipelines.{name}: needs at least one receiver and one exporter")
        found += [
            f"service.pipelines.{name}.{role}: {ref!r} is not defined"
            for role in ("receivers", "processors", "exporters")
            for ref in pipeline.get(role) or []
            if ref not in have[role] and not (role != "processors" and ref in have["connectors"])
        ]
    return found


def connector_problems(config: dict[str, Any]) -> list[str]:
    """A connector joins two pipelines: it must be an exporter in one and a receiver in another."""
    found = []
    for cid in sorted(defined(config)["connectors"]):
        as_exporter = any(cid in (p.get("exporters") or []) for p in pipelines(config).values())
        as_receiver = any(cid in (p.get("receivers") or []) for p in pipelines(config).values())
        if as_exporter != as_receiver:
            found.append(f"connectors.{cid}: must be the exporter of one pipeline and the receiver of another")
    return found


def check_file(path: Path, dist: Distribution) -> list[str]:
    """The problems of one config file; a file that cannot be read or parsed is one problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [f"cannot read the file: {exc}"]
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [f"not valid YAML: {' '.join(str(exc).split())}"]  # one line per problem
    return problems(config, text, dist)
