"""compose/grafana/provisioning: data sources linked metric -> trace -> logs, and the dashboards."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from obsbox import cli, conventions
from tests.stack.conftest import COMPOSE_DIR, load_yaml
from tests.stack.grafana_env import expand

PROVISIONING = COMPOSE_DIR / "grafana" / "provisioning"
RAW = load_yaml(PROVISIONING / "datasources" / "datasources.yaml")
# What Grafana sees: the file after its environment expansion ("$$" is a literal "$").
DATASOURCES = {ds["type"]: ds for ds in expand(RAW, {})["datasources"]}
UID = conventions.DATASOURCE_UIDS

TRACES_TO_LOGS_QUERY = '{service_name="${__span.tags["service.name"]}"} | trace_id="${__trace.traceId}"'


def test_grafana_expansion_is_modelled_faithfully():
    assert expand("$${__value.raw}", {}) == "${__value.raw}"
    assert expand("${__value.raw}", {}) == ""  # an unescaped template variable silently vanishes
    assert expand("rate(x{$$__tags}[5m])", {}) == "rate(x{$__tags}[5m])"
    assert expand("$HOME/x", {"HOME": "/h"}) == "/h/x"


class EveryVariableSet(dict):
    """An environment in which every variable Grafana could look up is set."""

    def get(self, key, default=None):
        return f"<{key}>"


def test_no_value_depends_on_grafana_s_environment():
    assert expand(RAW, {}) == expand(RAW, EveryVariableSet()), "an unescaped $ would be expanded by Grafana"


def test_one_data_source_per_backend_with_the_conventional_uids(rendered):
    assert set(DATASOURCES) == set(UID)
    for kind, ds in DATASOURCES.items():
        assert ds["uid"] == UID[kind]
        url = urlsplit(ds["url"])
        assert url.hostname == kind and url.hostname in rendered["services"]
        assert url.port == conventions.PORTS[kind]
    assert DATASOURCES["prometheus"]["isDefault"] is True


def test_prometheus_exemplars_link_to_tempo():
    (dest,) = DATASOURCES["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert dest["name"] == "trace_id"  # the exemplar label Prometheus stores for OTLP exemplars
    assert dest["datasourceUid"] == UID["tempo"]


def test_loki_links_the_structured_metadata_trace_id_to_tempo():
    (field,) = DATASOURCES["loki"]["jsonData"]["derivedFields"]
    assert field["matcherType"] == "label"
    assert field["matcherRegex"] == "trace_id"
    assert field["datasourceUid"] == UID["tempo"]
    assert field["url"] == "${__value.raw}"


def test_tempo_links_a_span_to_its_logs():
    logs = DATASOURCES["tempo"]["jsonData"]["tracesToLogsV2"]
    assert logs["datasourceUid"] == UID["loki"]
    assert logs["customQuery"] is True
    assert logs["query"] == TRACES_TO_LOGS_QUERY


def test_tempo_links_a_span_to_its_metrics_and_draws_the_service_map():
    data = DATASOURCES["tempo"]["jsonData"]
    metrics = data["tracesToMetrics"]
    assert metrics["datasourceUid"] == UID["prometheus"]
    assert {"key": "service.name", "value": "service"} in metrics["tags"]  # Tempo's span metrics label
    queries = [q["query"] for q in metrics["queries"]]
    assert queries and all("{$__tags" in q for q in queries)
    assert {m for q in queries for m in re.findall(r"traces_spanmetrics_\w+", q)} == {
        "traces_spanmetrics_calls_total",
        "traces_spanmetrics_latency_bucket",
    }
    assert data["serviceMap"]["datasourceUid"] == UID["prometheus"]
    assert data["nodeGraph"]["enabled"] is True


def test_dashboards_are_provisioned_from_the_built_folder(rendered):
    (provider,) = load_yaml(PROVISIONING / "dashboards" / "dashboards.yaml")["providers"]
    assert provider["type"] == "file"
    mounts = {e.split(":")[1]: e.split(":")[0] for e in rendered["services"]["grafana"]["volumes"]}
    assert mounts[provider["options"]["path"]] == str(COMPOSE_DIR / "grafana" / "dashboards")
    for kind in ("datasources", "dashboards"):
        assert mounts[f"/etc/grafana/provisioning/{kind}"] == str(PROVISIONING / kind)


def datasource_refs(node) -> list[dict]:
    """Every ``"datasource": {...}`` object in a dashboard model."""
    if isinstance(node, list):
        return [ref for item in node for ref in datasource_refs(item)]
    if not isinstance(node, dict):
        return []
    refs = [node["datasource"]] if isinstance(node.get("datasource"), dict) else []
    return refs + [ref for key, value in node.items() if key != "datasource" for ref in datasource_refs(value)]


def datasource_problems(model: dict) -> list[str]:
    """Data source references in a dashboard that the provisioned data sources do not satisfy."""
    provisioned = {ds["type"]: ds["uid"] for ds in DATASOURCES.values()}
    variables = {v["name"]: v for v in model["templating"]["list"] if v.get("type") == "datasource"}
    found = [
        f"variable {name}: {var['query']} defaults to {var['current']['value']!r}"
        for name, var in variables.items()
        if provisioned.get(var["query"]) != var["current"]["value"]
    ]
    for ds in datasource_refs(model):
        uid = ds.get("uid", "")
        if uid.startswith("${"):
            if uid[2:-1] not in variables:
                found.append(f"{ds}: no such variable")
        elif ds.get("type") in provisioned and uid != provisioned[ds["type"]]:
            found.append(f"{ds}: not a provisioned uid")
    return found


def test_dashboards_resolve_to_the_provisioned_data_sources(tmp_path):
    built = tmp_path / "dashboards"
    assert cli.main(["dashboards", "build", "--out", str(built)]) == 0
    paths = sorted(built.glob("*.json")) + sorted((COMPOSE_DIR / "grafana" / "dashboards").glob("*.json"))
    assert paths, "`obsbox dashboards build` wrote no dashboard"
    for path in paths:
        model = json.loads(path.read_text())
        assert model["uid"] and model["title"], path
        assert datasource_problems(model) == [], path
    print(f"{len(paths)} dashboards checked against the provisioned data sources")


def test_the_check_catches_a_dashboard_pointing_elsewhere():
    model = {
        "templating": {
            "list": [
                {"name": "ds_prometheus", "type": "datasource", "query": "prometheus", "current": {"value": "other"}}
            ]
        },
        "panels": [{"datasource": {"type": "loki", "uid": "${ds_loki}"}}],
    }
    assert len(datasource_problems(model)) == 2
