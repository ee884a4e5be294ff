"""collector/agent.yaml and collector/gateway.yaml: the two halves of otelcol.yaml for a cluster.

The component types come from the pinned otelcol-contrib 0.159.0 manifest (collector/testdata). The
load_balancing exporter's keys are those of exporter/loadbalancingexporter/config.go, read at v0.136.0
(routing_key; protocol.otlp; resolver.k8s.service as "name.namespace", resolver.k8s.ports); 0.159.0
renamed the type from loadbalancing but its keys are not verified at that tag here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from obsbox import conventions
from obsbox.collector import check
from tests.deploy.conftest import COLLECTOR_DIR, REPO, by_kind, container, env_of

TESTDATA = COLLECTOR_DIR / "testdata"


@pytest.fixture(scope="module")
def dist() -> check.Distribution:
    return check.Distribution.load(TESTDATA / "otelcol-contrib-manifest.yaml", TESTDATA / "component-types.yaml")


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((COLLECTOR_DIR / name).read_text(encoding="utf-8"))


def default_of(value: str) -> str:
    (ref,) = check.env_refs(value)
    return ref.default


@pytest.mark.parametrize("name", ["agent.yaml", "gateway.yaml"])
def test_every_component_is_in_the_pinned_release_and_the_wiring_resolves(name, dist):
    assert check.check_file(COLLECTOR_DIR / name, dist) == []
    config = load(name)
    for kind in check.KINDS:
        for cid in config.get(kind) or {}:
            module = dist.module_of(kind, check.component_type(cid))
            assert dist.modules[kind][module] == "v0.159.0", (kind, cid, module)


@pytest.mark.parametrize("name", ["agent.yaml", "gateway.yaml"])
def test_memory_limiter_first_and_batch_last_in_every_pipeline(name):
    for pipeline_name, pipeline in check.pipelines(load(name)).items():
        assert pipeline["processors"][0] == "memory_limiter", pipeline_name
        assert pipeline["processors"][-1] == "batch", pipeline_name


def test_the_agent_routes_traces_by_trace_id_to_the_gateways_headless_service(rendered):
    agent = load("agent.yaml")
    pipes = check.pipelines(agent)
    assert pipes["traces"]["exporters"] == ["load_balancing"]
    assert pipes["logs"]["exporters"] == pipes["metrics"]["exporters"] == ["otlp_grpc/gateway"]
    lb = agent["exporters"]["load_balancing"]
    assert lb["routing_key"] == "traceID"
    assert "endpoint" not in lb["protocol"]["otlp"]  # the resolver supplies it
    service_name, namespace = default_of(lb["resolver"]["k8s"]["service"]).split(".")
    service = by_kind(rendered, "Service")[service_name]
    assert service["spec"]["clusterIP"] == "None"
    assert namespace == service["metadata"]["namespace"]
    grpc = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "otlp-grpc")
    assert lb["resolver"]["k8s"]["ports"] == [grpc] == [conventions.PORTS["otlp_grpc"]]
    endpoint = default_of(agent["exporters"]["otlp_grpc/gateway"]["endpoint"])
    assert endpoint == f"dns:///{service_name}.{namespace}.svc.cluster.local:{grpc}"
    assert agent["exporters"]["otlp_grpc/gateway"]["balancer_name"] == "round_robin"


def test_the_agent_labels_by_the_senders_pod_never_by_the_connection():
    """The bridge sends every pod's logs: matching by connection would give them the bridge's pod."""
    association = load("agent.yaml")["processors"]["k8s_attributes"]["pod_association"]
    sources = [source for rule in association for source in rule["sources"]]
    assert sources == [
        {"from": "resource_attribute", "name": "k8s.pod.uid"},
        {"from": "resource_attribute", "name": "k8s.pod.ip"},
    ]
    assert load("agent.yaml")["processors"]["k8s_attributes"]["filter"]["node_from_env_var"] == "K8S_NODE_NAME"


def test_the_gateway_derives_span_metrics_and_the_service_graph_from_whole_traces():
    gateway = load("gateway.yaml")
    pipes = check.pipelines(gateway)
    assert pipes["traces"]["exporters"] == ["otlp_grpc/tempo", "span_metrics", "servicegraph"]
    assert pipes["metrics/span_metrics"]["receivers"] == ["span_metrics"]
    assert pipes["metrics/servicegraph"]["receivers"] == ["servicegraph"]
    for name in ("metrics/span_metrics", "metrics/servicegraph"):
        assert "transform/instance" in pipes[name]["processors"], name
    assert "transform/instance" not in pipes["metrics"]["processors"]  # apps' own metrics keep their labels
    spanmetrics = gateway["connectors"]["span_metrics"]
    assert spanmetrics["exemplars"]["enabled"] is True
    seconds = [
        float(b[:-2]) / 1000 if b.endswith("ms") else float(b[:-1])
        for b in spanmetrics["histogram"]["explicit"]["buckets"]
    ]
    assert tuple(seconds) == conventions.REPLY_BUCKETS
    (statement,) = gateway["processors"]["transform/instance"]["metric_statements"]
    assert check.env_refs(statement)[0].name == "POD_NAME"


def test_agent_and_gateway_together_reach_the_backends_otelcol_reaches():
    single = load("otelcol.yaml")
    gateway = load("gateway.yaml")
    assert set(gateway["exporters"]) == set(single["exporters"])
    assert set(gateway["connectors"]) == set(single["connectors"])
    for exporter in single["exporters"]:
        path = urlsplit(default_of(single["exporters"][exporter]["endpoint"])).path
        assert urlsplit(default_of(gateway["exporters"][exporter]["endpoint"])).path == path, exporter
    # The service-registry attributes move to the agent, the first hop; "insert" keeps the sender's.
    attributes = {a["key"]: a for a in load("agent.yaml")["processors"]["resource"]["attributes"]}
    assert set(attributes) == {a["key"] for a in single["processors"]["resource"]["attributes"]}
    assert all(a["action"] == "insert" and default_of(a["value"]) for a in attributes.values())


def test_the_gateways_environment_overrides_name_the_same_services_as_its_defaults(rendered):
    """The Deployment sets each endpoint for its own namespace; the defaults are those of obsbox."""
    gateway = load("gateway.yaml")
    env = env_of(container(rendered, "otel-gateway"))
    (namespace,) = by_kind(rendered, "Namespace")
    for exporter in ("otlp_grpc/tempo", "otlp_http/loki", "otlp_http/prometheus"):
        (ref,) = check.env_refs(gateway["exporters"][exporter]["endpoint"])
        assert env[ref.name].replace("$(POD_NAMESPACE)", namespace) == ref.default, exporter


@pytest.mark.parametrize("name", ["agent.yaml", "gateway.yaml"])
def test_every_env_reference_has_a_default_and_numbers_stay_strings(name):
    text = (COLLECTOR_DIR / name).read_text(encoding="utf-8")
    refs = check.env_refs(text)
    assert refs and all(ref.default for ref in refs)
    for line in text.splitlines():
        if "${env:" in line and not line.lstrip().startswith(("#", "- set(")):
            value = line.split(":", 1)[1].strip()
            assert value.startswith('"') and value.endswith('"'), f"unquoted: {line.strip()}"


def test_both_listen_and_report_on_the_conventional_ports():
    for name in ("agent.yaml", "gateway.yaml"):
        config = load(name)
        protocols = config["receivers"]["otlp"]["protocols"]
        assert protocols["grpc"]["endpoint"] == f"0.0.0.0:{conventions.PORTS['otlp_grpc']}"
        assert protocols["http"]["endpoint"] == f"0.0.0.0:{conventions.PORTS['otlp_http']}"
        assert config["extensions"]["health_check"]["endpoint"] == f"0.0.0.0:{conventions.PORTS['collector_health']}"
        reader = config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
        assert reader["port"] == conventions.PORTS["collector_metrics"]


def test_the_image_is_the_release_the_components_were_checked_against(rendered):
    compose = yaml.safe_load((REPO / "compose" / "docker-compose.yml").read_text(encoding="utf-8"))
    for name in ("otel-agent", "otel-gateway"):
        assert container(rendered, name)["image"] == compose["services"]["collector"]["image"]
        assert container(rendered, name)["image"].endswith(":0.159.0")
