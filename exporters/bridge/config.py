"""The bridge's YAML: components keyed by ``type[/name]`` under ``sources:``, ``processors:`` and
``sinks:``, wired under ``pipelines:``, as the OTel Collector does. Every CLI form is shorthand for
one of these (``obsbox bridge ... --print-config`` shows which).

    sources:
      tail:
        include: [/var/log/gateway/*.json]
    processors:
      parse: {}
      trace: {correlation_keys: [request_id]}
      redact: {}
    sinks:
      loki: {url: http://localhost:3100}
      file/enriched: {path: enriched.jsonl}
    pipelines:
      logs:
        sources: [tail]
        processors: [parse, trace, redact]
        sinks: [loki, file/enriched]
    settings:
      metrics_port: 9465
      workers: 2               # default: one per available core; 0: everything in the bridge process;
                               # lowered (with a warning) to what the available memory holds
      retry: {initial_interval: 500ms, max_interval: 30s, max_elapsed_time: 0}

Every number in it, a component's included, is a count, a size or a duration, so a negative one is
an error (a plugin that needs a signed value takes it as a string).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from obsbox.config import Document, FieldError, KeyPath, build, load_yaml, parse_yaml
from obsbox.exporters.bridge import registry
from obsbox.exporters.bridge.component import ComponentSpec
from obsbox.exporters.bridge.retry import RetryPolicy

SECTIONS = ("sources", "processors", "sinks")
DEFAULT_PROCESSORS = ["parse", "trace", "redact"]


@dataclass
class BatchConfig:
    max_records: int = 8192
    max_bytes: int = 4 * 1024 * 1024
    timeout: float = 0.2

    def __post_init__(self) -> None:
        if self.max_records < 1 or self.max_bytes < 1:
            raise ValueError("max_records and max_bytes must be positive")


@dataclass
class PipelineConfig:
    sources: list[str]
    sinks: list[str]
    processors: list[str] = field(default_factory=lambda: list(DEFAULT_PROCESSORS))
    batch: BatchConfig = field(default_factory=BatchConfig)


@dataclass
class Settings:
    """Bridge-wide settings. ``once`` and ``poll_interval`` are modes every component sees in its
    context; ``retry`` is the retry policy of every export (a sink may override it)."""

    once: bool = False
    poll_interval: float = 0.1
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    state_dir: Path | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    shutdown_timeout: float = 10.0
    progress: bool = True
    workers: int | None = None  # processes for parse/trace/redact/encode; None: one per available core

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 0:
            raise FieldError("workers", "must be 0 (no worker processes) or more")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise FieldError("metrics_port", f"{self.metrics_port} is not a port: use 1 to 65535 (0: any free port)")
        if self.poll_interval <= 0:
            raise FieldError("poll_interval", "must be more than 0 (such as 100ms)")


@dataclass
class BridgeConfig:
    components: dict[str, dict[str, ComponentSpec]]
    pipelines: dict[str, PipelineConfig]
    settings: Settings
    source: str = "<config>"


def load(path: str | Path) -> BridgeConfig:
    return from_document(load_yaml(path))


def from_text(text: str, source: str = "<config>") -> BridgeConfig:
    return from_document(parse_yaml(text, source))


def from_data(data: dict[str, Any], source: str = "<cli>") -> BridgeConfig:
    return from_document(Document(data, source))


def from_document(doc: Document) -> BridgeConfig:
    data = doc.data
    if not isinstance(data, dict):
        raise doc.error((), "the bridge config must be a mapping")
    for key in data:
        if key not in (*SECTIONS, "pipelines", "settings"):
            raise doc.error((key,), "unknown section (known: sources, processors, sinks, pipelines, settings)")
    components: dict[str, dict[str, ComponentSpec]] = {}
    for kind in SECTIONS:
        section = data.get(kind) or {}
        if not isinstance(section, dict):
            raise doc.error((kind,), "must be a mapping of type[/name] to settings")
        components[kind] = {key: _component(doc, kind, key, value) for key, value in section.items()}
    pipelines_data = data.get("pipelines")
    if not isinstance(pipelines_data, dict) or not pipelines_data:
        raise doc.error(("pipelines",), "at least one pipeline is required")
    pipelines = {
        name: build_checked(PipelineConfig, spec, doc, ("pipelines", name)) for name, spec in pipelines_data.items()
    }
    defaulted = {name for name, spec in pipelines_data.items() if "processors" not in (spec or {})}
    _check_wiring(doc, components, pipelines, defaulted)
    settings = build_checked(Settings, data.get("settings"), doc, ("settings",))
    return BridgeConfig(components, pipelines, settings, doc.source)


def build_checked(cls: type, value: Any, doc: Document, path: KeyPath) -> Any:
    """``build``, then refuse a negative number anywhere in what it built (see the module docstring)."""
    config: Any = build(cls, value, doc, path)
    negative = _negative(config, path)
    if negative is not None:
        raise doc.error(negative, "must not be negative (it is a count, a size or a duration)")
    return config


def _negative(value: Any, path: KeyPath) -> KeyPath | None:
    """Where the first negative number of a config dataclass is, nested ones included (not in lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for spec in dataclasses.fields(value):
            found = _negative(getattr(value, spec.name), (*path, spec.name))
            if found is not None:
                return found
    elif isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return path
    return None


def _component(doc: Document, kind: str, key: str, value: Any) -> ComponentSpec:
    type_name = key.split("/", 1)[0]
    try:
        cls = registry.load(kind, type_name)
    except registry.UnknownComponentError as exc:
        raise doc.error((kind, key), str(exc)) from None
    return ComponentSpec(kind, key, cls, build_checked(cls.Config, value, doc, (kind, key)))


def _check_wiring(
    doc: Document,
    components: dict[str, dict[str, ComponentSpec]],
    pipelines: dict[str, PipelineConfig],
    defaulted: set[str],
) -> None:
    """Every reference defined, every component used, each source in one pipeline. ``defaulted``:
    the pipelines that run the default processors because they list none."""
    used: dict[str, set[str]] = {kind: set() for kind in SECTIONS}
    source_owner: dict[str, str] = {}
    for name, pipeline in pipelines.items():
        if not pipeline.sources or not pipeline.sinks:
            raise doc.error(("pipelines", name), "a pipeline needs at least one source and one sink")
        for kind in SECTIONS:
            for i, ref in enumerate(getattr(pipeline, kind)):
                if ref not in components[kind] and kind == "processors" and name in defaulted:
                    defined = ", ".join(f"{key}: {{}}" for key in DEFAULT_PROCESSORS)
                    raise doc.error(
                        ("pipelines", name),
                        f"lists no processors, so it runs the default ones, [{', '.join(DEFAULT_PROCESSORS)}], "
                        f"and {ref!r} is not defined under processors: define them (processors: {{{defined}}}) "
                        "or write processors: [] in the pipeline to run none",
                    )
                if ref not in components[kind]:
                    defined = ", ".join(components[kind]) or "none"
                    raise doc.error(
                        ("pipelines", name, kind, i), f"{ref!r} is not defined under {kind}: (defined: {defined})"
                    )
                used[kind].add(ref)
        for i, ref in enumerate(pipeline.sources):
            if ref in source_owner:
                raise doc.error(
                    ("pipelines", name, "sources", i),
                    f"source {ref!r} already feeds pipeline {source_owner[ref]!r}; "
                    "a source feeds one pipeline (list several sinks in it instead)",
                )
            source_owner[ref] = name
    for kind in SECTIONS:
        for key in components[kind]:
            if key not in used[kind]:
                raise doc.error((kind, key), "defined but not used by any pipeline")
