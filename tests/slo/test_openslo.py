"""OpenSLO v1 in and out: every shipped spec round-trips, exports validate against OpenSLO's v1 JSON
schema, and the OpenSLO project's own v1 examples import or are refused in one line (testdata/openslo/
names their sources)."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import yaml

from obsbox.cli import main
from obsbox.config import ConfigError
from obsbox.slo import openslo
from obsbox.slo.rules import render, rules
from obsbox.slo.spec import DEFAULT_SPEC, load, loads

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = Path(__file__).parent / "testdata"
OPENSLO = TESTDATA / "openslo"
SHIPPED = [
    ROOT / "compose" / "slo.yaml",
    ROOT / "compose" / "slo-llm.yaml",
    DEFAULT_SPEC,
    *sorted(TESTDATA.glob("*.yaml")),
]


@pytest.fixture(scope="module")
def schema() -> jsonschema.Draft7Validator:
    """OpenSLO's v1 JSON schema, its parts found by their $id, as the project's own schema test loads them."""
    parts = [json.loads(p.read_text()) for p in sorted((OPENSLO / "schema" / "v1").rglob("*.json"))]
    registry = referencing.Registry().with_resources(
        (part["$id"], referencing.Resource.from_contents(part)) for part in parts
    )
    root = next(part for part in parts if part["$id"].endswith("/openslo.schema.json"))
    jsonschema.Draft7Validator.check_schema(root)
    return jsonschema.Draft7Validator(root, registry=registry)


def schema_form(document: dict[str, Any]) -> dict[str, Any]:
    """An SLO's alertPolicies as the v1 JSON schema writes them (names): the schema predates the spec
    text's and the Go SDK's ``alertPolicyRef`` objects, which the export writes. It also predates the
    spec text's ``RatioTimeslices``, so such an SLO is checked as an Occurrences one (the rest of it,
    timeSliceWindow included, is checked as written), and the spec text's (and the Go SDK's) ratioMetric
    ``raw``: a raw ratio is checked as a ratio of its metric source over itself."""
    out = copy.deepcopy(document)
    if out["kind"] == "SLO":
        out["spec"]["alertPolicies"] = [ref["alertPolicyRef"] for ref in out["spec"].get("alertPolicies", [])]
        if out["spec"]["budgetingMethod"] == "RatioTimeslices":
            out["spec"]["budgetingMethod"] = "Occurrences"
        ratio = out["spec"]["indicator"]["spec"].get("ratioMetric", {})
        if "raw" in ratio:
            raw = ratio.pop("raw")
            ratio.update({"counter": False, "good": raw, "total": raw})
            assert ratio.pop("rawType") in ("success", "failure")
    return out


def round_trip(spec: Path, tmp_path: Path) -> tuple[str, str]:
    """``spec`` exported to OpenSLO and imported back: the spec text written, and the OpenSLO text."""
    exported = openslo.dumps(openslo.export(load(spec)))
    (tmp_path / "exported.yaml").write_text(exported)
    return openslo.spec_text(openslo.load([tmp_path / "exported.yaml"]), ["exported.yaml"]), exported


@pytest.mark.parametrize("spec", SHIPPED, ids=lambda p: p.name if p != DEFAULT_SPEC else "obsbox/slo/slo.yaml")
def test_every_shipped_spec_round_trips_to_the_same_slos_and_rules(spec: Path, tmp_path: Path, schema):
    text, exported = round_trip(spec, tmp_path)
    original, back = load(spec), loads(text)
    assert back == original
    assert render(rules(back), "spec", back) == render(rules(original), "spec", original)
    documents = list(yaml.safe_load_all(exported))
    errors = [
        f"{d['kind']} {d['metadata']['name']}: {e.message}"
        for d in documents
        for e in schema.iter_errors(schema_form(d))
    ]
    assert errors == []
    assert {d["kind"] for d in documents} == {"SLO", "AlertPolicy", "AlertNotificationTarget"}


def test_the_schema_finds_what_it_should(schema):
    """The schema as loaded is not a pass-all: an export with a calendar window lacking its calendar fails."""
    (document, *_) = openslo.export(load(TESTDATA / "features.slo.yaml"))
    assert not list(schema.iter_errors(schema_form(document)))
    broken = schema_form(document)
    broken["spec"]["timeWindow"][0]["isRolling"] = False
    assert [e.message for e in schema.iter_errors(broken)]


def test_the_export_keeps_in_annotations_what_openslo_cannot_say():
    by_name = {d["metadata"]["name"]: d for d in openslo.export(load(ROOT / "compose" / "slo-llm.yaml"))}
    ttft = by_name["vllm-ttft"]
    indicator = ttft["spec"]["indicator"]
    assert indicator["spec"]["thresholdMetric"]["metricSource"]["spec"]["query"] == "vllm:time_to_first_token_seconds"
    assert ttft["spec"]["objectives"] == [{"op": "lte", "value": 0.45, "target": 0.99}]
    notes = indicator["metadata"]["annotations"]
    assert notes["obsbox.dev/off-bucket"] == "interpolate"
    assert json.loads(notes["obsbox.dev/older-names"]) == ["vllm_time_to_first_token_seconds"]
    assert json.loads(notes["obsbox.dev/buckets"])[:3] == [0.001, 0.005, 0.01]
    assert ttft["metadata"]["annotations"]["obsbox.dev/runbook"].startswith("Read the queue and prefill panels")
    seed = {d["metadata"]["name"]: d for d in openslo.export(load(DEFAULT_SPEC))}
    assert seed["reply-latency"]["metadata"]["annotations"]["obsbox.dev/name"] == "ReplyLatency"
    policy = json.loads(seed["reply-latency"]["metadata"]["annotations"]["obsbox.dev/policy"])
    assert [(step["below"], step["exhausted"], step["severity"]) for step in policy] == [
        ("50%", False, "ticket"),
        ("10%", False, "page"),
        (None, True, "page"),
    ]
    assert "obsbox.dev/dashboard-url" not in seed["reply-latency"]["metadata"]["annotations"]  # the default
    assert seed["availability"]["spec"]["indicator"]["spec"]["ratioMetric"]["bad"] == {
        "metricSource": {
            "type": "Prometheus",
            "spec": {"query": 'gateway_request_duration_seconds_count{status_code=~"5.."}'},
        }
    }


def prometheus_sli(tmp_path: Path, name: str) -> Path:
    """The SLI an example SLO refers to by ``indicatorRef`` without defining it, on Prometheus counters."""
    path = tmp_path / "sli.yaml"
    path.write_text(
        f"apiVersion: openslo/v1\nkind: SLI\nmetadata: {{name: {name}}}\nspec:\n  ratioMetric:\n    counter: true\n"
        "    good: {metricSource: {type: Prometheus, spec: {query: 'probe_requests_total{code=\"200\"}'}}}\n"
        "    total: {metricSource: {type: Prometheus, spec: {query: probe_requests_total}}}\n"
    )
    return path


def probe(tmp_path: Path, reference: str) -> Path:
    """An SLO document that refers to an example's SLI or alert policy, so that it is read as an SLO reads it."""
    path = tmp_path / "probe.yaml"
    path.write_text(
        "apiVersion: openslo/v1\nkind: SLO\nmetadata: {name: probe}\nspec:\n  service: probe\n"
        f"  budgetingMethod: Occurrences\n  {reference}\n"
    )
    return path


# Every SLO, SLI and alert policy of the project's v1 examples, and what obsbox makes of it.
SLI_OBJECTIVE = {
    "ratio": "objectives: [{target: 0.99}]",
    "threshold": "objectives: [{op: lte, value: 0.5, target: 0.99}]",
}
EXAMPLES = {
    # OpenSLO/OpenSLO examples/ (README: "Examples")
    ("openslo-examples/occurences-slo.yaml", "SLO search-slo"): "metricSource.type: Any: obsbox builds Prometheus",
    # Their budgeting and windows import (test_the_examples_budgeting_imports_with_a_prometheus_source)
    ("openslo-examples/ratio-timeslices.yaml", "SLO main-page"): "good.metricSource.type: Any: obsbox builds",
    # its two objectives import as two SLOs (test_each_objective_is_an_slo_of_its_own), but its window is
    # 1m (minutes) where its comment says a month
    ("openslo-examples/timeslices-slo.yaml", "SLO service-availability"): "duration: '1m' is not a calendar period",
    ("openslo-examples/low-traffic-timeslices-slo.yaml", "SLO service-availability"): "type: Any: obsbox builds",
    # OpenSLO/go-sdk pkg/openslo/v1/examples
    ("go-sdk/slos.yaml", "SLO web-availability"): "imports",  # Timeslices over calendar weeks in New York
    ("go-sdk/slis.yaml", "SLI search-availability"): "good.metricSource.type: Datadog: obsbox builds Prometheus",
    # gauges (counter: false) are read (test_a_gauge_ratio_sli_reads_the_means); this one is AppDynamics
    ("go-sdk/slis.yaml", "SLI end-user-response"): "bad.metricSource.type: AppDynamics: obsbox builds Prometheus",
    # a precomputed ratio with {{.window}}: each window put in (test_a_raw_ratio_reads_each_window)
    ("go-sdk/slis.yaml", "SLI wifi-client-satisfaction"): "imports",
    (
        "go-sdk/slis.yaml",
        "SLI annotator-throughput",
    ): "spec.query: 'sum(min_over_time(kafka_consumergroup_lag{k8s_cluster="
    '"prod", consumergroup="annotator", topic="annotator-in"}[2m]))\' is a value over time (a gauge), not a '
    "histogram",
    # single-window conditions: SLOBurnRate alerts (test_single_window_conditions_become_alerts_of_their_own)
    ("go-sdk/alert_policies.yaml", "AlertPolicy low-priority"): "imports",
    ("go-sdk/alert_policies.yaml", "AlertPolicy high-priority"): "imports",
    ("go-sdk/alert_policies.yaml", "AlertPolicy medium-priority"): "imports",
    # OpenSLO/OpenSLO schema-test/spec-files/v1: the files its schema test expects to be valid
    **{
        ("schema-test/" + name, "SLI great-sli"): outcome
        for name, outcome in {
            "sli-description-ratio-bad-inline-metricsource.yaml": "bad.metricSource.type: Redshift",
            "sli-description-ratio-good-inline-metricsource.yaml": "good.metricSource.type: Redshift",
            "sli-no-description-ratio-bad-inline-metricsource.yaml": "bad.metricSource.type: Redshift",
            "sli-no-description-ratio-good-inline-metricsource.yaml": "good.metricSource.type: Redshift",
            "sli-description-threshold-inline-metricsource.yaml": "metricSource.type: Redshift",
            "sli-no-description-threshold-inline-metricsource.yaml": "metricSource.type: Redshift",
            "sli-description-threshold-metricsourceref.yaml": "metricSourceRef: no DataSource named 'redshift",
            "sli-no-description-threshold-metricsourceref.yaml": "metricSourceRef: no DataSource named 'redshift",
            "sli-description-ratio-bad-metricsourceref.yaml": "imports",
            "sli-description-ratio-good-metricsourceref.yaml": "imports",
            "sli-no-description-ratio-bad-metricsourceref.yaml": "imports",
            "sli-no-description-ratio-good-metricsourceref.yaml": "imports",
        }.items()
    },
    **{
        ("schema-test/" + name, "SLO test-slo"): outcome
        for name, outcome in {
            "slo-indicatorref-calendar-alerts.yaml": "alertPolicies[0]: no AlertPolicy named 'foo-alert-policy'",
            "slo-indicatorref-calendar-no-alerts.yaml": "imports",  # calendar days from 12:30 in New York
            "slo-no-indicatorref-calendar-alerts.yaml": "good.metricSource.type: Datadog: obsbox builds",
            "slo-no-indicatorref-calendar-no-alerts.yaml": "good.metricSource.type: Datadog: obsbox builds",
            "slo-indicatorref-rolling-alerts.yaml": "alertPolicies[0]: no AlertPolicy named 'foo-alert-policy'",
            "slo-indicatorref-rolling-no-alerts.yaml": "imports",  # a 1d period
            "slo-no-indicatorref-rolling-alerts.yaml": "timeWindow[0].duration: 1M: a rolling period of months",
            "slo-no-indicatorref-rolling-no-alerts.yaml": "timeWindow[0].duration: 1M: a rolling period of months",
        }.items()
    },
    ("schema-test/alert-policy-inline-cond.yaml", "AlertPolicy alert-policy"): "condition.op: None: a burnrate "
    "condition needs op (lte, lt, gte or gt); it has no default",
}


def import_example(path: Path, label: str, tmp_path: Path) -> str:
    """'imports', or the one line obsbox refuses the example with."""
    kind, name = label.split(" ", 1)
    files = [path]
    if kind == "SLO" and (reference := re.search(r"indicatorRef: (\S+)", path.read_text())):
        files.append(prometheus_sli(tmp_path, reference[1]))
    if kind == "SLI":
        threshold = "thresholdMetric" in path.read_text().split(f"name: {name}", 1)[1].split("apiVersion")[0]
        files.append(
            probe(tmp_path, f"indicatorRef: {name}\n  " + SLI_OBJECTIVE["threshold" if threshold else "ratio"])
        )
    elif kind == "AlertPolicy":
        files += [OPENSLO / "go-sdk" / "alert_conditions.yaml", OPENSLO / "go-sdk" / "data_sources.yaml"]
        sli = OPENSLO / "schema-test" / "sli-description-ratio-good-metricsourceref.yaml"
        files += [
            sli,
            probe(tmp_path, f"indicatorRef: great-sli\n  {SLI_OBJECTIVE['ratio']}\n  alertPolicies: [{name}]"),
        ]
    try:
        openslo.load(files)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return str(exc)
    return "imports"


@pytest.mark.parametrize(("file", "label"), list(EXAMPLES), ids=[f"{f}:{n}" for f, n in EXAMPLES])
def test_the_openslo_projects_examples_import_or_are_refused_in_one_line(file: str, label: str, tmp_path: Path):
    outcome = import_example(OPENSLO / file, label, tmp_path)
    expected = EXAMPLES[(file, label)]
    assert expected in outcome
    if outcome != "imports" and not label.startswith("AlertPolicy"):
        assert f"{label}: spec." in outcome  # names the document and the key


def test_the_examples_schema_valid_ones_pass_the_schema(schema):
    """The copies are the schema test's valid files: the schema as loaded here agrees with the project's test."""
    for path in sorted((OPENSLO / "schema-test").glob("*.yaml")):
        for loaded in yaml.safe_load_all(path.read_text()):
            document = json.loads(json.dumps(loaded, default=str))  # dates as the Go test's YAMLToJSON writes them
            assert not [e.message for e in schema.iter_errors(document)], path.name


def test_a_prometheus_example_sli_becomes_an_availability_sli(tmp_path: Path):
    sli = OPENSLO / "schema-test" / "sli-description-ratio-bad-metricsourceref.yaml"
    (slo,) = openslo.load([sli, probe(tmp_path, f"indicatorRef: great-sli\n  {SLI_OBJECTIVE['ratio']}")]).slos
    assert (slo.sli.kind, slo.sli.bad, slo.sli.total, slo.sli.counters) == (
        "availability",
        'localhost_server_requests{code=~"2xx|3xx",host="*",instance="127.0.0.1:9090"}',
        'localhost_server_requests{code="total",host="*",instance="127.0.0.1:9090"}',
        ["localhost_server_requests"],
    )
    assert (slo.name, slo.service, slo.objective, slo.window) == ("probe", "probe", 0.99, "30d")


@pytest.mark.parametrize(
    ("duration", "outcome"),
    [
        ("2w", "14d"),  # the OpenSLO example occurences-slo.yaml's period
        ("4w", "28d"),
        ("1d", "1d"),
        ("1M", "spec.timeWindow[0].duration: 1M: a rolling period of months, quarters or years varies in length"),
        ("2h", "spec.timeWindow[0].duration: '2h' is not an SLO period obsbox supports: a rolling period from 1d"),
    ],
)
def test_rolling_periods_from_a_day_to_ninety_import(duration: str, outcome: str, tmp_path: Path):
    sli = OPENSLO / "schema-test" / "sli-description-ratio-bad-metricsourceref.yaml"
    window = f"timeWindow: [{{duration: {duration}, isRolling: true}}]"
    reference = f"indicatorRef: great-sli\n  {SLI_OBJECTIVE['ratio']}\n  {window}"
    try:
        (slo,) = openslo.load([sli, probe(tmp_path, reference)]).slos
    except ConfigError as exc:
        assert " " in outcome and outcome in str(exc)  # a refusal, not a period
    else:
        assert slo.window == outcome


def test_the_schemas_alert_policy_names_import_too(tmp_path: Path):
    """An SLO that names its alert policies as the v1 JSON schema has them (strings) reads as with alertPolicyRef."""
    exported = openslo.export(load(TESTDATA / "features.slo.yaml"))
    path = tmp_path / "names.yaml"
    path.write_text(openslo.dumps([schema_form(d) for d in exported]))
    assert openslo.load([path]).slos == load(TESTDATA / "features.slo.yaml")


def test_documents_in_many_files_and_lists(tmp_path: Path):
    """An SLI, a DataSource and alert policies in files of their own, as oslo writes lists of objects."""
    (slo, _, *rest) = openslo.export(load(TESTDATA / "features.slo.yaml"))  # the latency SLO, not the other
    sli = {"apiVersion": "openslo/v1", "kind": "SLI", **slo["spec"].pop("indicator")}
    sli["spec"]["thresholdMetric"]["metricSource"] = {
        "metricSourceRef": "prometheus",
        "spec": sli["spec"]["thresholdMetric"]["metricSource"]["spec"],
    }
    slo["spec"]["indicatorRef"] = sli["metadata"]["name"]
    (tmp_path / "slo.yaml").write_text(openslo.dumps([slo]))
    (tmp_path / "rest.yaml").write_text(yaml.safe_dump([sli, *rest]))
    sources = OPENSLO / "go-sdk" / "data_sources.yaml"
    (imported,) = openslo.load([tmp_path / "slo.yaml", tmp_path / "rest.yaml", sources]).slos
    assert imported == load(TESTDATA / "features.slo.yaml")[0]


def test_the_commands(tmp_path: Path, capsys):
    out = tmp_path / "openslo.yaml"
    assert main(["slo", "export-openslo", str(TESTDATA / "features.slo.yaml"), "--out", str(out)]) == 0
    assert main(["slo", "import-openslo", str(out), "--out", str(tmp_path / "spec.yaml")]) == 0
    assert load(tmp_path / "spec.yaml") == load(TESTDATA / "features.slo.yaml")
    capsys.readouterr()
    assert main(["slo", "import-openslo", str(OPENSLO / "openslo-examples" / "timeslices-slo.yaml")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "timeslices-slo.yaml:27: SLO service-availability: spec.timeWindow[0].duration: '1m' is not a" in line


def test_an_slo_without_a_runbook_gets_a_placeholder_and_a_note(tmp_path: Path):
    sli = OPENSLO / "schema-test" / "sli-description-ratio-good-metricsourceref.yaml"
    imported = openslo.load([sli, probe(tmp_path, f"indicatorRef: great-sli\n  {SLI_OBJECTIVE['ratio']}")])
    assert imported.slos[0].runbook.startswith("The OpenSLO SLO probe came without a runbook")
    assert imported.notes == [
        f"{tmp_path / 'probe.yaml'}: SLO probe has no runbook (annotation obsbox.dev/runbook); write one"
    ]


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("ratio-timeslices.yaml", ("14d", None, {"window": "1m", "target": None, "op": "gte"})),
        (
            "low-traffic-timeslices-slo.yaml",
            (
                "1w",
                {"start": "2022-01-01 12:00:00", "time_zone": "America/New_York"},
                {"window": "1m", "target": 0.95, "op": "gt"},
            ),
        ),
    ],
)
def test_the_examples_budgeting_imports_with_a_prometheus_source(file: str, expected: tuple[Any, ...], tmp_path: Path):
    """The project's budgeting examples, their placeholder ``type: Any`` sources made Prometheus counters:
    RatioTimeslices over a rolling 2w, and Timeslices over calendar weeks in New York."""
    (slo,) = openslo.load([prometheus_example(file, tmp_path)]).slos
    window, calendar, slices = expected
    assert slo.window == window
    assert (slo.calendar and dataclasses.asdict(slo.calendar)) == calendar
    assert dataclasses.asdict(slo.timeslices) == slices
    assert slo.burn_conditions()[0].long_window == ("1h" if window == "14d" else "14m").replace("1h", "28m")


def prometheus_example(file: str, tmp_path: Path, fixes: dict[str, str] | None = None) -> Path:
    """A project example with its placeholder ``type: Any`` sources made Prometheus counters (and ``fixes``)."""
    text = (OPENSLO / "openslo-examples" / file).read_text().replace("type: Any", "type: Prometheus")
    for old, new in (fixes or {}).items():
        text = text.replace(old, new)
    queries = iter(['probe_requests_total{code="200"}', "probe_requests_total"])
    path = tmp_path / file
    path.write_text(re.sub(r"query: Any", lambda _: f"query: '{next(queries)}'", text))
    return path


def test_each_objective_is_an_slo_of_its_own(tmp_path: Path):
    """timeslices-slo.yaml's two objectives (its window a month, as its comment says) are two SLOs on one
    SLI, each with its own rule group and alerts; the export writes one objective per SLO and reads back."""
    path = prometheus_example("timeslices-slo.yaml", tmp_path, {"duration: 1m": "duration: 1M"})
    slos = openslo.load([path]).slos
    assert [(s.name, s.objective, s.objective_of, s.timeslices and s.timeslices.op) for s in slos] == [
        ("service-availability-internal-objective", 0.995, "service-availability", "gt"),
        ("service-availability-sla", 0.99, "service-availability", "gte"),
    ]
    groups = [g["name"] for g in rules(slos)["groups"]]
    assert groups[:2] == ["obsbox-slo-service-availability-internal-objective", "obsbox-slo-service-availability-sla"]
    exported = openslo.export(slos)
    assert [len(d["spec"]["objectives"]) for d in exported if d["kind"] == "SLO"] == [1, 1]
    (tmp_path / "out.yaml").write_text(openslo.dumps(exported))
    assert openslo.load([tmp_path / "out.yaml"]).slos == slos
    apart = [dataclasses.replace(s, objective_of=None) for s in slos]  # two SLOs on one SLI otherwise alert twice
    with pytest.raises(ConfigError, match="counts the same series as SLO service-availability-internal"):
        rules(apart)


def test_calendar_windows_are_refused_in_one_line_when_obsbox_cannot_build_them(tmp_path: Path):
    sli = OPENSLO / "schema-test" / "sli-description-ratio-good-metricsourceref.yaml"
    for window, refusal in {
        "{duration: 1m, calendar: {startTime: 2022-01-01 12:00:00, timeZone: Etc/UTC}}": "'1m' is not a calendar "
        "period: a whole number of d, w, M, Q or Y (1M, 1Q, 2w) (m is minutes; M is months)",
        "{duration: 1M, calendar: {startTime: 2022-01-31 00:00:00, timeZone: Etc/UTC}}": "calendar.startTime: day 31",
        "{duration: 1M, calendar: {startTime: 2022-01-01 00:00:00, timeZone: Mars/Olympus}}": "calendar.timeZone: "
        "'Mars/Olympus' is not an IANA time zone",
        "{duration: 2Y, isRolling: false, calendar: {startTime: 2022-01-01 00:00:00, timeZone: Etc/UTC}}": "'2Y' is "
        "longer than a year",
        "{duration: 1M, isRolling: false}": "a calendar-aligned window (isRolling: false) needs calendar",
    }.items():
        reference = f"indicatorRef: great-sli\n  {SLI_OBJECTIVE['ratio']}\n  timeWindow: [{window}]"
        with pytest.raises(ConfigError) as refused:
            openslo.load([sli, probe(tmp_path, reference)])
        assert "SLO probe: spec.timeWindow[0]" in str(refused.value) and refusal in str(refused.value), window


def test_single_window_conditions_become_alerts_of_their_own(tmp_path: Path):
    """The Go SDK's policies (burn rate lte 2, gt 2 over 1h, alertAfter 5m) are SLOBurnRate alerts with
    for: 5m, labelled for a router, beside the four multi-window ones; the export writes them back."""
    files = [OPENSLO / "go-sdk" / name for name in ("alert_policies.yaml", "alert_conditions.yaml")]
    sli = OPENSLO / "schema-test" / "sli-description-ratio-good-metricsourceref.yaml"
    policies = "alertPolicies: [low-priority, high-priority, medium-priority]"
    (slo,) = openslo.load(
        [*files, sli, probe(tmp_path, f"indicatorRef: great-sli\n  objectives: [{{target: 0.99}}]\n  {policies}")]
    ).slos
    assert [(a.name, a.op, a.threshold, a.window, a.after) for a in slo.alerts] == [
        ("cpu-usage-breach", "lte", 2, "1h", "5m"),  # low and medium priority share it: one alert
        ("memory-usage-breach", "gt", 2, "1h", "5m"),
    ]
    built = [r for r in rules([slo])["groups"][0]["rules"] if r.get("alert") == "SLOBurnRate"]
    assert [(r["expr"], r["for"], r["labels"]["condition"], r["labels"]["severity"]) for r in built] == [
        ('(slo:sli_error:ratio_rate1h{service="probe",slo="probe"} / 0.01) <= 2', "5m", "cpu-usage-breach", "page"),
        ('(slo:sli_error:ratio_rate1h{service="probe",slo="probe"} / 0.01) > 2', "5m", "memory-usage-breach", "page"),
    ]
    (tmp_path / "out.yaml").write_text(openslo.dumps(openslo.export([slo])))
    assert openslo.load([tmp_path / "out.yaml"]).slos == [slo]
    gone = (OPENSLO / "go-sdk" / "alert_conditions.yaml").read_text().replace("      lookbackWindow: 1h\n", "")
    (tmp_path / "conditions.yaml").write_text(gone)
    with pytest.raises(ConfigError, match=r"condition\.lookbackWindow: a burnrate condition needs the window"):
        openslo.load(
            [
                files[0],
                tmp_path / "conditions.yaml",
                sli,
                probe(tmp_path, f"indicatorRef: great-sli\n  objectives: [{{target: 0.99}}]\n  {policies}"),
            ]
        )


def test_a_gauge_ratio_sli_reads_the_means(tmp_path: Path):
    """A ratioMetric with counter: false becomes gauges: each window's ratio of avg_over_time."""
    sli = (OPENSLO / "schema-test" / "sli-description-ratio-good-metricsourceref.yaml").read_text()
    (tmp_path / "sli.yaml").write_text(sli.replace("counter: true", "counter: false"))
    (slo,) = openslo.load(
        [tmp_path / "sli.yaml", probe(tmp_path, f"indicatorRef: great-sli\n  {SLI_OBJECTIVE['ratio']}")]
    ).slos
    assert slo.sli.gauges and slo.sli.counters == []
    assert slo.sli.total_rate_expr("1h").startswith("sum(avg_over_time(localhost_server_requests{")
    (document, *_) = openslo.export([slo])
    assert document["spec"]["indicator"]["spec"]["ratioMetric"]["counter"] is False


def test_a_raw_ratio_reads_each_window(tmp_path: Path):
    """The go-sdk's wifi-client-satisfaction SLI: a precomputed good share (rawType success) written with
    {{.window}}: each window's error ratio is 1 minus the query over that window, the rules parse in
    promtool, and the SLI exports back as the same raw query."""
    (slo,) = openslo.load(
        [
            OPENSLO / "go-sdk" / "slis.yaml",
            probe(tmp_path, f"indicatorRef: wifi-client-satisfaction\n  {SLI_OBJECTIVE['ratio']}"),
        ]
    ).slos
    assert (slo.sli.kind, slo.sli.raw_type, slo.sli.raw_template) == ("availability", "success", True)
    hour = slo.sli.error_ratio_expr("1h")
    assert hour.startswith("(1 - (1 - (\n  sum(sum_over_time(poller_client_satisfaction_ratio[1h]))")
    assert "{{.window}}" not in hour and hour.endswith("[1h]))\n)) * 0 + 1)")  # over 1 while it has a value
    document = rules([slo], [])
    path = tmp_path / "raw.rules.yml"
    path.write_text(render(document, "probe.yaml", [slo]))
    checked = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (exported, *_) = openslo.export([slo])
    ratio = exported["spec"]["indicator"]["spec"]["ratioMetric"]
    assert ratio["rawType"] == "success" and ratio["raw"]["metricSource"]["spec"]["query"] == slo.sli.raw


def test_a_raw_ratio_selector_averages_its_series_and_expressions_take_no_filters():
    """A raw ratio that is a series selector reads the mean of its series over each window; filters go
    into it. A raw expression cannot take filters, and a raw ratio stands alone."""
    spec = (
        "service: wifi\nslos:\n  - name: roaming\n    objective: 0.99\n    runbook: r\n    filters: ['site=\"hq\"']\n"
        "    sli: {kind: availability, raw: 'roam_fail_ratio{band=\"5GHz\"}'}\n"
    )
    (slo,) = loads(spec)
    assert (
        slo.sli.error_rate_expr("5m", slo.matchers) == 'avg(avg_over_time(roam_fail_ratio{band="5GHz",site="hq"}[5m]))'
    )
    assert slo.sli.total_rate_expr("5m", slo.matchers).endswith("[5m])) * 0 + 1)")  # one event a second
    template = spec.replace("'roam_fail_ratio{band=\"5GHz\"}'", "'avg(roam_fail_ratio[{{.window}}])'")
    with pytest.raises(ConfigError, match=r"slos\[0\]\.filters: a raw ratio expression takes no filters"):
        loads(template)
    mixed = spec.replace("raw:", "total: requests_total, raw:")
    with pytest.raises(ConfigError, match=r"slos\[0\]\.sli\.total: a raw ratio stands alone"):
        loads(mixed)
