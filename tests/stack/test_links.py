"""Every link in compose/README.md's diagram, checked against what each side writes and reads.

Logs: the bridge's real OTLP sink (configured by compose/obsbox/bridge.yaml) encodes lines; the Loki
double (tests/stack/loki_double.py, Loki 3.7's mapping read from its source) ingests them with the
limits of compose/loki/loki.yaml; every LogQL stream selector and label filter the project ships must
find its names there. Traces -> metrics: Tempo's exemplar label and span-metrics names against
Grafana's provisioning. Unverified: a running Loki, Tempo and Grafana (no Docker engine here).
"""

from __future__ import annotations

import gzip
import re
import time
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from obsbox.dashboards import queries as q
from obsbox.exporters.bridge import config as bridge_config
from obsbox.exporters.bridge.sinks.otlp import OtlpSink
from tests.bridge.harness import context, traced
from tests.grammars.shipped import everything
from tests.stack.conftest import COMPOSE_DIR, load_yaml
from tests.stack.loki_double import Limits, LokiOTLP

LOKI = load_yaml(COMPOSE_DIR / "loki" / "loki.yaml")
TEMPO = load_yaml(COMPOSE_DIR / "tempo" / "tempo.yaml")
DATASOURCES = load_yaml(COMPOSE_DIR / "grafana" / "provisioning" / "datasources" / "datasources.yaml")
BRIDGE = bridge_config.load(COMPOSE_DIR / "obsbox" / "bridge.yaml")
DURATION = re.compile(r"(\d+)([dhm])")
SELECTOR = re.compile(r"\{([^{}]*)\}")
MATCHER = re.compile(r'([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)\s*"')
# A label filter after the selector: `| name=~"..."` (LogQL's label filter expression).
LABEL_FILTER = re.compile(r'\|\s*([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)\s*"')


def duration(text: str) -> timedelta:
    """Loki's model.Duration for the units used in loki.yaml (d, h, m)."""
    found = DURATION.fullmatch(str(text))
    assert found, f"unexpected duration {text!r}"
    n, unit = int(found.group(1)), found.group(2)
    return timedelta(days=n) if unit == "d" else timedelta(hours=n) if unit == "h" else timedelta(minutes=n)


def compose_limits() -> Limits:
    limits = LOKI["limits_config"]
    return Limits(
        allow_structured_metadata=limits["allow_structured_metadata"],
        discover_log_levels=limits.get("discover_log_levels", True),
        reject_old_samples=limits.get("reject_old_samples", True),
        reject_old_samples_max_age=duration(limits.get("reject_old_samples_max_age", "7d")),
        creation_grace_period=duration(limits.get("creation_grace_period", "10m")),
        max_chunk_age=duration(LOKI.get("ingester", {}).get("max_chunk_age", "2h")),
    )


def line(level: str, when: datetime, message: str = "m") -> bytes:
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return orjson.dumps({"timestamp": stamp, "level": level, "service": "gateway", "message": message})


def bridge_request(*lines: bytes) -> ExportLogsServiceRequest:
    """What the compose bridge's `otlp` sink sends the collector for these lines."""
    sink = OtlpSink(BRIDGE.components["sinks"]["otlp"].config, context())
    ((body, headers, _),) = list(sink.requests(traced(*lines)))
    if headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return ExportLogsServiceRequest.FromString(body)


def shipped_logql() -> list:
    return [s for s in everything() if s.lang == "logql"]


@pytest.fixture(scope="module")
def ingested():
    now = datetime.now(UTC)
    levels = ("info", "warning", "ERROR", "fatal", "critical", "debug")
    loki = LokiOTLP(compose_limits())
    result = loki.push(bridge_request(*(line(lv, now, lv) for lv in levels)), time.time_ns())
    assert not result.rejected, result.rejected
    return result


def test_the_otlp_path_indexes_service_name_and_keeps_severity_and_trace_id_as_metadata(ingested):
    ((labels, entries),) = ingested.accepted.items()
    assert dict(labels)["service_name"] == "gateway"
    assert "level" not in dict(labels) and "severity_text" not in dict(labels)
    for entry in entries:
        assert re.fullmatch(r"[0-9a-f]{32}", entry.structured_metadata["trace_id"])
        assert "severity_text" in entry.structured_metadata
    levels = {orjson.loads(e.line)["message"]: e.structured_metadata["detected_level"] for e in entries}
    assert levels["warning"] == "warn" and levels["ERROR"] == "error" and levels["critical"] == "critical"


@pytest.mark.parametrize("shipped", shipped_logql(), ids=lambda s: s.where)
def test_every_logql_selector_and_label_filter_names_what_the_compose_path_writes(ingested, shipped):
    ((labels, entries),) = ingested.accepted.items()
    stream_labels = set(dict(labels))
    metadata = set().union(*(e.structured_metadata for e in entries))
    selectors = SELECTOR.findall(shipped.expr)
    assert selectors, shipped.expr
    selected = {name for sel in selectors for name in MATCHER.findall(sel)}
    assert selected <= stream_labels, f"{shipped.where}: {selected - stream_labels} is not a stream label in Loki"
    filtered = set(LABEL_FILTER.findall(shipped.expr))
    assert filtered <= stream_labels | metadata, f"{shipped.where}: {filtered - stream_labels - metadata} unknown"
    grouped = {g.strip() for by in re.findall(r"by \(([^)]*)\)", shipped.expr) for g in by.split(",")}
    assert grouped <= stream_labels | metadata, f"{shipped.where}: groups by {grouped - stream_labels - metadata}"


def test_loki_s_trace_link_reads_the_structured_metadata_the_otlp_path_writes(ingested):
    """Logs -> trace: the derived field (matcherType label) names a structured-metadata key of every line."""
    (loki,) = [ds for ds in DATASOURCES["datasources"] if ds["type"] == "loki"]
    ((_, entries),) = ingested.accepted.items()
    for derived in loki["jsonData"]["derivedFields"]:
        assert derived["matcherType"] == "label"
        assert all(derived["matcherRegex"] in e.structured_metadata for e in entries), derived


def test_the_error_panel_s_level_filter_matches_what_loki_detects(ingested):
    ((_, entries),) = ingested.accepted.items()
    (pattern,) = re.findall(r'detected_level=~"([^"]+)"', q.LOKI_ERRORS.expr)
    matched = {
        orjson.loads(e.line)["message"]
        for e in entries
        if re.fullmatch(pattern, e.structured_metadata["detected_level"])
    }
    assert matched == {"ERROR", "fatal", "critical"}


def test_a_push_following_the_convention_lands_like_the_otlp_path(ingested):
    """The contract for the bridge's `loki:` push sink: labels service_name (and only labels from Loki's
    default OTLP index list), structured metadata severity_text, severity_number, trace_id, span_id.
    Loki then gives the pushed lines the same streams and the same detected_level as the OTLP path."""
    ((labels, entries),) = ingested.accepted.items()
    values = [
        [
            str(e.timestamp_ns),
            e.line,
            {k: e.structured_metadata[k] for k in ("severity_text", "severity_number", "trace_id", "span_id")},
        ]
        for e in entries
    ]
    pushed = LokiOTLP(compose_limits()).push_json(
        {"streams": [{"stream": dict(labels), "values": values}]}, time.time_ns()
    )
    ((push_labels, push_entries),) = pushed.accepted.items()
    assert push_labels == labels
    assert [e.structured_metadata["detected_level"] for e in push_entries] == [
        e.structured_metadata["detected_level"] for e in entries
    ]


def test_the_selector_check_fails_for_a_level_stream_label(ingested):
    ((labels, _),) = ingested.accepted.items()
    assert not {"level"} <= set(dict(labels)), "the old `level` stream label must not exist on the OTLP path"


@pytest.mark.parametrize(("age", "accepted"), [(timedelta(days=30), True), (timedelta(days=32), False)])
def test_the_compose_loki_accepts_a_30_day_backfill_into_a_live_stream(age, accepted):
    """A live stream first (now), then lines `age` old into the same stream."""
    loki = LokiOTLP(compose_limits())
    now = datetime.now(UTC)
    assert not loki.push(bridge_request(line("info", now)), time.time_ns()).rejected
    result = loki.push(bridge_request(line("info", now - age, "old")), time.time_ns())
    assert (not result.rejected) is accepted, result.rejected
    if not accepted:
        assert result.rejected[0][1] == "greater_than_max_sample_age"


def test_loki_s_defaults_would_refuse_that_backfill():
    """The double is as strict as Loki: with its default limits the same backfill is refused."""
    loki = LokiOTLP(Limits())
    now = datetime.now(UTC)
    loki.push(bridge_request(line("info", now)), time.time_ns())
    result = loki.push(bridge_request(line("info", now - timedelta(hours=3), "behind")), time.time_ns())
    assert [reason for _, reason in result.rejected] == ["entry too far behind"]
    result = loki.push(bridge_request(line("info", now - timedelta(days=8), "old")), time.time_ns())
    assert [reason for _, reason in result.rejected] == ["greater_than_max_sample_age"]


def test_retention_keeps_what_the_backfill_window_admits():
    limits = LOKI["limits_config"]
    window = duration(limits["reject_old_samples_max_age"])
    assert duration(limits["retention_period"]) >= window
    assert duration(LOKI["ingester"]["max_chunk_age"]) >= 2 * window
    assert LOKI["querier"]["query_ingesters_within"] == 0
    assert window >= timedelta(days=30)


# ---------------------------------------------------------------- traces -> metrics


def test_tempo_exemplars_carry_the_label_grafana_links():
    label = TEMPO["overrides"]["defaults"]["metrics_generator"]["trace_id_label_name"]
    (prometheus,) = [ds for ds in DATASOURCES["datasources"] if ds["type"] == "prometheus"]
    names = {d["name"] for d in prometheus["jsonData"]["exemplarTraceIdDestinations"]}
    assert label in names
    # Prometheus' OTLP receiver names the collector's exemplar label trace_id as well
    # (Prometheus 3.14: storage/remote/otlptranslator/prometheusremotewrite/helper.go, traceIDKey).
    assert "trace_id" in names


def test_traces_to_metrics_uses_tempo_s_span_metrics_names():
    """modules/generator/processor/spanmetrics (Tempo 3.0): traces_spanmetrics_calls_total and
    traces_spanmetrics_latency, labels service, span_name, span_kind, status_code."""
    (tempo,) = [ds for ds in DATASOURCES["datasources"] if ds["type"] == "tempo"]
    links = tempo["jsonData"]["tracesToMetrics"]
    assert {t["value"] for t in links["tags"] if t["key"] == "service.name"} == {"service"}
    written = {"traces_spanmetrics_calls_total", "traces_spanmetrics_latency_bucket"}
    labels = {"service", "span_name", "span_kind", "status_code", "obsbox_span_source", "le"}
    for query in links["queries"]:
        assert set(re.findall(r"traces_spanmetrics_\w+", query["query"])) <= written, query
        used = set(re.findall(r"by \(([^)]*)\)", query["query"])) | set(MATCHER.findall(query["query"]))
        used = {u.strip() for part in used for u in part.split(",")}
        assert used <= labels, query


def test_span_metrics_keep_the_bridge_s_spans_apart_in_the_collector_and_tempo(otelcol):
    spans = BRIDGE.components["sinks"]["spans"].config
    attribute, value = "obsbox.span.source", spans.resource.get("obsbox.span.source")
    assert value == "logs"
    dims = {d["name"]: d.get("default") for d in otelcol["connectors"]["span_metrics"]["dimensions"]}
    assert attribute in dims and dims[attribute] not in (None, value)
    assert attribute in TEMPO["metrics_generator"]["processor"]["span_metrics"]["dimensions"]
