"""Trace → metrics links select the span's own source.

The gateway's SDK spans and the spans the bridge derives from its log lines have the same service and
span names. Tempo's span metrics keep them apart by the dimension ``obsbox.span.source``
(compose/tempo/tempo.yaml), which the bridge's spans carry as ``logs`` and, since the collector marks
every other span, the SDK's as ``sdk``. Grafana's "Metrics for this span" queries must select on it:
without it a link adds both sources (a request rate of 3.58/s = 2.52 from the SDK + 1.07 from the
logs, on the real stack). The queries run here in Prometheus' own engine (``promtool test rules``) on
the series Tempo writes for one service and span from both sources.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.stack.collector_processors import apply_to_resource
from tests.stack.conftest import COMPOSE_DIR, load_yaml

REPO = Path(__file__).resolve().parents[2]
OTELCOL = load_yaml(REPO / "collector" / "otelcol.yaml")
GATEWAY = load_yaml(REPO / "collector" / "gateway.yaml")
DATASOURCES = load_yaml(COMPOSE_DIR / "grafana" / "provisioning" / "datasources" / "datasources.yaml")
BRIDGE_SPANS = load_yaml(COMPOSE_DIR / "obsbox" / "bridge.yaml")["sinks"]["spans"]["resource"]
ATTRIBUTE = "obsbox.span.source"
RATES = {"sdk": 2.5, "logs": 1.0}  # spans per second of each source, for one service and span name
SERIES = {"service": "gateway", "span_name": "POST /v1/chat/completions", "span_kind": "SPAN_KIND_SERVER"}


def traces_to_metrics() -> dict:
    (tempo,) = [ds for ds in DATASOURCES["datasources"] if ds["type"] == "tempo"]
    return tempo["jsonData"]["tracesToMetrics"]


def collector_resource(config: dict, resource: dict[str, str], pipeline: str = "traces") -> dict[str, str]:
    """A resource after the processors of the config's pipeline (tests/stack/collector_processors.py),
    with the collector's environment empty: every ${env:VAR:-default} takes its default."""
    attrs = {key: AnyValue(string_value=value) for key, value in resource.items()}
    signal = {"traces": "trace", "metrics": "metric", "logs": "log"}[pipeline]
    apply_to_resource(attrs, config, {}, pipeline, signal)
    return {key: value.string_value for key, value in attrs.items()}


def grafana_tags(tags: list[dict], attributes: dict[str, str]) -> str:
    """``$__tags`` as Grafana fills it in: each configured tag the span has, as label="value"."""
    return ", ".join(f'{t.get("value") or t["key"]}="{attributes[t["key"]]}"' for t in tags if t["key"] in attributes)


def links(source_resource: dict[str, str]) -> dict[str, str]:
    config = traces_to_metrics()
    attributes = {"service.name": SERIES["service"], **collector_resource(OTELCOL, source_resource)}
    filled = grafana_tags(config["tags"], attributes)
    return {q["name"]: q["query"].replace("$$__tags", filled) for q in config["queries"]}


def promtool_eval(queries: dict[str, str], expected: dict[str, float], tmp_path: Path) -> subprocess.CompletedProcess:
    """Every query at the 10th minute of the series, as Prometheus evaluates it."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (Debian package prometheus); scripts/test installs it")
    series = []
    for source, rate in RATES.items():
        labels = ", ".join(f'{k}="{v}"' for k, v in {**SERIES, "obsbox_span_source": source, "source": "tempo"}.items())
        series.append({"series": f"traces_spanmetrics_calls_total{{{labels}}}", "values": f"0+{rate * 60:g}x20"})
        series.append(
            {"series": f'traces_spanmetrics_latency_bucket{{{labels}, le="+Inf"}}', "values": f"0+{rate * 60:g}x20"}
        )
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {
                    "expr": query,
                    "eval_time": "10m",
                    "exp_samples": [{"labels": labels_of(query), "value": expected[name]}],
                }
                for name, query in queries.items()
                if name in expected
            ],
        }
    ]
    spec = tmp_path / "links.test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run(
        [promtool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=60, check=False
    )


def labels_of(query: str) -> str:
    """The result's labels: ``sum by (span_name)`` keeps the span name, the others keep none."""
    by = re.search(r"sum by \((\w+)\)", query)
    return f'{{{by.group(1)}="{SERIES[by.group(1)]}"}}' if by and by.group(1) in SERIES else "{}"


@pytest.mark.parametrize("source", ["sdk", "logs"])
def test_a_span_s_request_rate_link_counts_its_own_source_only(source, tmp_path):
    resource = dict(BRIDGE_SPANS) if source == "logs" else {}
    assert resource.get(ATTRIBUTE, source) == source
    result = promtool_eval(links(resource), {"Request rate": RATES[source]}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_without_the_source_tag_a_link_adds_both_sources(tmp_path):
    """The check can fail: the queries filtered by the service alone count 3.5 spans a second."""
    config = traces_to_metrics()
    filled = grafana_tags([t for t in config["tags"] if t["key"] != ATTRIBUTE], {"service.name": SERIES["service"]})
    queries = {q["name"]: q["query"].replace("$$__tags", filled) for q in config["queries"]}
    assert promtool_eval(queries, {"Request rate": sum(RATES.values())}, tmp_path).returncode == 0
    assert promtool_eval(queries, {"Request rate": RATES["sdk"]}, tmp_path).returncode != 0


@pytest.mark.parametrize("config", [OTELCOL, GATEWAY], ids=["otelcol", "gateway"])
def test_the_collector_marks_every_other_span_in_the_traces_pipeline_only(config):
    assert collector_resource(config, {})[ATTRIBUTE] == "sdk"
    assert collector_resource(config, {ATTRIBUTE: "logs"})[ATTRIBUTE] == "logs"  # the bridge's stay theirs
    for signal in ("logs", "metrics"):
        assert ATTRIBUTE not in collector_resource(config, {}, signal)
    dims = {d["name"]: d.get("default") for d in config["connectors"]["span_metrics"]["dimensions"]}
    assert dims[ATTRIBUTE] == "sdk"  # the connector's series say the same as Tempo's
