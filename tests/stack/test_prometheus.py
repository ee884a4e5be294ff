"""compose/prometheus: promtool on the config and rules, and the Prometheus 3 flags in compose."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from obsbox import conventions
from tests.stack.conftest import COMPOSE_DIR, HTTP_PORTS, load_yaml

CONFIG = COMPOSE_DIR / "prometheus" / "prometheus.yml"
RULES = COMPOSE_DIR / "prometheus" / "rules"


def promtool(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not installed (Debian package prometheus); scripts/test installs it")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)


# Keys of the pinned Prometheus (v3.14.0: config/config.go GlobalConfig) that Debian's promtool 2.42
# predates and rejects as unknown fields. promtool checks the rest of the file; these are checked by
# test_native_histograms_are_a_scrape_setting_not_a_feature_flag.
NEWER_THAN_PROMTOOL = {"global": {"scrape_native_histograms"}}


def test_promtool_accepts_the_config_and_the_rules_it_loads(tmp_path):
    version = promtool("--version").stdout.split("\n", 1)[0]
    config = load_yaml(CONFIG)
    for section, keys in NEWER_THAN_PROMTOOL.items():
        for key in keys:
            config[section].pop(key)
    checked = tmp_path / CONFIG.name
    checked.write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp_path / "rules").symlink_to(RULES)
    result = promtool("check", "config", str(checked))
    assert result.returncode == 0, result.stdout + result.stderr
    rule_files = sorted(RULES.glob("*.yml"))
    assert f"SUCCESS: {len(rule_files)} rule files found" in result.stdout
    print(f"{version}: {CONFIG.name} and {len(rule_files)} rule file(s) valid with 2.x semantics")


def test_promtool_here_does_reject_the_3_x_keys_it_is_spared(tmp_path):
    """If Debian's promtool learns these keys, NEWER_THAN_PROMTOOL can shrink."""
    checked = tmp_path / CONFIG.name
    checked.write_text(CONFIG.read_text(encoding="utf-8"))
    (tmp_path / "rules").symlink_to(RULES)
    result = promtool("check", "config", str(checked))
    assert result.returncode != 0
    assert "scrape_native_histograms" in result.stdout + result.stderr


def test_rules_are_loaded_from_the_mounted_folder(rendered):
    config = load_yaml(CONFIG)
    assert config["rule_files"] == ["rules/*.yml"]
    mounts = {entry.split(":")[1]: entry.split(":")[0] for entry in rendered["services"]["prometheus"]["volumes"]}
    assert Path(mounts["/etc/prometheus/rules"]) == RULES
    assert Path(mounts["/etc/prometheus/prometheus.yml"]) == CONFIG


def test_prometheus_3_runs_with_otlp_remote_write_exemplars_and_native_histograms(rendered):
    flags = rendered["services"]["prometheus"]["command"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in flags
    assert "--web.enable-otlp-receiver" in flags
    assert "--web.enable-remote-write-receiver" in flags
    features = {f for flag in flags if flag.startswith("--enable-feature=") for f in flag.split("=", 1)[1].split(",")}
    assert "exemplar-storage" in features
    storage = load_yaml(CONFIG)["storage"]
    assert storage["exemplars"]["max_exemplars"] > 0
    assert storage["tsdb"]["out_of_order_time_window"]


def test_native_histograms_are_a_scrape_setting_not_a_feature_flag(rendered):
    """Prometheus 3.9 made --enable-feature=native-histograms a no-op (cmd/prometheus/main.go at v3.14.0
    logs a warning for it); scraping them is global.scrape_native_histograms (3.8+), default false."""
    flags = rendered["services"]["prometheus"]["command"]
    features = {f for flag in flags if flag.startswith("--enable-feature=") for f in flag.split("=", 1)[1].split(",")}
    assert "native-histograms" not in features
    assert load_yaml(CONFIG)["global"]["scrape_native_histograms"] is True


def test_scrape_targets_are_compose_services_on_their_ports(rendered):
    config = load_yaml(CONFIG)
    ports = {
        **{name: HTTP_PORTS[name] for name in ("tempo", "loki", "grafana")},
        "collector": conventions.PORTS["collector_metrics"],
        "localhost": conventions.PORTS["prometheus"],
        "gateway": conventions.PORTS["demo_backend_metrics"],  # the demo's simulated vLLM backend (job vllm)
    }
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert {t.split(":")[0] for t in targets} == set(ports)
    for target in targets:
        host, port = target.split(":")
        assert int(port) == ports[host], target
        assert host == "localhost" or host in rendered["services"], target
