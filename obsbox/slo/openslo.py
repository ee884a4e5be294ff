"""OpenSLO v1 in and out: obsbox's SLOs written as OpenSLO documents, and OpenSLO documents read as SLOs.

Out: each SLO is an OpenSLO ``SLO`` with its SLI inline: a latency SLI is a ``thresholdMetric`` on the
histogram (``op: lte``, the threshold as ``value``), an availability SLI a ``ratioMetric`` of counters;
a rolling ``timeWindow``, ``Occurrences`` budgeting, and ``alertPolicies`` naming one ``AlertPolicy``
per burn-rate condition obsbox alerts on, each sent to one ``AlertNotificationTarget`` (Alertmanager).
What OpenSLO has no field for (the runbook, buckets, off_bucket, older names, stage budgets, the
error-budget policy, a dashboard_url other than the default, ...) is kept in
``metadata.annotations`` under ``obsbox.dev/``, so an export reads back as the same SLOs.

In: ``SLO`` documents with their SLI inline or by ``indicatorRef``, Prometheus metric sources (inline
or a ``DataSource`` by ``metricSourceRef``), and alert policies whose burn-rate conditions are ones
obsbox alerts on. Anything else is refused in one line naming the file, line, document and key.
Documents no SLO refers to are checked for their apiVersion and kind only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from obsbox.config import ConfigError, Document, KeyPath, build, dotted, load_yaml_all
from obsbox.durations import UNITS, format_duration, parse_duration
from obsbox.slo.burnalerts import OPS, BurnAlert
from obsbox.slo.periods import DEFAULT_START, Calendar
from obsbox.slo.policies import DEFAULT_DASHBOARD_URL
from obsbox.slo.rules import dump
from obsbox.slo.selectors import LABEL_NAME, Matcher, Selector, parse_matcher, parse_selector
from obsbox.slo.spec import (
    COUNTER_SUFFIXES,
    RAW_WINDOW,
    RESERVED_LABELS,
    SLO,
    BurnCondition,
    SpecFile,
    known_histograms,
    period_problem,
)
from obsbox.slo.timeslices import Timeslices

API_VERSION = "openslo/v1"
PREFIX = "obsbox.dev/"  # annotations that carry what OpenSLO has no field for
NOTIFICATION_TARGET = "obsbox-alertmanager"
OPENSLO_UTC = "Etc/UTC"  # the v1 schema wants Area/Location time zones
BUDGETING = ("Occurrences", "Timeslices", "RatioTimeslices")
KINDS = ("SLO", "SLI", "DataSource", "AlertPolicy", "AlertCondition", "AlertNotificationTarget", "Service")
CALENDAR_KEYS = {"start": "startTime", "time_zone": "timeZone"}
THRESHOLD_OPS = ("lte", "lt")  # a latency SLI counts the requests at or under its threshold
BURN_OPS = ("gte", "gt")  # obsbox alerts when the burn rate reaches the condition's factor
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # metadata.name (RFC 1123, as the Go SDK checks)
_LABEL_VALUE = re.compile(r"[a-z0-9A-Z][a-z0-9A-Z._-]{0,61}[a-z0-9A-Z]?")  # the v1 schema's label values
_SUM = re.compile(r"\s*sum\s*\((.*)\)\s*", re.DOTALL)
DESCRIPTION_MAX = 1050
LATENCY_ANNOTATIONS = ("histogram", "off-bucket", "buckets", "older-names")  # the spec's keys, '_' as '-'
# lists and mappings, as JSON
JSON_ANNOTATIONS = {"buckets", "older-names", "filters", "counters", "labels", "budgets", "policy"}


# --- out ----------------------------------------------------------------------------------------


def export(slos: Sequence[SLO]) -> list[dict[str, Any]]:
    """The OpenSLO v1 documents for ``slos``: their SLO documents, then the alert policies they name and
    the notification target those send to."""
    names: dict[str, str] = {}
    for slo in slos:
        name = openslo_name(slo.name)
        if name in names:
            raise ConfigError(f"becomes the OpenSLO name {name!r}, as {names[name]} does", source=f"SLO {slo.name}")
        names[name] = slo.name
    policies = {_policy_name(slo, c): _policy(slo, c) for slo in slos for c in slo.burn_conditions()}
    policies |= {_alert_policy_name(slo, a): _alert_policy(slo, a) for slo in slos for a in slo.alerts}
    target = _document(
        "AlertNotificationTarget",
        {"name": NOTIFICATION_TARGET},
        {
            "description": "Prometheus sends the burn-rate alerts to Alertmanager, labelled with severity, slo, "
            "service, long_window and short_window; route them on those labels.",
            "target": "alertmanager",
        },
    )
    return [*(_slo_document(slo) for slo in slos), *policies.values(), target]


def dumps(documents: Sequence[Mapping[str, Any]]) -> str:
    """OpenSLO documents as one YAML stream, ``---`` between them."""
    return "---\n".join(dump(dict(document)) for document in documents)


def openslo_name(name: str) -> str:
    """An obsbox name as an OpenSLO ``metadata.name`` (an RFC 1123 label): ReplyLatency -> reply-latency."""
    slug = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower().replace("_", "-")
    if not _DNS_LABEL.fullmatch(slug):
        raise ConfigError(f"{slug!r} is not an OpenSLO name (lowercase, digits and '-', at most 63)", source=name)
    return slug


def _document(kind: str, metadata: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def _metadata(name: str, annotations: Mapping[str, str], labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if labels:
        out["labels"] = dict(labels)
    if annotations:
        out["annotations"] = {PREFIX + key: value for key, value in annotations.items()}
    return out


def _slo_document(slo: SLO) -> dict[str, Any]:
    name = openslo_name(slo.name)
    annotations: dict[str, str] = {}
    if name != slo.name:
        annotations["name"] = slo.name
    labels = slo.labels
    if not all(_LABEL_VALUE.fullmatch(value) for value in labels.values()):
        annotations["labels"], labels = json.dumps(labels), {}
    annotations["runbook"] = slo.runbook
    if slo.runbook_url:
        annotations["runbook-url"] = slo.runbook_url
    if slo.budgets is not None:
        annotations["budgets"] = json.dumps(slo.budgets.plain())
    if slo.policy:
        annotations["policy"] = json.dumps([dataclasses.asdict(step) for step in slo.policy])
    if slo.dashboard_url not in (None, DEFAULT_DASHBOARD_URL):
        annotations["dashboard-url"] = str(slo.dashboard_url)
    if slo.objective_of is not None:
        annotations["objective-of"] = slo.objective_of
    service = str(slo.service)
    if not _DNS_LABEL.fullmatch(service):
        annotations["service"], service = service, openslo_name(service)
    if len(slo.description) > DESCRIPTION_MAX:
        raise ConfigError(f"is longer than OpenSLO's {DESCRIPTION_MAX} characters", source=slo.name, key="description")
    sli, sli_annotations, objective = _indicator(slo)
    spec: dict[str, Any] = {"description": slo.description} if slo.description else {}
    spec |= {
        "service": service,
        "indicator": {"metadata": _metadata(name, sli_annotations), "spec": sli},
        "timeWindow": [_time_window(slo)],
        "budgetingMethod": "Occurrences" if slo.timeslices is None else slo.timeslices.method,
        "objectives": [{**objective, "target": slo.objective, **_slices(slo)}],
        "alertPolicies": [{"alertPolicyRef": _policy_name(slo, c)} for c in slo.burn_conditions()]
        + [{"alertPolicyRef": _alert_policy_name(slo, a)} for a in slo.alerts],
    }
    return _document("SLO", _metadata(name, annotations, labels), spec)


def _time_window(slo: SLO) -> dict[str, Any]:
    if slo.calendar is None:
        return {"duration": openslo_duration(slo.window), "isRolling": True}
    zone = slo.calendar.time_zone
    calendar = {"startTime": str(slo.calendar.start), "timeZone": OPENSLO_UTC if zone == "UTC" else zone}
    return {"duration": slo.window, "isRolling": False, "calendar": calendar}


def _slices(slo: SLO) -> dict[str, Any]:
    """A time-slice objective's fields: the slice, its target, and for a ratio SLI how a slice's good
    share compares with it."""
    slices = slo.timeslices
    if slices is None:
        return {}
    out: dict[str, Any] = {"timeSliceWindow": slices.window}
    if slices.target is not None:
        out["timeSliceTarget"] = slices.target
        if slo.sli.kind == "availability":
            out["op"] = slices.op
    return out


def _indicator(slo: SLO) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """The SLI's spec, the annotations that keep what OpenSLO cannot say, and the objective's op/value."""
    sli, annotations = slo.sli, dict[str, str]()
    if sli.kind == "latency":
        query = Selector(str(sli.metric), slo.matchers)
        if sli.histogram != "classic":
            annotations["histogram"] = sli.histogram
        if sli.off_bucket != "refuse":
            annotations["off-bucket"] = sli.off_bucket
        if sli.buckets is not None:
            annotations["buckets"] = json.dumps(sli.buckets)
        if sli.older_names:
            annotations["older-names"] = json.dumps(sli.older_names)
        metric = {"thresholdMetric": _metric_source(query)}
        return metric, annotations, {"op": "lte", "value": sli.threshold}
    if slo.filters:
        annotations["filters"] = json.dumps(slo.filters)
    if sli.counters:
        annotations["counters"] = json.dumps(sli.counters)
    if sli.raw is not None:
        raw = sli.raw if sli.raw_template else parse_selector(sli.raw).where(*slo.matchers)
        return {"ratioMetric": {"rawType": sli.raw_type, "raw": _metric_source(raw)}}, annotations, {}
    ratio: dict[str, Any] = {"counter": not sli.gauges}
    for key in ("good", "bad", "total"):
        text = getattr(sli, key)
        if text is not None:
            ratio[key] = _metric_source(parse_selector(text).where(*slo.matchers))
    return {"ratioMetric": ratio}, annotations, {}


def _metric_source(query: Selector | str) -> dict[str, Any]:
    return {"metricSource": {"type": "Prometheus", "spec": {"query": str(query)}}}


def _policy_name(slo: SLO, condition: BurnCondition) -> str:
    return f"obsbox-{condition.severity}-{condition.long_window}-{condition.short_window}-{slo.nominal_window}"


def _policy(slo: SLO, c: BurnCondition) -> dict[str, Any]:
    name = _policy_name(slo, c)
    what = f"burn rate >= {c.factor:g} over {c.long_window} and {c.short_window}"
    condition = {
        "kind": "burnrate",
        "op": "gte",
        "threshold": c.factor,
        "lookbackWindow": c.long_window,
        "alertAfter": c.short_window,
    }
    return _document(
        "AlertPolicy",
        {"name": name, "displayName": f"{c.severity}: {what}"},
        {
            "description": f"obsbox's {c.severity} alert for SLOs over {slo.nominal_window}: the {what} (the error "
            f"ratio over both windows at least {c.factor:g} times the error budget). alertAfter is the short window.",
            "alertWhenBreaching": True,
            "alertWhenResolved": False,
            "alertWhenNoData": True,  # every SLO also gets SLONoData (a ticket) when its events have no series
            "conditions": [
                {
                    "kind": "AlertCondition",
                    "metadata": {"name": name},
                    "spec": {"severity": c.severity, "condition": condition},
                }
            ],
            "notificationTargets": [{"targetRef": NOTIFICATION_TARGET}],
        },
    )


def _alert_policy_name(slo: SLO, alert: BurnAlert) -> str:
    name = f"{openslo_name(slo.name)}-{alert.label}"
    if not _DNS_LABEL.fullmatch(name):
        raise ConfigError(f"{name!r} is longer than an OpenSLO name (63)", source=f"SLO {slo.name}", key="alerts")
    return name


def _alert_policy(slo: SLO, alert: BurnAlert) -> dict[str, Any]:
    """A single-window condition of the SLO's ``alerts`` as an alert policy with its condition inline."""
    condition = {
        "kind": "burnrate",
        "op": alert.op,
        "threshold": alert.threshold,
        "lookbackWindow": alert.window,
        "alertAfter": alert.after,
    }
    return _document(
        "AlertPolicy",
        {"name": _alert_policy_name(slo, alert)},
        {
            "description": f"{slo.name}'s own alert: {alert.describe()} (obsbox's SLOBurnRate alert).",
            "alertWhenBreaching": True,
            "alertWhenResolved": False,
            "alertWhenNoData": True,
            "conditions": [
                {
                    "kind": "AlertCondition",
                    "metadata": {"name": alert.label},
                    "spec": {"severity": alert.severity, "condition": condition},
                }
            ],
            "notificationTargets": [{"targetRef": NOTIFICATION_TARGET}],
        },
    )


# --- in -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """An OpenSLO object (a document, or one inlined in it), located for error messages."""

    data: Any
    doc: Document
    label: str  # the document it is in: "SLO search-slo"
    root: KeyPath = ()  # where that document is in its YAML document (in a list of objects: its index)
    at: KeyPath = ()  # where this object is in that document

    @property
    def name(self) -> str:
        return str(self.get("metadata", "name"))

    def get(self, *keys: str | int) -> Any:
        value = self.data
        for key in keys:
            in_list = isinstance(value, list) and isinstance(key, int) and key < len(value)
            if not (in_list or (isinstance(value, dict) and key in value)):
                return None
            value = value[key]
        return value

    def child(self, *keys: str | int) -> Node:
        return Node(self.get(*keys), self.doc, self.label, self.root, (*self.at, *keys))

    def error(self, keys: KeyPath, message: str) -> ConfigError:
        line = self.doc.error((*self.root, *self.at, *keys), message).line
        return ConfigError(message, source=self.doc.source, line=line, key=f"{self.label}: {dotted((*self.at, *keys))}")

    def annotations(self) -> dict[str, Any]:
        """The object's ``obsbox.dev/`` annotations, without the prefix, JSON ones decoded."""
        found = self.get("metadata", "annotations") or {}
        out: dict[str, Any] = {}
        for key, value in found.items():
            if key.startswith(PREFIX):
                name = key[len(PREFIX) :]
                try:
                    out[name] = json.loads(value) if name in JSON_ANNOTATIONS else str(value)
                except (json.JSONDecodeError, TypeError):
                    raise self.error(("metadata", "annotations", key), "is not JSON") from None
        return out


@dataclass
class Imported:
    """The SLOs read, as spec entries (what ``spec_text`` writes) and validated; and what the reader
    should know about them (an SLO that came without a runbook)."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    slos: list[SLO] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def load(paths: Sequence[str | Path]) -> Imported:
    """The SLOs of the OpenSLO v1 documents in ``paths``, validated as obsbox validates a spec."""
    index: dict[tuple[str, str], Node] = {}
    for node in documents(paths):
        first = index.setdefault((node.data["kind"], node.name), node)
        if first is not node:
            raise node.error(("metadata", "name"), f"a second {node.label}; the first is in {first.doc.source}")
    imported = Imported()
    histograms = known_histograms()
    names: dict[str, Node] = {}
    for (kind, _), node in index.items():
        if kind != "SLO":
            continue
        for entry in _slos(node, index, imported.notes):
            slo = _validated(node, entry, histograms)
            if slo.name in names:
                raise node.error(("metadata",), f"is the obsbox SLO {slo.name}, as {names[slo.name].label} is")
            names[slo.name] = node
            if alerts := _alert_policies(node, slo, index):
                entry["alerts"] = alerts
                slo = _validated(node, entry, histograms)
            imported.entries.append(entry)
            imported.slos.append(slo)
    if not imported.slos:
        raise ConfigError("no SLO documents (kind: SLO) to import", source=", ".join(map(str, paths)))
    return imported


def documents(paths: Sequence[str | Path]) -> Iterator[Node]:
    """Every OpenSLO object in ``paths``: ``---``-separated documents, each one object or a list of them."""
    for path in paths:
        for doc in load_yaml_all(path):
            items = enumerate(doc.data) if isinstance(doc.data, list) else [(None, doc.data)]
            for i, data in items:
                root: KeyPath = () if i is None else (i,)
                node = Node(data, doc, "document", root)
                if not isinstance(data, dict) or not isinstance(node.get("metadata", "name"), str):
                    raise node.error((), "is not an OpenSLO object (apiVersion, kind, metadata.name, spec)")
                node = Node(data, doc, f"{data.get('kind')} {node.name}", root)
                if data.get("apiVersion") != API_VERSION:
                    raise node.error(("apiVersion",), f"{data.get('apiVersion')!r}: only {API_VERSION} is read")
                if data.get("kind") not in KINDS:
                    raise node.error(("kind",), f"{data.get('kind')!r} is not an OpenSLO v1 kind ({', '.join(KINDS)})")
                yield node


def _validated(node: Node, entry: dict[str, Any], histograms: Mapping[str, Sequence[float]]) -> SLO:
    """The spec entry as the SLO ``obsbox slo check`` would make of it; refused in one line on the SLO."""
    try:
        slo = build(SLO, entry, Document(entry, node.doc.source))
    except ConfigError as exc:
        raise node.error(
            ("metadata", "annotations"), f"obsbox refuses the SLO it makes: {exc.key}: {exc.message}"
        ) from None
    slo.inherit(SpecFile(slos=[]))
    slo.sli.resolve(histograms)
    for key, message in slo.problems(histograms):
        hint = f" (say so with the SLI's annotation {PREFIX}buckets)" if key == ("sli", "metric") else ""
        raise node.error(("spec",), f"obsbox refuses the SLO it makes: {dotted(key)}: {message}{hint}")
    return slo


def _slos(node: Node, index: Mapping[tuple[str, str], Node], notes: list[str]) -> list[dict[str, Any]]:
    """The obsbox spec entries of an OpenSLO SLO document: one per objective. Each objective of a ratio
    SLI is its own SLO (``<name>-<objective's displayName, or its number>``) with its own rules and
    alerts, as Nobl9 alerts per objective; they share the SLI (``objective_of``)."""
    spec = node.child("spec")
    objectives = spec.get("objectives") or []
    if not objectives:
        raise spec.error(("objectives",), "needs an objective (a target)")
    if len(objectives) > 1:
        indicator = _ref(spec, ("indicator",), ("indicatorRef",), "SLI", index)
        if indicator.get("spec", "thresholdMetric") is not None:
            raise spec.error(
                ("objectives",),
                f"{len(objectives)} objectives on a thresholdMetric SLI: OpenSLO allows one (its README, Notes "
                "(SLO): objectives); only a ratioMetric SLI takes several",
            )
    entries = [_slo(node, index, notes if i == 0 else [], i) for i in range(len(objectives))]
    if len(entries) > 1:
        base = entries[0]["name"]
        for i, entry in enumerate(entries):
            entry["name"] = objective_name(base, spec.get("objectives", i, "displayName"), i)
            entry["objective_of"] = base
    names = [entry["name"] for entry in entries]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise spec.error(("objectives", i, "displayName"), f"makes the SLO name {name} a second time")
    return entries


def objective_name(base: str, display: Any, i: int) -> str:
    """An objective's SLO name: its displayName as a name (SLA -> base-sla), else its number (base-2)."""
    slug = re.sub(r"[^a-z0-9]+", "-", str(display or "").lower()).strip("-")
    return f"{base}-{slug or i + 1}"


def _slo(node: Node, index: Mapping[tuple[str, str], Node], notes: list[str], i: int = 0) -> dict[str, Any]:
    """The obsbox spec entry of an OpenSLO SLO document's ``i``-th objective."""
    spec = node.child("spec")
    budgeting = spec.get("budgetingMethod") or "Occurrences"
    if budgeting not in BUDGETING:
        raise spec.error(("budgetingMethod",), f"{budgeting!r} is not one of {', '.join(BUDGETING)}")
    objective = spec.child("objectives", i)
    if objective.get("indicator") is not None or objective.get("indicatorRef") is not None:
        raise objective.error((), "a composite SLO: obsbox reads one SLI per SLO")
    annotations = node.annotations()
    entry: dict[str, Any] = {"name": annotations.get("name", node.name)}
    if "objective-of" in annotations:
        entry["objective_of"] = annotations["objective-of"]
    entry["service"] = annotations.get("service", spec.get("service"))
    if description := spec.get("description") or node.get("metadata", "displayName"):
        entry["description"] = description
    entry["objective"] = _target(objective)
    entry |= _window(spec)
    indicator = _ref(spec, ("indicator",), ("indicatorRef",), "SLI", index)
    entry["sli"], filters = _sli(indicator, objective, index)
    if budgeting != "Occurrences":
        entry["timeslices"] = _timeslices(objective, budgeting, ratio=entry["sli"]["kind"] == "availability")
    if filters:
        entry["filters"] = filters
    if labels := _labels(node, annotations):
        entry["labels"] = labels
    if "runbook" not in annotations:
        notes.append(f"{node.doc.source}: {node.label} has no runbook (annotation {PREFIX}runbook); write one")
    entry["runbook"] = annotations.get(
        "runbook", f"The OpenSLO SLO {node.name} came without a runbook: say here what to do when it burns."
    )
    if "runbook-url" in annotations:
        entry["runbook_url"] = annotations["runbook-url"]
    if "budgets" in annotations:
        entry["budgets"] = annotations["budgets"]
    if "policy" in annotations:
        entry["policy"] = annotations["policy"]
    if "dashboard-url" in annotations:
        entry["dashboard_url"] = annotations["dashboard-url"]
    return entry


def _ref(node: Node, inline: KeyPath, ref: KeyPath, kind: str, index: Mapping[tuple[str, str], Node]) -> Node:
    """The object at ``inline`` in ``node``, or the document of ``kind`` that ``ref`` names (a bare name
    at ``inline`` is a reference too, as the v1 JSON schema writes alertPolicies)."""
    value = node.get(*inline)
    name, at = (value, inline) if isinstance(value, str) else (node.get(*ref), ref)
    if name is None:
        if not isinstance(value, dict):
            raise node.error(inline, f"needs an inline {kind} or a reference to one ({dotted(ref)})")
        return node.child(*inline)
    found = index.get((kind, str(name)))
    if found is None:
        raise node.error(at, f"no {kind} named {name!r} in the documents read")
    return found


def _sli(node: Node, objective: Node, index: Mapping[tuple[str, str], Node]) -> tuple[dict[str, Any], list[str]]:
    """The spec's ``sli`` of an OpenSLO SLI (inline or a document), and the SLO's filters."""
    annotations = node.annotations()
    spec = node.child("spec")
    if spec.get("thresholdMetric") is not None:
        op, value = objective.get("op"), objective.get("value")
        if op not in THRESHOLD_OPS or not isinstance(value, int | float) or isinstance(value, bool):
            raise objective.error(
                ("op",),
                f"op {op} value {value}: obsbox's threshold SLIs count the events at or under a value (op lte "
                "or lt, and a value)",
            )
        source = spec.child("thresholdMetric", "metricSource")
        text = _query_text(source, index)
        if not _is_selector(text):
            raise source.error(
                ("spec", "query"),
                f"{' '.join(text.split())!r} is a value over time (a gauge), not a histogram: obsbox's threshold "
                f"SLIs count a histogram's events at or under the value; a gauge held {op} {value} at each moment "
                "(its good minutes, OpenSLO's Timeslices) is not built; write the SLI as a ratio (good or bad, and "
                "total)",
            )
        query = _query(source, index, summed=False)
        sli: dict[str, Any] = {"kind": "latency", "metric": query.metric, "threshold": value}
        sli |= {key.replace("-", "_"): annotations[key] for key in LATENCY_ANNOTATIONS if key in annotations}
        return sli, [str(m) for m in query.matchers]
    ratio = spec.get("ratioMetric")
    if not isinstance(ratio, dict):
        raise spec.error((), "needs a thresholdMetric or a ratioMetric")
    if objective.get("value") is not None:
        raise objective.error(("value",), "belongs to a threshold SLI; a ratio SLI's objective is its target")
    if objective.get("op") not in (None, "gte", "gt"):
        raise objective.error(
            ("op",), f"{objective.get('op')}: a ratio SLI's good share is held at or above its target (gt or gte)"
        )
    if "raw" in ratio:
        return _raw(spec, index, annotations)
    queries = {
        key: _query(spec.child("ratioMetric", key, "metricSource"), index, summed=True)
        for key in ("good", "bad", "total")
        if key in ratio
    }
    filters = _common_filters(queries.values(), annotations.get("filters", []))
    cut = len(filters)
    sli = {"kind": "availability"}
    sli |= {key: str(Selector(q.metric, q.matchers[: len(q.matchers) - cut])) for key, q in queries.items()}
    counters = annotations.get(
        "counters", [q.metric for q in queries.values() if not q.metric.endswith(COUNTER_SUFFIXES)]
    )
    if ratio.get("counter") is False:
        sli["gauges"] = True
    elif counters:
        sli["counters"] = list(dict.fromkeys(counters))
    return sli, [str(m) for m in filters]


def _raw(
    spec: Node, index: Mapping[tuple[str, str], Node], annotations: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """A precomputed ratio (ratioMetric ``raw``, "the precomputed ratio stored as a metric", OpenSLO's
    README, SLI): a series selector, each window its mean, or a query with ``{{.window}}``, each window
    put in; ``rawType`` says whether it is the good share (success) or the bad one (failure)."""
    kind = spec.get("ratioMetric", "rawType")
    if kind not in ("success", "failure"):
        raise spec.error(
            ("ratioMetric", "rawType"),
            f"{kind}: a raw ratio needs rawType success (good / total) or failure (bad / total)",
        )
    source = spec.child("ratioMetric", "raw", "metricSource")
    text = _query_text(source, index)
    if RAW_WINDOW in text:
        return {"kind": "availability", "raw": text.strip(), "raw_type": kind}, []
    try:
        query = parse_selector(text)
    except ValueError:
        raise source.error(
            ("spec", "query"),
            f"{text.strip()!r}: a raw ratio is a series selector (each window its mean) or a query with "
            f"{RAW_WINDOW} where each window goes",
        ) from None
    filters = _common_filters([query], annotations.get("filters", []))
    raw = Selector(query.metric, query.matchers[: len(query.matchers) - len(filters)])
    return {"kind": "availability", "raw": str(raw), "raw_type": kind}, [str(m) for m in filters]


def _common_filters(queries: Iterable[Selector], filters: Sequence[str]) -> list[Matcher]:
    """The ``filters`` annotation's matchers when every query ends with them (as an export writes them),
    else none: the queries are what a foreign tool reads and edits, so they win."""
    try:
        matchers = [parse_matcher(text) for text in filters]
    except (ValueError, TypeError):
        return []
    tail = len(matchers)
    if tail and all(len(q.matchers) >= tail and list(q.matchers[-tail:]) == matchers for q in queries):
        return matchers
    return []


def _query(source: Node, index: Mapping[tuple[str, str], Node], summed: bool) -> Selector:
    """The series selector of a Prometheus metric source; ``summed`` also takes ``sum(selector)``."""
    query = _query_text(source, index)
    inner = _SUM.fullmatch(query)
    try:
        return parse_selector(inner.group(1) if summed and inner else query)
    except ValueError:
        allowed = "a series selector or sum(selector)" if summed else "a histogram's series selector"
        raise source.error(
            ("spec", "query"), f"{query.strip()!r} is not {allowed}; obsbox writes the rate() and windows itself"
        ) from None


def _is_selector(text: str) -> bool:
    try:
        parse_selector(text)
    except ValueError:
        return False
    return True


def _query_text(source: Node, index: Mapping[tuple[str, str], Node]) -> str:
    """The query of a Prometheus metric source, as written."""
    kind = source.get("type")
    ref = source.get("metricSourceRef")
    if kind is None and ref is not None:
        found = index.get(("DataSource", str(ref)))
        if found is None:
            raise source.error(("metricSourceRef",), f"no DataSource named {ref!r} in the documents read")
        kind = found.get("spec", "type")
    if str(kind).lower() != "prometheus":
        raise source.error(("type",), f"{kind}: obsbox builds Prometheus rules and reads only Prometheus sources")
    query = source.get("spec", "query")
    if not isinstance(query, str):
        raise source.error(("spec",), "needs 'query', a PromQL series selector")
    return query


def _target(objective: Node) -> float:
    target, percent = objective.get("target"), objective.get("targetPercent")
    if isinstance(target, int | float) and not isinstance(target, bool):
        return float(target)
    if isinstance(percent, int | float) and not isinstance(percent, bool):
        return float(percent) / 100
    raise objective.error(("target",), "needs a target (or targetPercent)")


def _window(spec: Node) -> dict[str, Any]:
    """The spec entry's ``window``, and its ``calendar`` for a calendar-aligned window."""
    if not spec.get("timeWindow"):
        return {"window": "30d"}
    window = spec.child("timeWindow", 0)
    duration = str(window.get("duration"))
    calendar = window.get("calendar")
    if window.get("isRolling") is False or (calendar is not None and window.get("isRolling") is not True):
        if not isinstance(calendar, dict):
            raise window.error((), "a calendar-aligned window (isRolling: false) needs calendar: startTime, timeZone")
        zone = str(calendar.get("timeZone") or "UTC")
        entry = {"start": calendar.get("startTime", DEFAULT_START), "time_zone": "UTC" if zone == OPENSLO_UTC else zone}
        for key, message in Calendar(**entry).problems(duration):
            where = ("duration",) if key == ("window",) else ("calendar", CALENDAR_KEYS[str(key[-1])])
            hint = " (m is minutes; M is months)" if duration.endswith("m") and key == ("window",) else ""
            raise window.error(where, message + hint)
        return {"window": duration, "calendar": Calendar(**entry).__dict__}
    try:
        period = format_duration(parse_duration(duration))
    except ValueError as exc:
        problem = period_problem(duration) if duration[-1:] in ("M", "Q", "Y") else str(exc)
        raise window.error(("duration",), str(problem)) from None
    if (problem := period_problem(period)) is not None:
        raise window.error(("duration",), problem)
    return {"window": period}


def _timeslices(objective: Node, budgeting: str, ratio: bool) -> dict[str, Any]:
    """The spec entry's ``timeslices`` from a Timeslices or RatioTimeslices objective."""
    length = objective.get("timeSliceWindow")
    if length is None:
        raise objective.error(("timeSliceWindow",), f"{budgeting} needs the slice's length (timeSliceWindow)")
    out: dict[str, Any] = {"window": f"{length}m" if isinstance(length, int | float) else str(length)}
    if budgeting == "Timeslices":
        target = objective.get("timeSliceTarget")
        if not isinstance(target, int | float) or isinstance(target, bool):
            raise objective.error(
                ("timeSliceTarget",), "Timeslices needs the share of good events that makes a slice good"
            )
        out["target"] = float(target)
        if ratio and objective.get("op") == "gt":
            out["op"] = "gt"
    problems = Timeslices(**out).problems()
    for key, message in problems:
        raise objective.error(("timeSliceWindow" if key == ("window",) else "timeSliceTarget",), message)
    return out


def openslo_duration(window: str) -> str:
    """An obsbox period in OpenSLO's shorthand, one number and one unit: 30d, 36h."""
    seconds = int(parse_duration(window))
    unit = next(u for u in ("d", "h", "m") if seconds % int(UNITS[u]) == 0)
    return f"{seconds // int(UNITS[unit])}{unit}"


def _labels(node: Node, annotations: Mapping[str, Any]) -> dict[str, str]:
    """The SLO's alert labels: the ``labels`` annotation, else OpenSLO's (a list of values joined with ',')."""
    found = annotations.get("labels")
    if not isinstance(found, dict):
        found = {
            key: ",".join(map(str, value)) if isinstance(value, list) else str(value)
            for key, value in (node.get("metadata", "labels") or {}).items()
        }
    for key in found:
        if key in RESERVED_LABELS or not LABEL_NAME.fullmatch(str(key)):
            raise node.error(("metadata", "labels", key), "is not a label name obsbox can add to its alerts")
    return {str(key): str(value) for key, value in found.items()}


def _alert_policies(node: Node, slo: SLO, index: Mapping[tuple[str, str], Node]) -> list[dict[str, Any]]:
    """The SLO's alert conditions that are not among obsbox's four multi-window alerts, as spec ``alerts``
    (single-window ``SLOBurnRate`` alerts, obsbox.slo.burnalerts)."""
    spec = node.child("spec")
    out: list[dict[str, Any]] = []
    for i in range(len(spec.get("alertPolicies") or [])):
        policy = _ref(spec, ("alertPolicies", i), ("alertPolicies", i, "alertPolicyRef"), "AlertPolicy", index)
        for j in range(len(policy.get("spec", "conditions") or [])):
            where = ("spec", "conditions", j)
            alert = _burn_condition(_ref(policy, where, (*where, "conditionRef"), "AlertCondition", index), slo)
            if alert is not None and alert not in out:
                out.append(alert)
    return out


def _burn_condition(node: Node, slo: SLO) -> dict[str, Any] | None:
    """None for one of obsbox's own multi-window alerts (as an export writes them), else the spec's
    ``alerts`` entry; refused in one line when a key OpenSLO requires is missing (its README,
    "AlertCondition": op, threshold and lookbackWindow; alertAfter defaults to 0m)."""
    condition = node.child("spec", "condition")
    kind, op, factor = condition.get("kind") or "burnrate", condition.get("op"), condition.get("threshold")
    lookback, after, severity = (
        condition.get("lookbackWindow"),
        condition.get("alertAfter") or "0m",
        node.get("spec", "severity"),
    )
    if kind != "burnrate":
        raise condition.error(("kind",), f"{kind!r}: OpenSLO v1 defines only burnrate conditions")
    for c in slo.burn_conditions():
        if (
            op in BURN_OPS
            and isinstance(factor, int | float)
            and math.isclose(factor, c.factor, rel_tol=1e-9)
            and _same_duration(lookback, c.long_window)
            and _same_duration(after, c.short_window)
            and severity == c.severity
        ):
            return None
    if op not in OPS:
        raise condition.error(("op",), f"{op}: a burnrate condition needs op (lte, lt, gte or gt); it has no default")
    if not isinstance(factor, int | float) or isinstance(factor, bool):
        raise condition.error(("threshold",), f"{factor}: a burnrate condition needs the burn rate to compare with")
    if lookback is None:
        raise condition.error(("lookbackWindow",), "a burnrate condition needs the window to compare over")
    if not isinstance(severity, str):
        raise node.error(("spec", "severity"), "an alert condition needs its severity (page, ticket, ...)")
    entry = {"severity": severity, "op": op, "threshold": factor, "window": str(lookback), "after": str(after)}
    if _DNS_LABEL.fullmatch(node.name) and node.name != BurnAlert(**entry).label:
        entry = {"name": node.name, **entry}
    return entry


def _same_duration(value: Any, window: str) -> bool:
    try:
        return parse_duration(str(value)) == parse_duration(window)
    except ValueError:
        return False


def spec_text(imported: Imported, sources: Sequence[str | Path]) -> str:
    """The imported SLOs as an obsbox SLO spec (YAML)."""
    header = f"# Imported by `obsbox slo import-openslo` from {', '.join(map(str, sources))}.\n"
    return header + dump({"slos": imported.entries})
