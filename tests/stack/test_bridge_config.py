"""compose/obsbox/bridge.yaml, loaded by the bridge's own config loader."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from obsbox import conventions
from obsbox.exporters.bridge import config as bridge_config
from tests.stack.conftest import COMPOSE_DIR

BRIDGE_YAML = COMPOSE_DIR / "obsbox" / "bridge.yaml"


def test_the_bridge_config_loads_and_ships_logs_and_spans_to_the_collector(rendered):
    config = bridge_config.load(BRIDGE_YAML)
    (pipeline,) = config.pipelines.values()
    assert pipeline.processors == ["parse", "trace", "redact", "log_metrics"]
    assert set(pipeline.sinks) == {"otlp", "spans"}
    for key in pipeline.sinks:
        endpoint = urlsplit(config.components["sinks"][key].config.endpoint)
        assert (endpoint.hostname, endpoint.port) == ("collector", conventions.PORTS["otlp_http"])
        assert endpoint.hostname in rendered["services"]


def test_the_bridge_reads_what_compose_mounts_and_keeps_state_on_its_volume(rendered):
    config = bridge_config.load(BRIDGE_YAML)
    (source,) = config.components["sources"].values()
    assert source.config.include == ["/logs/*.json", "/logs-demo/*.json"]
    mounts = {e.split(":")[1]: e.split(":")[0] for e in rendered["services"]["bridge"]["volumes"]}
    for pattern in source.config.include:
        assert str(Path(pattern).parent) in mounts, pattern
    assert mounts[str(config.settings.state_dir)] == "bridge-state"
