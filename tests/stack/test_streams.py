"""The same lines land in the same Loki streams on both of compose's ways into Loki: the bridge's
``otlp`` sink -> the collector (its logs pipeline's processors, as collector/otelcol.yaml sets them)
-> Loki's /otlp, and the bridge's ``loki`` push sink straight to Loki.

The collector adds ``deployment.environment`` when a resource lacks it, and Loki's OTLP ingestion
indexes it (``deployment_environment``): a push without it made a second stream per service. The
environment of each container is docker-compose's own rendering of the compose file.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import orjson
import pytest
import yaml
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs

from obsbox.exporters.bridge.sinks.loki import LokiConfig, LokiSink
from tests.bridge.harness import context, traced
from tests.stack.collector_processors import apply_logs_pipeline, confmap_value
from tests.stack.conftest import docker_compose
from tests.stack.loki_double import LokiOTLP, Stream
from tests.stack.test_links import BRIDGE, bridge_request, compose_limits


def now_lines() -> list[bytes]:
    """Lines of two services and of none, written now (Loki refuses old ones)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return [
        orjson.dumps({"time": stamp, "level": "info", "service": "gateway", "msg": "a"}),
        orjson.dumps({"time": stamp, "level": "error", "service": "billing", "msg": "b"}),
        orjson.dumps({"time": stamp, "level": "warn", "msg": "no service"}),
    ]


@pytest.fixture(scope="module", params=["as shipped", "DEPLOYMENT_ENVIRONMENT=staging"])
def compose_env(request, env_file, tmp_path_factory) -> dict[str, dict[str, str]]:
    """Each service's environment as docker-compose renders it, with .env.example or a changed one."""
    path = env_file
    if "=" in request.param:
        name, value = request.param.split("=")
        path = tmp_path_factory.mktemp("env") / "changed.env"
        path.write_text(env_file.read_text().replace(f"\n{name}=local\n", f"\n{name}={value}\n"))
    result = docker_compose("config", env_file=path)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    return {name: dict(service.get("environment") or {}) for name, service in services.items()}


def streams_by_line(result) -> dict[str, Stream]:
    assert not result.rejected, result.rejected
    return {e.line: stream for stream, entries in result.accepted.items() for e in entries}


def over_otlp(lines: list[bytes], otelcol: dict, collector_env: dict[str, str]) -> dict[str, Stream]:
    request = apply_logs_pipeline(bridge_request(*lines), otelcol, collector_env)
    return streams_by_line(LokiOTLP(compose_limits()).push(request, time.time_ns()))


def pushed(lines: list[bytes]) -> dict[str, Stream]:
    sink = LokiSink(LokiConfig(url="http://loki:3100", compression="none"), context())
    ((body, _, _),) = list(sink.requests(traced(*lines)))
    return streams_by_line(LokiOTLP(compose_limits()).push_json(orjson.loads(body), time.time_ns()))


def test_both_compose_paths_give_each_line_the_same_stream(compose_env, otelcol, monkeypatch):
    for name, value in compose_env["bridge"].items():  # both sinks run in the bridge's container
        monkeypatch.setenv(name, value)
    lines = now_lines()
    via_collector = over_otlp(lines, otelcol, compose_env["collector"])
    assert via_collector == pushed(lines)
    environment = compose_env["collector"]["DEPLOYMENT_ENVIRONMENT"]
    assert {dict(s)["deployment_environment"] for s in via_collector.values()} == {environment}
    assert len(set(via_collector.values())) == 3  # one stream per service, not two


def test_without_the_bridge_s_environment_the_push_splits_the_streams(compose_env, otelcol, monkeypatch):
    """What a real Loki showed before: the collector's deployment.environment made a second stream."""
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    lines = now_lines()
    assert over_otlp(lines, otelcol, compose_env["collector"]) != pushed(lines)


def test_the_compose_bridge_s_otlp_sink_is_the_one_the_stack_runs():
    assert BRIDGE.components["sinks"]["otlp"].config.endpoint == "http://collector:4318"


# ---------------------------------------------------------------- the collector double itself


def request_with(**attributes: str) -> ExportLogsServiceRequest:
    kvs = [KeyValue(key=k.replace("_", "."), value=AnyValue(string_value=v)) for k, v in attributes.items()]
    return ExportLogsServiceRequest(resource_logs=[ResourceLogs(resource={"attributes": kvs})])


def attributes_after(actions: list[dict], **attributes: str) -> dict[str, object]:
    otelcol = {
        "processors": {"resource": {"attributes": actions}},
        "service": {"pipelines": {"logs": {"processors": ["resource"]}}},
    }
    out = apply_logs_pipeline(request_with(**attributes), otelcol, {"ENV": "from-env"})
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in out.resource_logs[0].resource.attributes}


@pytest.mark.parametrize(
    ("action", "before", "after"),
    [
        ("insert", {}, {"a": "new"}),
        ("insert", {"a": "old"}, {"a": "old"}),
        ("update", {}, {}),
        ("update", {"a": "old"}, {"a": "new"}),
        ("upsert", {}, {"a": "new"}),
        ("upsert", {"a": "old"}, {"a": "new"}),
    ],
)
def test_the_resource_processor_s_actions_follow_attraction(action, before, after):
    assert attributes_after([{"key": "a", "value": "new", "action": action}], **before) == after


def test_delete_from_attribute_and_typed_references_follow_the_collector():
    assert attributes_after([{"key": "a", "action": "DELETE"}], a="x", b="y") == {"b": "y"}
    assert attributes_after([{"key": "c", "from_attribute": "b", "action": "insert"}], b="y") == {"b": "y", "c": "y"}
    assert attributes_after([{"key": "c", "from_attribute": "z", "action": "upsert"}], b="y") == {"b": "y"}
    assert confmap_value("${env:V:-1.10}", {}) == 1.1  # a whole reference is typed by YAML
    assert confmap_value("v${env:V:-1.10}", {}) == "v1.10"
    with pytest.raises(NotImplementedError, match="hash"):
        attributes_after([{"key": "a", "action": "hash"}], a="x")
