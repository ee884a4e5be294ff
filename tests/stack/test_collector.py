"""collector/otelcol.yaml against the component list of the pinned otelcol-contrib release, and the
``obsbox collector check`` command that runs the same checks on any config."""

from __future__ import annotations

import copy
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
import yaml

from obsbox import conventions
from obsbox.cli import main
from obsbox.collector import check
from tests.stack.conftest import OTELCOL, REPO

TESTDATA = REPO / "collector" / "testdata"


@pytest.fixture(scope="module")
def dist() -> check.Distribution:
    return check.Distribution.load(TESTDATA / "otelcol-contrib-manifest.yaml", TESTDATA / "component-types.yaml")


def ids(config: dict) -> list[str]:
    return [f"{kind}.{cid}" for kind in check.KINDS for cid in config.get(kind) or {}]


def test_config_loads_with_one_pipeline_per_signal(otelcol):
    assert set(otelcol) == {"extensions", "receivers", "processors", "connectors", "exporters", "service"}
    signals = {check.component_type(name) for name in check.pipelines(otelcol)}
    assert signals == {"traces", "metrics", "logs"}


def test_every_component_exists_in_the_pinned_release_and_all_wiring_resolves(otelcol, dist):
    text = OTELCOL.read_text(encoding="utf-8")
    assert check.problems(otelcol, text, dist) == []
    print(f"{len(ids(otelcol))} components found in otelcol-contrib 0.159.0: {', '.join(ids(otelcol))}")


def test_the_checker_reports_each_kind_of_mistake(otelcol, dist):
    text = OTELCOL.read_text(encoding="utf-8")
    broken = copy.deepcopy(otelcol)
    broken["exporters"]["loki"] = {"endpoint": "http://loki:3100/loki/api/v1/push"}  # removed in 0.131
    broken["service"]["pipelines"]["logs"]["exporters"].append("loki")
    broken["processors"]["attributes/unused"] = {"actions": []}
    broken["service"]["pipelines"]["traces"]["processors"].append("tail_sampling")
    broken["service"]["pipelines"]["metrics"]["receivers"].remove("span_metrics")
    broken["service"]["pipelines"]["events"] = {"receivers": ["otlp"], "exporters": ["otlp_grpc/tempo"]}
    found = check.problems(broken, text + "\nx: ${env:NO_DEFAULT}\n", dist)
    expected = [
        "exporters.loki: type 'loki' is not in the distribution",
        "processors.attributes/unused: defined but not used by any pipeline",
        "service.pipelines.traces.processors: 'tail_sampling' is not defined",
        "connectors.span_metrics: must be the exporter of one pipeline and the receiver of another",
        "service.pipelines.events: the signal must be one of traces, metrics, logs, profiles",
        "${env:NO_DEFAULT} has no default (write ${env:NO_DEFAULT:-value})",
    ]
    for problem in expected:
        assert problem in found, f"not reported: {problem}\nreported: {found}"


def test_the_image_tag_is_the_release_of_the_modules_we_use(otelcol, dist, compose_raw):
    image = compose_raw["services"]["collector"]["image"]
    name, tag = image.rsplit(":", 1)
    assert name == "otel/opentelemetry-collector-contrib"
    versions = {}
    for kind in check.KINDS:
        for cid in otelcol.get(kind) or {}:
            module = dist.module_of(kind, check.component_type(cid))
            versions[module] = dist.modules[kind][module]
    assert set(versions.values()) == {f"v{tag}"}, versions


def test_every_env_reference_has_a_default_and_compose_passes_only_those(otelcol, compose_raw):
    refs = check.env_refs(OTELCOL.read_text(encoding="utf-8"))
    assert refs, "the config takes its resource attributes and endpoints from the environment"
    assert all(ref.default for ref in refs), [ref for ref in refs if not ref.default]
    passed = set(compose_raw["services"]["collector"]["environment"])
    assert passed <= {ref.name for ref in refs}, passed - {ref.name for ref in refs}


def test_memory_limiter_first_and_batch_last_in_every_pipeline(otelcol):
    for name, pipeline in check.pipelines(otelcol).items():
        processors = pipeline["processors"]
        assert processors[0] == "memory_limiter", name
        assert processors[-1] == "batch", name
        assert "resource" in processors, name


def test_resource_adds_the_service_registry_attributes_from_the_environment(otelcol):
    attributes = {a["key"]: a for a in otelcol["processors"]["resource"]["attributes"]}
    assert set(attributes) == {"service.version", "deployment.environment", "cluster.id"}
    for key, attr in attributes.items():
        assert attr["action"] == "insert", key
        (ref,) = check.env_refs(attr["value"])
        assert ref.default, key


def test_routing_one_signal_to_each_backend(otelcol):
    pipes = check.pipelines(otelcol)
    assert pipes["traces"]["exporters"] == ["otlp_grpc/tempo", "span_metrics", "servicegraph"]
    assert pipes["logs"]["exporters"] == ["otlp_http/loki"]
    assert set(pipes["metrics"]["receivers"]) == {"otlp", "prometheus", "span_metrics"}
    assert pipes["metrics"]["exporters"] == ["otlp_http/prometheus"]
    assert pipes["metrics/servicegraph"]["receivers"] == ["servicegraph"]
    assert "transform/servicegraph" in pipes["metrics/servicegraph"]["processors"]
    assert "transform/servicegraph" not in pipes["metrics"]["processors"]


def default_of(value: str) -> str:
    (ref,) = check.env_refs(value)
    return ref.default


@pytest.mark.parametrize(
    "route",
    [
        ("otlp_grpc/tempo", "tempo", conventions.PORTS["otlp_grpc"], ""),
        ("otlp_http/loki", "loki", conventions.PORTS["loki"], "/otlp"),
        ("otlp_http/prometheus", "prometheus", conventions.PORTS["prometheus"], "/api/v1/otlp"),
    ],
)
def test_exporters_point_at_the_compose_services(otelcol, compose_raw, route):
    exporter, service, port, path = route
    endpoint = default_of(otelcol["exporters"][exporter]["endpoint"])
    url = urlsplit(endpoint if "://" in endpoint else f"grpc://{endpoint}")
    assert (url.hostname, url.port, url.path) == (service, port, path)
    assert service in compose_raw["services"]


def test_tempo_receives_otlp_grpc_where_the_collector_sends_it(otelcol):
    tempo = yaml.safe_load((REPO / "compose" / "tempo" / "tempo.yaml").read_text())
    grpc = tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert grpc.rsplit(":", 1)[1] == default_of(otelcol["exporters"]["otlp_grpc/tempo"]["endpoint"]).rsplit(":", 1)[1]


def test_receivers_listen_on_the_conventional_ports(otelcol):
    protocols = otelcol["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == f"0.0.0.0:{conventions.PORTS['otlp_grpc']}"
    assert protocols["http"]["endpoint"] == f"0.0.0.0:{conventions.PORTS['otlp_http']}"
    assert otelcol["extensions"]["health_check"]["endpoint"] == f"0.0.0.0:{conventions.PORTS['collector_health']}"
    telemetry = otelcol["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    assert (telemetry["host"], telemetry["port"]) == ("0.0.0.0", conventions.PORTS["collector_metrics"])


def test_prometheus_receiver_scrapes_the_gateway_and_the_bridge(otelcol, compose_raw):
    jobs = {job["job_name"]: job for job in otelcol["receivers"]["prometheus"]["config"]["scrape_configs"]}
    targets = {name: default_of(job["static_configs"][0]["targets"][0]) for name, job in jobs.items()}
    assert targets == {
        "gateway": f"gateway:{conventions.PORTS['gateway']}",
        "obsbox-bridge": f"bridge:{conventions.PORTS['bridge_metrics']}",
    }
    assert {"gateway", "bridge"} <= set(compose_raw["services"])


def seconds(duration: str) -> float:
    return float(duration[:-2]) / 1000 if duration.endswith("ms") else float(duration[:-1])


def test_spanmetrics_carries_exemplars_on_the_sli_buckets(otelcol):
    spanmetrics = otelcol["connectors"]["span_metrics"]
    assert spanmetrics["exemplars"]["enabled"] is True
    assert spanmetrics["histogram"]["unit"] == "s"
    buckets = tuple(seconds(b) for b in spanmetrics["histogram"]["explicit"]["buckets"])
    assert buckets == conventions.REPLY_BUCKETS
    graph_buckets = tuple(seconds(b) for b in otelcol["connectors"]["servicegraph"]["latency_histogram_buckets"])
    assert graph_buckets == conventions.REPLY_BUCKETS


def test_the_manifest_is_the_upstream_file_unchanged():
    manifest = TESTDATA / "otelcol-contrib-manifest.yaml"
    assert manifest.stat().st_size == 27157  # the size of the upstream file at the recorded commit
    assert "f817832365a9a2b829bc7c25feffcf8834585dea" in (TESTDATA / "README.md").read_text()
    assert yaml.safe_load(manifest.read_text())["dist"]["version"] == "0.159.0"


def test_components_outside_the_type_map_are_found_by_the_contrib_naming_rule(dist):
    """A user's config may use any component of the distribution, not only the ones ours use."""
    contrib = "github.com/open-telemetry/opentelemetry-collector-contrib"
    assert dist.module_of("receivers", "filelog") == f"{contrib}/receiver/filelogreceiver"
    assert dist.module_of("receivers", "fluent_forward") == f"{contrib}/receiver/fluentforwardreceiver"
    assert dist.module_of("exporters", "loki") is None  # removed from contrib in 0.131
    assert dist.module_of("processors", "k8s_attributes_typo") is None


def test_a_deprecated_type_name_is_reported_with_the_name_that_replaced_it(otelcol, dist):
    """0.159.0 still runs the pre-rename names (with a warning); the checker asks for the new ones."""
    old = copy.deepcopy(otelcol)
    old["exporters"]["otlphttp/loki"] = old["exporters"].pop("otlp_http/loki")
    old["exporters"]["otlp/tempo"] = old["exporters"].pop("otlp_grpc/tempo")
    old["connectors"]["spanmetrics"] = old["connectors"].pop("span_metrics")
    pipes = check.pipelines(old)
    pipes["logs"]["exporters"] = ["otlphttp/loki"]
    pipes["traces"]["exporters"] = ["otlp/tempo", "spanmetrics", "servicegraph"]
    pipes["metrics"]["receivers"] = ["otlp", "prometheus", "spanmetrics"]
    assert check.problems(old, OTELCOL.read_text(encoding="utf-8"), dist) == [
        "exporters.otlp/tempo: type 'otlp' is deprecated (renamed 'otlp_grpc')",
        "exporters.otlphttp/loki: type 'otlphttp' is deprecated (renamed 'otlp_http')",
        "connectors.spanmetrics: type 'spanmetrics' is deprecated (renamed 'span_metrics')",
    ]
    for kind, name in (("processors", "k8sattributes"), ("exporters", "loadbalancing")):
        assert dist.module_of(kind, name) is not None, name  # still in the distribution
        assert dist.renamed[kind][name] in {"k8s_attributes", "load_balancing"}, name


# ------------------------------------------------------------------------- obsbox collector check

COLLECTOR = REPO / "collector"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m obsbox collector check ...`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "obsbox", "collector", "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )


def test_the_command_passes_the_shipped_configs():
    result = run_cli("collector/otelcol.yaml", "collector/agent.yaml", "collector/gateway.yaml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"collector/{name}: OK (otelcol-contrib 0.159.0)" for name in ("otelcol.yaml", "agent.yaml", "gateway.yaml")
    ]
    assert result.stderr == ""


def broken_copy(tmp_path, name: str, edit) -> str:
    config = yaml.safe_load((COLLECTOR / name).read_text(encoding="utf-8"))
    edit(config)
    path = tmp_path / f"{edit.__name__}-{name}"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def test_the_command_names_the_file_the_component_and_the_mistake(tmp_path, capsys):
    def unknown_component(config):
        config["exporters"]["loki"] = {"endpoint": "http://loki:3100/loki/api/v1/push"}
        config["service"]["pipelines"]["logs"]["exporters"].append("loki")

    def dangling_reference(config):
        config["service"]["pipelines"]["traces"]["processors"].insert(1, "tail_sampling")

    def env_without_default(config):
        config["exporters"]["otlp_grpc/gateway"]["endpoint"] = "${env:GATEWAY_OTLP_ENDPOINT}"

    files = [
        broken_copy(tmp_path, "gateway.yaml", unknown_component),
        broken_copy(tmp_path, "gateway.yaml", dangling_reference),
        broken_copy(tmp_path, "agent.yaml", env_without_default),
    ]
    good = str(COLLECTOR / "agent.yaml")
    assert main(["collector", "check", good, *files]) == 1
    out, err = capsys.readouterr()
    assert out == f"{good}: OK (otelcol-contrib 0.159.0)\n"
    assert err.splitlines() == [
        f"{files[0]}: exporters.loki: type 'loki' is not in the distribution",
        f"{files[1]}: service.pipelines.traces.processors: 'tail_sampling' is not defined",
        f"{files[2]}: ${{env:GATEWAY_OTLP_ENDPOINT}} has no default (write ${{env:GATEWAY_OTLP_ENDPOINT:-value}})",
    ]


def test_the_command_reports_unreadable_and_unparsable_files(tmp_path, capsys):
    missing = tmp_path / "nowhere.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text("service: [unclosed\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["collector", "check", str(missing), str(bad), str(empty)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{missing}: cannot read the file:")
    assert err[1].startswith(f"{bad}: not valid YAML:")
    assert err[2] == f"{empty}: no service.pipelines: the collector would not start"


def test_the_command_exits_1_from_a_shell_too(tmp_path):
    def k8s_attributes_removed(config):
        config["processors"].pop("k8s_attributes")

    path = broken_copy(tmp_path, "agent.yaml", k8s_attributes_removed)
    result = run_cli(path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"{path}: service.pipelines.traces.processors: 'k8s_attributes' is not defined" in result.stderr.splitlines()


def test_the_command_says_when_the_distribution_list_is_unreadable(tmp_path, capsys):
    assert main(["collector", "check", str(COLLECTOR / "agent.yaml"), "--manifest", str(tmp_path / "none.yaml")]) == 2
    assert "cannot read the distribution's component list" in capsys.readouterr().err
