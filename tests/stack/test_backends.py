"""compose/loki and compose/tempo: parse-level checks of what the rest of the stack relies on."""

from __future__ import annotations

from urllib.parse import urlsplit

from obsbox import conventions
from tests.stack.conftest import COMPOSE_DIR, load_yaml

LOKI = load_yaml(COMPOSE_DIR / "loki" / "loki.yaml")
TEMPO = load_yaml(COMPOSE_DIR / "tempo" / "tempo.yaml")


def test_loki_schema_v13_with_structured_metadata():
    (period,) = LOKI["schema_config"]["configs"]
    assert (period["schema"], period["store"], period["object_store"]) == ("v13", "tsdb", "filesystem")
    assert LOKI["limits_config"]["allow_structured_metadata"] is True
    assert LOKI["auth_enabled"] is False  # one tenant: the collector's OTLP exporter sends no X-Scope-OrgID


def test_loki_listens_where_the_collector_and_grafana_look():
    assert LOKI["server"]["http_listen_port"] == conventions.PORTS["loki"]


def test_loki_keeps_its_data_on_the_volume(rendered):
    (mount,) = [v for v in rendered["services"]["loki"]["volumes"] if v.startswith("loki-data:")]
    root = mount.split(":")[1]
    assert LOKI["common"]["path_prefix"] == root
    paths = [*LOKI["common"]["storage"]["filesystem"].values(), LOKI["compactor"]["working_directory"]]
    assert all(p.startswith(root + "/") for p in paths), paths
    if LOKI["compactor"].get("retention_enabled"):
        assert LOKI["compactor"]["delete_request_store"] == "filesystem"  # Loki 3 requires it with retention


def test_tempo_listens_where_the_collector_and_grafana_look():
    assert TEMPO["server"]["http_listen_port"] == conventions.PORTS["tempo"]
    protocols = TEMPO["distributor"]["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == f"0.0.0.0:{conventions.PORTS['otlp_grpc']}"


def test_tempo_generates_service_graphs_and_span_metrics_with_exemplars(rendered):
    processors = TEMPO["overrides"]["defaults"]["metrics_generator"]["processors"]
    assert {"service-graphs", "span-metrics"} <= set(processors)
    (remote,) = TEMPO["metrics_generator"]["storage"]["remote_write"]
    url = urlsplit(remote["url"])
    assert (url.hostname, url.port, url.path) == ("prometheus", conventions.PORTS["prometheus"], "/api/v1/write")
    assert url.hostname in rendered["services"]
    assert remote["send_exemplars"] is True
    assert TEMPO["metrics_generator"]["registry"]["external_labels"] == {"source": "tempo"}


def test_tempo_keeps_its_data_on_the_volume(rendered):
    (mount,) = [v for v in rendered["services"]["tempo"]["volumes"] if v.startswith("tempo-data:")]
    root = mount.split(":")[1]
    paths = [
        TEMPO["storage"]["trace"]["wal"]["path"],
        TEMPO["storage"]["trace"]["local"]["path"],
        TEMPO["metrics_generator"]["storage"]["path"],
    ]
    assert all(p.startswith(root + "/") for p in paths), paths
    assert TEMPO["storage"]["trace"]["backend"] == "local"
