"""compose/docker-compose.yml: what the collector, the demo gateway and the host recipe get from it,
rendered by docker-compose 1.29 and checked with the real parsers (the collector config's env
references, the OTel setup's exporter choice, obsbox's own argparse)."""

from __future__ import annotations

import os
import re
import shlex
from ipaddress import ip_address

import pytest
import yaml

from obsbox import cli, conventions
from obsbox.collector import check
from obsbox.exporters.instrumentation import otel_setup
from tests.stack.conftest import COMPOSE_DIR, ENV_EXAMPLE, OTELCOL, docker_compose

README = COMPOSE_DIR / "README.md"
HOST_GATEWAY = "host.docker.internal:host-gateway"


def env_refs() -> dict[str, str | None]:
    """The variables the collector config reads, comments left out."""
    lines = OTELCOL.read_text(encoding="utf-8").splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    return {ref.name: ref.default for ref in check.env_refs(text)}


def test_every_env_variable_the_collector_reads_is_set_from_compose_with_the_same_default(rendered):
    environment = rendered["services"]["collector"]["environment"]
    refs = env_refs()
    assert {"PROMETHEUS_OTLP_ENDPOINT", "LOKI_OTLP_ENDPOINT", "TEMPO_OTLP_ENDPOINT"} <= set(refs)
    assert set(refs) <= set(environment), f"not passed by compose: {sorted(set(refs) - set(environment))}"
    for name, default in refs.items():
        assert str(environment[name]) == default, (name, environment[name], default)
    example = dict(re.findall(r"^([A-Z_]+)=(.*)$", ENV_EXAMPLE.read_text(), re.M))
    for name in refs:
        assert example.get(name) == refs[name], f".env.example documents {name} with the config's default"


def test_a_collector_endpoint_set_in_env_reaches_the_collector(env_file, tmp_path):
    custom = tmp_path / "mimir.env"
    mimir = "http://mimir:8080/otlp"
    custom.write_text(env_file.read_text().replace("PROMETHEUS_OTLP_ENDPOINT=http://prometheus:9090/api/v1/otlp",
                                                   f"PROMETHEUS_OTLP_ENDPOINT={mimir}"))  # fmt: skip
    result = docker_compose("config", env_file=custom)
    assert result.returncode == 0, result.stderr
    assert f"PROMETHEUS_OTLP_ENDPOINT: {mimir}" in result.stdout


def test_numeric_looking_resource_values_stay_strings_in_the_collector(otelcol):
    """A whole-value ${env:...} is typed by YAML; the transform's OTTL string literal embeds it instead."""
    statements = [
        s for group in otelcol["processors"]["transform/resource"]["trace_statements"] for s in group["statements"]
    ]
    for name in ("SERVICE_VERSION", "DEPLOYMENT_ENVIRONMENT", "CLUSTER_ID"):
        (statement,) = [s for s in statements if f"${{env:{name}:-" in s]
        assert re.search(rf'"\$\{{env:{name}:-[^}}]*\}}"', statement), statement  # inside an OTTL string literal
        assert "== nil" in statement  # a value the sender set wins
    for pipeline in check.pipelines(otelcol).values():
        processors = pipeline["processors"]
        assert processors.index("transform/resource") < processors.index("resource")


def test_the_collector_can_reach_processes_on_the_host(rendered):
    assert HOST_GATEWAY in rendered["services"]["collector"]["extra_hosts"]


@pytest.mark.parametrize(("signal", "expected"), [("traces", "otlp"), ("metrics", "none"), ("logs", "none")])
def test_the_demo_gateway_sends_traces_only_over_otlp(rendered, monkeypatch, signal, expected):
    environment = rendered["services"]["gateway"]["environment"]
    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, str(value))
    assert otel_setup.exporter_choice(signal, None) == expected


def test_probe_tools_copies_busybox_atomically(rendered):
    command = rendered["services"]["probe-tools"]["command"]
    assert command[:2] == ["sh", "-c"]
    script = command[2]
    copy, move = (shlex.split(part) for part in script.split("&&"))
    assert copy[0] == "cp" and move[:2] == ["mv", "-f"]
    temp, final = move[2], move[3]
    assert copy[2] == temp and final == "/probe/busybox" and temp.startswith("/probe/") and temp != final
    for name in ("collector", "tempo"):
        assert rendered["services"][name]["healthcheck"]["test"][1] == final


def test_prometheus_exposes_no_lifecycle_or_admin_endpoints(rendered):
    flags = rendered["services"]["prometheus"]["command"]
    assert not {"--web.enable-lifecycle", "--web.enable-admin-api"} & set(flags)


def test_tempo_is_pinned_to_a_3_0_patch_with_the_security_fixes(rendered):
    found = re.fullmatch(r"grafana/tempo:3\.0\.(\d+)", rendered["services"]["tempo"]["image"])
    # Tempo's CHANGELOG.md: 3.0.2 and 3.0.3 rebuild with Go and gRPC security fixes; 3.0.3 is the latest.
    assert found and int(found.group(1)) >= 3, "3.0.3 is the latest 3.0 patch"


def host_recipe() -> list[list[str]]:
    """The obsbox command lines of the README's host recipe."""
    text = README.read_text(encoding="utf-8")
    section = text.split("### Scrape a bridge or a gateway that runs on the host", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [shlex.split(line) for line in block.splitlines() if line.startswith("obsbox ")]


def test_the_host_recipe_commands_parse_and_listen_where_the_collector_reaches(capsys):
    commands = host_recipe()
    assert {argv[1] for argv in commands} == {"bridge", "demo"}
    parser = cli.build_parser()
    ports = {}
    for argv in commands:
        args = parser.parse_args(argv[1:])
        host, port = (args.metrics_host, args.metrics_port) if argv[1] == "bridge" else (args.host, args.port)
        assert not ip_address(host).is_loopback, f"{shlex.join(argv)}: a container cannot reach {host}"
        ports[argv[1]] = port
    assert ports == {"bridge": conventions.PORTS["bridge_metrics"], "demo": conventions.PORTS["gateway"]}
    (bridge,) = [argv for argv in commands if argv[1] == "bridge"]
    assert cli.main([*bridge[1:], "--print-config"]) in (0, None)
    printed = capsys.readouterr().out
    assert f"metrics_host: {bridge[bridge.index('--metrics-host') + 1]}" in printed


def test_the_host_recipe_targets_match_the_ports_it_starts():
    text = README.read_text(encoding="utf-8")
    targets = dict(re.findall(r"(BRIDGE_METRICS_TARGET|GATEWAY_METRICS_TARGET)=host\.docker\.internal:(\d+)", text))
    assert targets == {
        "BRIDGE_METRICS_TARGET": str(conventions.PORTS["bridge_metrics"]),
        "GATEWAY_METRICS_TARGET": str(conventions.PORTS["gateway"]),
    }


def test_the_readme_says_what_every_published_port_exposes(rendered):
    text = README.read_text(encoding="utf-8")
    table = text.split("What each published port exposes", 1)[1].split("\n\n", 2)[1]
    documented = {int(p) for row in table.splitlines() for p in re.findall(r"\b(\d{4,5})\b", row.split("|")[1])}
    published = {
        int(entry.split(":")[-1].split("/")[0])
        for service in rendered["services"].values()
        for entry in service.get("ports") or []
    }
    assert published <= documented, published - documented


def test_prometheus_scrapes_the_demo_backend_where_the_gateway_serves_it_and_loads_the_llm_rules(rendered):
    """The vllm job reaches the gateway service's --backend-metrics-port over the compose network
    (exposed there, published nowhere), and rules/*.yml holds the LLM rules that read vLLM's names."""
    gateway = rendered["services"]["gateway"]
    args = cli.build_parser().parse_args(gateway["command"])
    assert args.host == "0.0.0.0" and args.backend_metrics_port == conventions.PORTS["demo_backend_metrics"]
    assert [str(port) for port in gateway["expose"]] == [str(args.backend_metrics_port)]
    assert all(not entry.endswith(f":{args.backend_metrics_port}") for entry in gateway["ports"])
    prometheus = yaml.safe_load((COMPOSE_DIR / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    (job,) = [job for job in prometheus["scrape_configs"] if job["job_name"] == "vllm"]
    assert job["static_configs"] == [{"targets": [f"gateway:{args.backend_metrics_port}"]}]
    rule_files = [COMPOSE_DIR / "prometheus" / pattern for pattern in prometheus["rule_files"]]
    assert any((COMPOSE_DIR / "prometheus" / "rules" / "llm.rules.yml").match(str(p)) for p in rule_files)
