"""The LLM sources file: which metrics of each serving stack give obsbox's breakdown signals.

The signals (``SIGNALS``, from obsbox.breakdown) are obsbox's: the dashboards and SLOs read only
their recorded series. A source maps each signal to its own metrics, or says under ``missing`` why it
has none, so that a gap is stated. Every problem is reported as ``file:line: key: what is wrong``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from obsbox.breakdown import SIGNALS, Signal
from obsbox.config import KeyPath, build, load_yaml
from obsbox.slo.selectors import LABEL_NAME, Selector, parse_selector

INHERIT = "<the source's model_label>"  # a mapping's model_label when it does not set one


@dataclass
class Mapping:
    """Where a source keeps one signal: selectors, the first a target exposes winning (renames)."""

    metric: list[str] = field(default_factory=list)
    part: list[str] = field(default_factory=list)
    whole: list[str] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)
    model_label: str | None = INHERIT
    scale: float = 1.0
    buckets: list[float] | None = None
    note: str = ""

    def selectors(self, key: str) -> list[Selector]:
        """The names as written, then each name with a colon as prometheus_client writes it for Prometheus 2.

        prometheus_client 0.22 and later answer a scraper that asks for OpenMetrics without an
        ``escaping`` parameter (every Prometheus 2.x) with ``escaping=underscores``, and their sample
        lines then read ``vllm_time_to_first_token_seconds`` (prometheus/client_python#1177): vLLM's
        and SGLang's series reach such a Prometheus under those names. They come last, so a target
        that keeps the colon (Prometheus 3, or the text format) is read as before, and counted once.
        """
        written = [parse_selector(text) for text in getattr(self, key)]
        escaped = [Selector(s.metric.replace(":", "_"), s.matchers) for s in written if ":" in s.metric]
        return written + escaped


@dataclass
class Source:
    title: str
    model_label: str | None = None
    same_across: list[str] = field(default_factory=list)
    signals: dict[str, Mapping] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    name: str = field(default="", init=False)

    def model(self, mapping: Mapping) -> str | None:
        """The label holding the served model for ``mapping``: its own, else the source's."""
        return self.model_label if mapping.model_label == INHERIT else mapping.model_label


@dataclass
class SourcesFile:
    sources: dict[str, Source]


def _shipped() -> Path:
    resource = resources.files("obsbox.llm").joinpath("sources.yaml")
    if not isinstance(resource, Path):  # a zip import: its data files have no path
        raise ImportError("obsbox.llm/sources.yaml is not a file on disk; install obsbox unzipped")
    return resource


DEFAULT_SOURCES = _shipped()
# The rules compose's Prometheus loads; a test compares them with a fresh build.
DEFAULT_RULES = Path(__file__).resolve().parents[2] / "compose" / "prometheus" / "rules" / "llm.rules.yml"


def load(path: str | Path = DEFAULT_SOURCES) -> list[Source]:
    """The sources of a sources file, validated; a located ConfigError on the first problem."""
    doc = load_yaml(path)
    if isinstance(doc.data, dict) and isinstance(doc.data.get("sources"), dict):
        for source in doc.data["sources"].values():
            if isinstance(source, dict) and isinstance(source.get("signals"), dict):
                signals = source["signals"]
                for key, value in signals.items():  # a selector or a list of them: the metric
                    if isinstance(value, str | list):
                        signals[key] = {"metric": value}
    spec = build(SourcesFile, doc.data, doc)
    for name, source in spec.sources.items():
        source.name = name
        for key, message in problems(source):
            raise doc.error(("sources", name, *key), message)
    if not spec.sources:
        raise doc.error(("sources",), "lists no sources")
    return list(spec.sources.values())


def problems(source: Source) -> list[tuple[KeyPath, str]]:
    """Everything wrong with one source, as (key path, message) pairs."""
    out: list[tuple[KeyPath, str]] = []
    if not LABEL_NAME.fullmatch(source.name):
        out.append(((), f"{source.name!r} is not usable as a label value here; use letters, digits and '_'"))
    out += [
        (
            ("signals" if key in source.signals else "missing", key),
            f"unknown signal; the signals are {', '.join(SIGNALS)}",
        )
        for key in (*source.signals, *source.missing)
        if key not in SIGNALS
    ]
    out += [
        (("missing", key), "is mapped under signals too; keep one") for key in source.signals if key in source.missing
    ]
    out += [
        ((), f"{label!r} is not a label name")
        for label in [source.model_label, *source.same_across]
        if label is not None and not LABEL_NAME.fullmatch(label)
    ]
    for key, mapping in source.signals.items():
        if key in SIGNALS:
            out += [(("signals", key, *sub), message) for sub, message in _mapping_problems(SIGNALS[key], mapping)]
    silent = [key for key in SIGNALS if key not in source.signals and key not in source.missing]
    return out + [
        ((), f"says nothing about {key}: map it under signals, or say why not under missing") for key in silent
    ]


def _mapping_problems(signal: Signal, mapping: Mapping) -> list[tuple[KeyPath, str]]:
    out: list[tuple[KeyPath, str]] = []
    ratio = signal.kind == "ratio"
    shape = bool(mapping.metric) != bool(mapping.part) and (
        not mapping.part or bool(mapping.whole) != bool(mapping.rest)
    )
    if not shape or (not ratio and (mapping.part or mapping.whole or mapping.rest)):
        want = "'metric', or 'part' with 'whole' or 'rest'" if ratio else "'metric' only"
        out.append(((), f"a {signal.kind} signal takes {want}"))
    for key in ("metric", "part", "whole", "rest"):
        for i, text in enumerate(getattr(mapping, key)):
            try:
                selector = parse_selector(text)
            except ValueError as exc:
                out.append(((key, i), str(exc)))
                continue
            if signal.kind == "histogram" and selector.metric.endswith(("_bucket", "_count", "_sum")):
                out.append(
                    ((key, i), f"{selector.metric}: give the histogram's base name, without _bucket/_count/_sum")
                )
    if mapping.buckets is not None:
        if signal.kind != "histogram":
            out.append((("buckets",), f"only a histogram has buckets; {signal.name} is a {signal.kind}"))
        elif not mapping.buckets or any(b >= a for a, b in zip(mapping.buckets[1:], mapping.buckets, strict=False)):
            out.append((("buckets",), "list the finite upper bounds (le), increasing, without +Inf"))
    if mapping.model_label not in (None, INHERIT) and not LABEL_NAME.fullmatch(mapping.model_label):
        out.append((("model_label",), f"{mapping.model_label!r} is not a label name"))
    if mapping.scale <= 0 or (signal.kind == "histogram" and mapping.scale != 1.0):
        out.append(
            (
                ("scale",),
                "histograms must be in seconds already (their le labels cannot be scaled); "
                "other signals take a positive factor",
            )
        )
    return out
