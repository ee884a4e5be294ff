"""The YAML pipeline: located errors (file:line: key), env expansion, and the CLI as its shorthand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from obsbox.config import ConfigError, parse_size
from obsbox.exporters.bridge import config as bridge_config

GOOD = """\
sources:
  tail:
    include: [/var/log/app/*.json]
    max_line_bytes: 512KiB
    scan_interval: 250ms
processors:
  parse: {}
  trace:
    correlation_keys: [request_id]
  redact: {}
sinks:
  loki:
    url: ${env:LOKI_URL:-http://localhost:3100}
  file/enriched:
    path: enriched.jsonl
pipelines:
  logs:
    sources: [tail]
    processors: [parse, trace, redact]
    sinks: [loki, file/enriched]
"""


def load(text: str):
    return bridge_config.from_text(text, source="bridge.yaml")


def error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(text)
    return str(caught.value)


def test_a_good_config_loads_with_units_and_env_defaults(monkeypatch):
    monkeypatch.delenv("LOKI_URL", raising=False)
    config = load(GOOD)
    tail = config.components["sources"]["tail"].config
    assert tail.max_line_bytes == 512 * 1024 and tail.scan_interval == 0.25
    assert config.components["sinks"]["loki"].config.url == "http://localhost:3100"
    assert config.components["processors"]["trace"].config.correlation_keys == ["request_id"]
    monkeypatch.setenv("LOKI_URL", "http://loki:3100")
    assert load(GOOD).components["sinks"]["loki"].config.url == "http://loki:3100"


def test_unknown_key_names_the_file_the_line_and_the_key():
    message = error(GOOD.replace("    path: enriched.jsonl", "    path: enriched.jsonl\n    fsnyc: true"))
    assert message.startswith("bridge.yaml:16: sinks.file/enriched.fsnyc: unknown key")
    assert "fsync" in message  # the known keys are listed


def test_unknown_component_type_lists_what_is_installed():
    message = error(GOOD.replace("  loki:\n", "  kafka:\n").replace("sinks: [loki,", "sinks: [kafka,"))
    assert "bridge.yaml:12: sinks.kafka: no sink named 'kafka'" in message and "loki" in message


def test_undefined_reference_points_at_the_pipeline_line():
    message = error(
        GOOD.replace("sinks: [loki, file/enriched]", "sinks: [loki, file/enrich]").replace(
            "  file/enriched:\n    path: enriched.jsonl\n", ""
        )
    )
    assert "'file/enrich' is not defined under sinks" in message and "bridge.yaml:" in message


def test_unused_component_is_an_error():
    message = error(GOOD.replace("sinks: [loki, file/enriched]", "sinks: [loki]"))
    assert "bridge.yaml:14: sinks.file/enriched: defined but not used" in message


def test_wrong_types_and_bad_values_are_located():
    assert "bridge.yaml:4: sources.tail.max_line_bytes: must be a whole number" in error(GOOD.replace("512KiB", "lots"))
    assert "must be true or false" in error(GOOD.replace("  redact: {}", "  redact:\n    builtin: maybe"))
    assert "unknown trace forms" in error(GOOD.replace("correlation_keys: [request_id]", "forms: [w3c, zipkin]"))


def test_missing_env_without_default_is_an_error(monkeypatch):
    monkeypatch.delenv("NO_SUCH_VAR", raising=False)
    message = error(GOOD.replace("${env:LOKI_URL:-http://localhost:3100}", "${env:NO_SUCH_VAR}"))
    assert "sinks.loki.url: environment variable NO_SUCH_VAR is not set" in message


def test_invalid_yaml_names_the_line():
    assert error("sources:\n  tail: [unclosed\n").startswith("bridge.yaml:3:")


def test_a_source_feeds_one_pipeline():
    twice = GOOD + "  other:\n    sources: [tail]\n    sinks: [loki]\n"
    assert "already feeds pipeline 'logs'" in error(twice)


def test_the_example_config_loads():
    example = Path(bridge_config.__file__).with_name("bridge.example.yaml")
    config = bridge_config.load(example)
    assert set(config.pipelines) == {"logs"}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "obsbox", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_print_config_is_a_loadable_pipeline_equal_to_the_cli(tmp_path):
    result = run_cli(
        "bridge",
        "a.json",
        "logs/*.json",
        "--to",
        "loki:http://h:3100?tenant_id=acme&compression=none",
        "--to",
        "file:out.jsonl",
        "--to",
        "file:copy.jsonl",
        "--correlation-key",
        "request_id",
        "--no-redact",
        "--positions",
        str(tmp_path / "p.json"),
        "--print-config",
    )
    assert result.returncode == 0, result.stderr
    data = yaml.safe_load(result.stdout)
    assert data["sinks"] == {
        "loki": {"tenant_id": "acme", "compression": "none", "url": "http://h:3100"},
        "file": {"path": "out.jsonl"},
        "file/2": {"path": "copy.jsonl"},
    }
    assert data["pipelines"]["logs"]["processors"] == ["parse", "trace"]
    (tmp_path / "b.yaml").write_text(result.stdout)
    config = bridge_config.load(tmp_path / "b.yaml")
    assert config.components["sinks"]["loki"].config.tenant_id == "acme"
    assert config.components["sources"]["tail"].config.include == ["a.json", "logs/*.json"]


def test_cli_errors_are_clear_and_exit_2(tmp_path):
    bad_sink = run_cli("bridge", "x.log", "--to", "kafka:broker:9092")
    assert bad_sink.returncode == 2 and "expected stdout, file:PATH, loki:URL or otlp:URL" in bad_sink.stderr
    (tmp_path / "bad.yaml").write_text("sources: {}\npipelines: {}\n")
    bad_file = run_cli("bridge", "--config", str(tmp_path / "bad.yaml"))
    assert bad_file.returncode == 2 and "bad.yaml:2: pipelines: at least one pipeline is required" in bad_file.stderr
    positions = tmp_path / "positions.json"
    positions.write_text("{not json")
    (tmp_path / "x.log").write_text("{}\n")
    torn = run_cli("bridge", str(tmp_path / "x.log"), "--once", "--positions", str(positions))
    assert torn.returncode == 2 and "positions file" in torn.stderr and "move it aside" in torn.stderr


def test_help_documents_sinks_and_examples():
    result = run_cli("bridge", "--help")
    assert result.returncode == 0
    for needle in ("loki:URL", "otlp:URL", "file:PATH", "--once", "--positions", "examples:", "--config"):
        assert needle in result.stdout


def test_a_check_of_one_field_points_at_that_key_and_its_line():
    message = error(GOOD.replace("${env:LOKI_URL:-http://localhost:3100}", "localhost:3100"))
    assert message.startswith("bridge.yaml:13: sinks.loki.url: 'localhost:3100' is not an http(s) URL"), message
    assert "e.g. http://localhost:3100" in message


def test_a_refused_url_is_shown_without_its_credentials():
    message = error(GOOD.replace("${env:LOKI_URL:-http://localhost:3100}", "http://tenant:s3cret@loki:31OO"))
    assert "sinks.loki.url" in message and "port must be a number" in message
    assert "s3cret" not in message and "tenant" not in message, message


def test_sizes_parse_alike_wherever_they_are_written():
    assert [parse_size(s) for s in ("4096", "512KiB", "1MiB", "2MB", " 3 kb ")] == [
        4096,
        524288,
        1 << 20,
        2 * 10**6,
        3000,
    ]
    for bad in ("1.5MiB", "-1", "1TiB", "", "1 MiB 2"):
        with pytest.raises(ValueError, match="is not a size"):
            parse_size(bad)
