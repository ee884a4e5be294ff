"""The bridge's DaemonSet and its pipeline (deploy/kubernetes/config/bridge.yaml) agree with each other.

The pipeline is loaded by the bridge's own config loader and by ``obsbox bridge --print-config``;
the paths it reads and writes are checked against the DaemonSet's mounts.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from urllib.parse import urlsplit

from obsbox import conventions
from obsbox.cli import build_parser, main
from obsbox.exporters.bridge import config as bridge_config
from tests.deploy.conftest import KUSTOMIZE_DIR, by_kind, container, env_of, workload

BRIDGE_YAML = KUSTOMIZE_DIR / "config" / "bridge.yaml"


def mounts(rendered: list[dict]) -> dict[str, dict]:
    """mountPath → (volumeMount merged with its volume)."""
    pod = workload(rendered, "obsbox-bridge")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {m["mountPath"]: {**volumes[m["name"]], **m} for m in container(rendered, "obsbox-bridge")["volumeMounts"]}


def test_the_pipeline_loads_with_the_bridge_loader_and_the_cli(capsys):
    config = bridge_config.load(BRIDGE_YAML)
    (pipeline,) = config.pipelines.values()
    assert pipeline.processors == ["parse", "trace", "redact", "log_metrics"]
    assert set(pipeline.sinks) == {"otlp", "spans"}
    assert main(["bridge", "--config", str(BRIDGE_YAML), "--print-config"]) == 0
    assert "/var/log/pods/*/*/*.log" in capsys.readouterr().out


def test_it_reads_the_hosts_pod_logs_read_only_and_skips_its_own_namespace(rendered):
    (source,) = bridge_config.load(BRIDGE_YAML).components["sources"].values()
    assert source.config.include == ["/var/log/pods/*/*/*.log"]
    pod_logs = mounts(rendered)["/var/log/pods"]
    assert pod_logs["hostPath"]["path"] == "/var/log/pods" and pod_logs["readOnly"] is True
    namespace = by_kind(rendered, "Namespace")
    (own,) = namespace
    app_log = "/var/log/pods/shop_web-5d9c7_0f1e2d3c-aaaa-bbbb-cccc-123456789abc/web/0.log"
    own_log = f"/var/log/pods/{own}_otel-agent-x2x9k_1a2b3c4d-aaaa-bbbb-cccc-123456789abc/otelcol/0.log"
    excluded = source.config.exclude
    assert fnmatch.fnmatch(app_log, source.config.include[0]) and not any(fnmatch.fnmatch(app_log, e) for e in excluded)
    assert any(fnmatch.fnmatch(own_log, e) for e in excluded)
    assert any(fnmatch.fnmatch(app_log + ".20250101-000000.gz", e) for e in excluded)


def test_positions_live_on_a_host_folder_so_a_new_pod_resumes(rendered):
    settings = bridge_config.load(BRIDGE_YAML).settings
    state = mounts(rendered)[str(settings.state_dir)]
    assert state["hostPath"] == {"path": "/var/lib/obsbox", "type": "DirectoryOrCreate"}
    assert not state.get("readOnly", False)


def test_probes_annotations_and_the_metrics_port_are_the_bridges(rendered):
    settings = bridge_config.load(BRIDGE_YAML).settings
    assert (settings.metrics_host, settings.metrics_port) == ("0.0.0.0", conventions.PORTS["bridge_metrics"])
    ctr = container(rendered, "obsbox-bridge")
    (port,) = ctr["ports"]
    assert port["containerPort"] == settings.metrics_port
    for probe in ("livenessProbe", "readinessProbe"):
        assert ctr[probe]["httpGet"] == {"path": "/metrics", "port": port["name"]}
    annotations = workload(rendered, "obsbox-bridge")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(settings.metrics_port)


def test_it_ships_to_the_node_local_agent_over_otlp_http(rendered, monkeypatch):
    agent = by_kind(rendered, "Service")["otel-agent"]
    assert agent["spec"]["internalTrafficPolicy"] == "Local"
    http_port = next(p["port"] for p in agent["spec"]["ports"] if p["name"] == "otlp-http")
    assert http_port == conventions.PORTS["otlp_http"]
    env = env_of(container(rendered, "obsbox-bridge"))
    assert env["OTLP_ENDPOINT"] == f"http://otel-agent.$(POD_NAMESPACE).svc:{http_port}"
    # What the bridge sees once Kubernetes has expanded $(POD_NAMESPACE) (installed elsewhere), and
    # without the variable (the default: this kustomization's namespace).
    monkeypatch.setenv("OTLP_ENDPOINT", env["OTLP_ENDPOINT"].replace("$(POD_NAMESPACE)", "elsewhere"))
    for endpoint in _sink_endpoints():
        assert (endpoint.hostname, endpoint.port) == ("otel-agent.elsewhere.svc", http_port)
    monkeypatch.delenv("OTLP_ENDPOINT")
    (namespace,) = by_kind(rendered, "Namespace")
    for endpoint in _sink_endpoints():
        assert (endpoint.hostname, endpoint.port) == (f"otel-agent.{namespace}.svc", http_port)


def _sink_endpoints() -> list:
    sinks = bridge_config.load(BRIDGE_YAML).components["sinks"].values()
    return [urlsplit(sink.config.endpoint) for sink in sinks]


def test_the_config_folder_is_what_the_configmap_holds(rendered):
    configmap = next(
        cm for name, cm in by_kind(rendered, "ConfigMap").items() if name.startswith("obsbox-bridge-config")
    )
    assert configmap["data"] == {"bridge.yaml": Path(BRIDGE_YAML).read_text(encoding="utf-8")}
    (arg_config,) = [a for a in container(rendered, "obsbox-bridge")["args"] if a.endswith(".yaml")]
    assert arg_config == f"{mounts(rendered)['/etc/obsbox']['mountPath']}/bridge.yaml"


def test_the_container_command_line_is_one_obsbox_accepts(rendered):
    """The image's entrypoint is ``obsbox``; the args must parse, and leave the metrics address to the file."""
    args = build_parser().parse_args(container(rendered, "obsbox-bridge")["args"])
    assert args.command == "bridge"
    assert args.config == Path("/etc/obsbox/bridge.yaml")
    assert args.metrics_port is None  # settings.metrics_port/metrics_host in the file apply
