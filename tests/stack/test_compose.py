"""compose/docker-compose.yml, validated and rendered by Debian's docker-compose 1.29."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from obsbox import cli, conventions
from obsbox.exporters.bridge import config as bridge_config
from obsbox.exporters.demo import load_cli
from tests.stack.conftest import COMPOSE_DIR, ENV_EXAMPLE, HTTP_PORTS, docker_compose

CORE = {"probe-tools", "collector", "prometheus", "loki", "tempo", "grafana", "bridge"}
DEMO = {"gateway", "load"}
ONE_SHOT = {"probe-tools"}

# The port each service's healthcheck probes.
SERVICE_PORTS = {**HTTP_PORTS, "collector": conventions.PORTS["collector_health"]}

# What each image offers a healthcheck, from the images' Dockerfiles: the contrib collector is FROM
# scratch (its binary only); Tempo's recent images are distroless, without a shell, and 2.x has no
# health command, so nothing is assumed of it; Loki 3.7's is distroless and its binary has `-health`
# (added in 3.7.0); prom/prometheus is built on busybox (wget); Grafana's Alpine image installs curl;
# the obsbox image has Python.
IMAGE_TOOLS = {
    "otel/opentelemetry-collector-contrib": set(),
    "grafana/tempo": set(),
    "grafana/loki": {"/usr/bin/loki"},
    "prom/prometheus": {"wget"},
    "grafana/grafana": {"curl", "wget"},
    "obsbox": {"python"},
}
PROBE = "/probe/busybox"

# Where each service keeps the state that must survive `docker compose down`.
STATE = {
    "prometheus": "/prometheus",
    "loki": "/loki",
    "tempo": "/var/tempo",
    "grafana": "/var/lib/grafana",
    "bridge": "/var/lib/obsbox",
}


def image_name(image: str) -> str:
    return image.rsplit(":", 1)[0]


def volume_mounts(service: dict) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each volume entry as docker-compose renders it."""
    mounts = []
    for entry in service.get("volumes") or []:
        source, target, *mode = entry.split(":")
        mounts.append((source, target, mode[0] if mode else "rw"))
    return mounts


def test_the_file_validates_and_declares_the_stack(rendered):
    assert set(rendered["services"]) == CORE | DEMO
    assert set(rendered["volumes"]) == {*STATE_VOLUMES, "demo-logs", "probe-tools"}


STATE_VOLUMES = {"prometheus-data", "loki-data", "tempo-data", "grafana-data", "bridge-state"}


def test_grafana_has_no_default_password(env_file):
    assert re.search(r"^GRAFANA_ADMIN_PASSWORD=$", ENV_EXAMPLE.read_text(), re.M), "the example ships no password"
    result = docker_compose("config", env_file=ENV_EXAMPLE)
    assert result.returncode != 0
    assert "GRAFANA_ADMIN_PASSWORD" in result.stderr


def test_the_password_reaches_grafana_from_the_env_file(rendered, env_file):
    password = re.search(r"^GRAFANA_ADMIN_PASSWORD=(.+)$", env_file.read_text(), re.M).group(1)
    assert rendered["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == password
    assert rendered["services"]["grafana"]["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"


@pytest.mark.parametrize(
    ("service", "pattern"),
    [
        ("collector", r"otel/opentelemetry-collector-contrib:0\.\d+\.\d+"),
        ("prometheus", r"prom/prometheus:v3\.\d+\.\d+"),
        ("loki", r"grafana/loki:3\.\d+\.\d+"),
        ("tempo", r"grafana/tempo:3\.\d+\.\d+"),
        ("grafana", r"grafana/grafana:13\.\d+\.\d+"),
        ("probe-tools", r"busybox:\d+\.\d+\.\d+-musl"),
    ],
)
def test_images_are_pinned_to_a_release(rendered, service, pattern):
    assert re.fullmatch(pattern, rendered["services"][service]["image"])


def test_the_obsbox_services_build_the_repository_dockerfile(rendered):
    for name in ("bridge", "gateway", "load"):
        service = rendered["services"][name]
        assert image_name(service["image"]) == "obsbox"
        assert Path(service["build"]["context"]) == COMPOSE_DIR.parent
        assert (Path(service["build"]["context"]) / service["build"]["dockerfile"]).is_file()


def test_every_long_running_service_has_a_healthcheck_its_image_can_run(rendered):
    for name, service in rendered["services"].items():
        if name in ONE_SHOT:
            assert "healthcheck" not in service
            continue
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD", f"{name}: exec form, no shell needed"
        program = test[1]
        if program == PROBE:
            assert ("probe-tools", "/probe", "ro") in volume_mounts(service), name
            assert service["depends_on"]["probe-tools"]["condition"] == "service_completed_successfully", name
        else:
            assert program in IMAGE_TOOLS[image_name(service["image"])], f"{name}: {program} is not in its image"
        for key in ("interval", "timeout", "retries", "start_period"):
            assert key in service["healthcheck"], f"{name}: {key}"


def test_healthchecks_probe_the_port_the_service_listens_on(rendered):
    for name, port in SERVICE_PORTS.items():
        test = rendered["services"][name]["healthcheck"]["test"]
        if test[1] == "/usr/bin/loki":
            continue  # `loki -health` probes http://localhost:3100/ready itself
        urls = [urlsplit(u) for u in re.findall(r"http://[^'\" ]+", shlex.join(test))]
        assert urls, name
        assert all(u.hostname == "127.0.0.1" and u.port == port for u in urls), (name, urls)


def test_the_load_generator_is_healthy_while_its_gateway_answers(rendered):
    (url,) = re.findall(r"http://[^'\" ]+", rendered["services"]["load"]["healthcheck"]["test"][-1])
    assert urlsplit(url).netloc == f"gateway:{conventions.PORTS['gateway']}"


def test_depends_on_waits_for_health_without_cycles(rendered):
    services = rendered["services"]
    for name, service in services.items():
        for dep, spec in (service.get("depends_on") or {}).items():
            expected = "service_completed_successfully" if dep in ONE_SHOT else "service_healthy"
            assert spec["condition"] == expected, (name, dep)
            if expected == "service_healthy":
                assert "healthcheck" in services[dep], dep

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"cycle: {' -> '.join((*path, name))}"
        for dep in services[name].get("depends_on") or {}:
            visit(dep, (*path, name))

    for name in services:
        visit(name, ())
    assert set(services["collector"]["depends_on"]) >= {"prometheus", "loki", "tempo"}
    assert set(services["grafana"]["depends_on"]) >= {"prometheus", "loki", "tempo"}
    assert set(services["bridge"]["depends_on"]) == {"collector"}


def test_published_ports_bind_to_localhost_on_the_conventional_ports(rendered):
    published = {}
    for name, service in rendered["services"].items():
        for entry in service.get("ports") or []:
            host_ip, host_port, container = entry.split(":")
            assert host_ip == "127.0.0.1", (name, entry)
            published[(name, int(container.split("/")[0]))] = int(host_port)
    expected = {
        ("collector", conventions.PORTS["otlp_grpc"]),
        ("collector", conventions.PORTS["otlp_http"]),
        ("collector", conventions.PORTS["collector_health"]),
        ("prometheus", conventions.PORTS["prometheus"]),
        ("loki", conventions.PORTS["loki"]),
        ("tempo", conventions.PORTS["tempo"]),
        ("grafana", conventions.PORTS["grafana"]),
        ("bridge", conventions.PORTS["bridge_metrics"]),
        ("gateway", conventions.PORTS["gateway"]),
    }
    assert set(published) == expected
    assert all(container == host for (_, container), host in published.items())


def test_state_lives_in_named_volumes(rendered):
    for name, path in STATE.items():
        mounts = {target: (source, mode) for source, target, mode in volume_mounts(rendered["services"][name])}
        source, mode = mounts[path]
        assert source in STATE_VOLUMES and mode == "rw", (name, source)


def test_bind_mounted_configs_exist(rendered):
    for name, service in rendered["services"].items():
        for source, target, _ in volume_mounts(service):
            if source.startswith("/"):
                assert Path(source).exists(), f"{name}: {source} -> {target}"


def test_memory_limits_on_every_service(rendered):
    for name, service in rendered["services"].items():
        assert re.fullmatch(r"\d+[mg]", str(service.get("mem_limit", ""))), name


def test_the_bridge_follows_log_dir_read_only_and_the_demo_logs(rendered):
    mounts = {target: (source, mode) for source, target, mode in volume_mounts(rendered["services"]["bridge"])}
    assert mounts["/logs"] == (str(COMPOSE_DIR / "logs"), "ro")
    assert mounts["/logs-demo"] == ("demo-logs", "ro")
    assert mounts["/etc/obsbox/bridge.yaml"] == (str(COMPOSE_DIR / "obsbox" / "bridge.yaml"), "ro")
    gateway = {target: (source, mode) for source, target, mode in volume_mounts(rendered["services"]["gateway"])}
    assert gateway["/logs-demo"] == ("demo-logs", "rw")
    command = rendered["services"]["gateway"]["command"]
    assert command[command.index("--log-dir") + 1] == "/logs-demo"


def test_log_dir_comes_from_the_environment(tmp_path, env_file):
    custom = tmp_path / "applogs"
    env = tmp_path / "custom.env"
    env.write_text(env_file.read_text().replace("LOG_DIR=./logs", f"LOG_DIR={custom}"))
    result = docker_compose("config", env_file=env)
    assert result.returncode == 0, result.stderr
    assert f"{custom}:/logs:ro" in result.stdout


def test_demo_services_run_only_under_the_demo_profile(rendered):
    for name in DEMO:
        assert rendered["services"][name]["profiles"] == ["demo"]
    for name in CORE:
        assert "profiles" not in rendered["services"][name]


@pytest.mark.parametrize("service", ["bridge", "gateway", "load"])
def test_the_obsbox_command_lines_are_valid(rendered, service):
    argv = rendered["services"][service]["command"]
    parser = cli.build_parser()
    subcommands = parser._subparsers._group_actions[0].choices
    if argv[0] not in subcommands:
        pytest.fail(f"`obsbox {argv[0]}` is not registered in obsbox.cli yet (known: {', '.join(subcommands)})")
    args = parser.parse_args(argv)
    mounts = {target: source for source, target, _ in volume_mounts(rendered["services"][service])}
    if service == "bridge":
        assert (args.metrics_host, args.metrics_port) == ("0.0.0.0", conventions.PORTS["bridge_metrics"])
        loaded = bridge_config.load(mounts[str(args.config)])
        assert loaded.settings.state_dir == Path(STATE["bridge"])
    elif service == "gateway":
        assert (args.host, args.port) == ("0.0.0.0", conventions.PORTS["gateway"])  # reachable from other containers
        assert mounts[str(args.log_dir)] == "demo-logs"
        assert args.no_load is True  # the load service drives it
    else:
        config = load_cli.load_config(args, args.target)  # the checks `obsbox load` applies before it starts
        assert urlsplit(config.target).netloc == f"gateway:{conventions.PORTS['gateway']}"
        assert config.duration is None  # until the container stops
