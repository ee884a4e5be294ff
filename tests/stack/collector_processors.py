"""The processors of a collector logs pipeline, as a config file sets them, applied to an OTLP logs
request: what reaches the exporter (here: Loki's /otlp) from what the bridge sent.

Only the kinds the shipped configs use are known; any other processor, action or statement fails
the test that meets it rather than passing data through unchanged:
- ``memory_limiter`` and ``batch`` change no data.
- ``resource``: the attributes actions of contrib's internal/coreinternal/attraction (attraction.go,
  AttrProc.Process), in order: ``insert`` sets a key that is absent, ``update`` one that is present,
  ``upsert`` either, from ``value`` or ``from_attribute`` (absent source: no action); ``delete``
  removes ``key`` and the keys ``pattern`` matches.
- ``transform``: OTTL in the resource context, of the one shape the configs use,
  ``set(attributes["K"], "V") where attributes["K"] == nil`` (set when absent).
Values come through the collector's confmap: ``${env:VAR:-default}`` is expanded from the
collector's environment, and a value that is a whole reference is typed as YAML (confmap
expand.go); embedded in a longer string it stays text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from obsbox.config import expand_env

WHOLE_REFERENCE = re.compile(r"\$\{[^}]*\}")
SET_WHEN_NIL = re.compile(r'set\(attributes\["([^"]+)"\], "([^"]*)"\) where attributes\["\1"\] == nil')
PASS_THROUGH = ("memory_limiter", "batch")


def confmap_value(value: Any, env: Mapping[str, str]) -> Any:
    """A config value after the collector's expansion (typed when it is a whole reference)."""
    if not isinstance(value, str):
        return value
    expanded = expand_env(value, env)
    return yaml.safe_load(expanded) if WHOLE_REFERENCE.fullmatch(value) else expanded


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def apply_attributes(attrs: dict[str, AnyValue], actions: list[dict], env: Mapping[str, str]) -> None:
    """attraction.AttrProc.Process for insert, update, upsert and delete."""
    for action in actions:
        kind, key = action["action"].lower(), action.get("key")
        if kind == "delete":
            attrs.pop(key, None)
            if action.get("pattern"):
                for name in [k for k in attrs if re.search(action["pattern"], k)]:
                    del attrs[name]
            continue
        if kind not in ("insert", "update", "upsert"):
            raise NotImplementedError(f"resource action {kind!r}: teach tests/stack/collector_processors.py")
        if "value" in action:
            source: AnyValue | None = any_value(confmap_value(action["value"], env))
        elif "from_attribute" in action:
            source = attrs.get(action["from_attribute"])
        else:
            raise NotImplementedError(f"resource action {action}: only value and from_attribute are known here")
        if source is None:
            continue
        present = key in attrs
        if (kind == "insert" and not present) or (kind == "update" and present) or kind == "upsert":
            attrs[key] = source


def apply_statements(attrs: dict[str, AnyValue], groups: list, env: Mapping[str, str]) -> None:
    for group in groups:
        if not isinstance(group, dict) or group.get("context") != "resource":
            raise NotImplementedError(f"transform statements {group!r}: only the resource context is known here")
        for statement in group["statements"]:
            found = SET_WHEN_NIL.fullmatch(expand_env(statement, env).strip())
            if not found:
                raise NotImplementedError(f"OTTL statement {statement!r}: teach tests/stack/collector_processors.py")
            attrs.setdefault(found.group(1), AnyValue(string_value=found.group(2)))


def apply_to_resource(
    attrs: dict[str, AnyValue], otelcol: dict, env: Mapping[str, str], pipeline: str, signal: str
) -> None:
    """A resource's attributes after the processors of ``service.pipelines.<pipeline>``, in their
    order; ``signal`` (log, trace, metric) picks a transform's ``<signal>_statements``."""
    for name in otelcol["service"]["pipelines"][pipeline]["processors"]:
        kind, config = name.split("/")[0], otelcol["processors"][name]
        if kind == "resource":
            apply_attributes(attrs, config["attributes"], env)
        elif kind == "transform":
            apply_statements(attrs, config.get(f"{signal}_statements", []), env)
        elif kind not in PASS_THROUGH:
            raise NotImplementedError(f"processor {name!r}: teach tests/stack/collector_processors.py")


def apply_logs_pipeline(
    request: ExportLogsServiceRequest, otelcol: dict, env: Mapping[str, str], pipeline: str = "logs"
) -> ExportLogsServiceRequest:
    """``request`` after the processors of ``service.pipelines.<pipeline>``, in their order."""
    out = ExportLogsServiceRequest()
    out.CopyFrom(request)
    for resource_logs in out.resource_logs:
        attrs = {kv.key: AnyValue() for kv in resource_logs.resource.attributes}
        for kv in resource_logs.resource.attributes:
            attrs[kv.key].CopyFrom(kv.value)
        apply_to_resource(attrs, otelcol, env, pipeline, "log")
        del resource_logs.resource.attributes[:]
        resource_logs.resource.attributes.extend(KeyValue(key=k, value=v) for k, v in attrs.items())
    return out
