"""Fixtures for the stack's configs: the compose file as written and as docker-compose renders it.

There is no Docker engine here, so nothing is started. What the tests check is listed in each test;
what stays unchecked is printed at the end of the run (``UNVERIFIED``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from obsbox import conventions

REPO = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPO / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"
OTELCOL = REPO / "collector" / "otelcol.yaml"

# The HTTP port each service serves inside the compose network (the collector serves two: its health
# check and its own metrics, added where each is meant).
HTTP_PORTS = {
    "prometheus": conventions.PORTS["prometheus"],
    "loki": conventions.PORTS["loki"],
    "tempo": conventions.PORTS["tempo"],
    "grafana": conventions.PORTS["grafana"],
    "bridge": conventions.PORTS["bridge_metrics"],
    "gateway": conventions.PORTS["gateway"],
}

UNVERIFIED = """\
stack configs: checked statically, NOT run (no Docker engine here). Still unverified:
  - that the pinned image tags exist in their registries and that the images start;
  - the collector accepting every config key: component types are checked against the 0.159.0
    manifest, but key names and the OTTL statements are not (`otelcol-contrib validate` would);
  - Prometheus 3.14 accepting its flags and scrape_native_histograms (promtool is spared that key);
    promtool here is Debian's 2.42, which checks the config and rules with 2.x semantics only (no
    OTLP receiver, no 3.x defaults such as UTF-8 names or the le/quantile label normalisation);
  - Loki 3.7.6 and Tempo 3.0.3 accepting their configs in this run (both reject unknown keys at
    start-up): they did when run by hand (compose/README.md, "Checked against the real servers"),
    not here; Loki's OTLP mapping, level detection and refusals are a double written from Loki
    3.7's source (tests/stack/loki_double.py; its levels, streams and refusal texts were checked by
    hand against a real Loki 3.7.6), and Tempo's exemplar label and span-metrics names were observed
    on a real Tempo 3.0.3 by hand;
  - that the grammar packages are exactly the ones the pinned releases bundle: lezer-promql 0.314.0
    is Prometheus 3.14's UI release, lezer-logql 0.2.8 the version in Grafana 12's package.json (13.2's
    own was not confirmed), and lezer-traceql 1.0.0 the latest release;
  - Grafana 13.2 accepting the provisioning files and the dashboards;
  - that the healthcheck commands succeed inside the images (busybox wget from the probe-tools
    volume, `loki -health`, wget in prom/prometheus, curl in grafana, python in obsbox);
  - modern `docker compose` v2 validation (only docker-compose 1.29 ran);
  - building the obsbox image, and data flowing end to end (metric -> trace -> logs in Grafana)."""


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def docker_compose(*args: str, env_file: Path | None, profiles: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run Debian's docker-compose 1.29 on the compose file, with no variables from this shell."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("docker-compose (Debian package docker-compose, 1.29) is not installed; scripts/test installs it")
    cmd = [binary, "--project-directory", str(COMPOSE_DIR), "-f", str(COMPOSE_FILE)]
    if env_file is not None:
        cmd += ["--env-file", str(env_file)]
    for profile in profiles:
        cmd += ["--profile", profile]
    clean_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(COMPOSE_DIR)}
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=clean_env, timeout=60, check=False)


@pytest.fixture(scope="session")
def env_file(tmp_path_factory) -> Path:
    """.env.example with a throwaway Grafana password filled in (the example ships none)."""
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    assert "\nGRAFANA_ADMIN_PASSWORD=\n" in text, ".env.example must leave GRAFANA_ADMIN_PASSWORD empty"
    path = tmp_path_factory.mktemp("compose") / "test.env"
    path.write_text(
        text.replace("\nGRAFANA_ADMIN_PASSWORD=\n", f"\nGRAFANA_ADMIN_PASSWORD={secrets.token_urlsafe(18)}\n")
    )
    return path


@pytest.fixture(scope="session")
def rendered(env_file) -> dict[str, Any]:
    """The compose file after interpolation, with the demo profile, as docker-compose 1.29 renders it."""
    result = docker_compose("config", env_file=env_file, profiles=("demo",))
    assert result.returncode == 0, f"docker-compose config failed:\n{result.stderr}"
    return yaml.safe_load(result.stdout)


@pytest.fixture(scope="session")
def compose_raw() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


@pytest.fixture(scope="session")
def otelcol() -> dict[str, Any]:
    return load_yaml(OTELCOL)


def pytest_terminal_summary(terminalreporter):
    """Say what these tests could not check, whenever any of them ran."""
    reports = [rep for key in ("passed", "failed", "error") for rep in terminalreporter.stats.get(key, [])]
    if any(getattr(rep, "nodeid", "").startswith("tests/stack/") for rep in reports):
        terminalreporter.write_sep("-", "UNVERIFIED")
        terminalreporter.write_line(UNVERIFIED)
