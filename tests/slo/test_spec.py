"""The SLO spec, the generated file, and ``obsbox slo``: validation, determinism, the committed rules."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
import yaml

from obsbox import conventions, slo
from obsbox.cli import main
from obsbox.config import ConfigError
from obsbox.durations import parse_duration as seconds
from obsbox.slo.cli import generate
from obsbox.slo.cli import log_rules as log_rules_from
from obsbox.slo.spec import burn_conditions
from tests.slo.scenarios import promtool

FEATURES = Path(__file__).parent / "testdata" / "features.slo.yaml"

GOOD = """\
service: gateway
slos:
  - name: ReplyLatency
    objective: 0.95
    sli:
      kind: latency
      metric: gateway_reply_latency_seconds
      threshold: 300ms
    runbook: Look at the stage breakdown.
"""


def test_the_seed_spec_has_the_issues_slos():
    latency, availability = slo.load(slo.DEFAULT_SPEC)
    assert (latency.name, latency.service, latency.objective, latency.window) == (
        "ReplyLatency",
        "gateway",
        0.95,
        "30d",
    )
    assert latency.sli.kind == "latency" and latency.sli.threshold == 0.3
    assert 0.3 in conventions.REPLY_BUCKETS
    ratio = latency.error_ratio_expr("5m")
    assert f'{conventions.REPLY_LATENCY}_bucket{{le="0.3"}}[5m]' in ratio
    assert f"{conventions.REPLY_LATENCY}_count[5m]" in ratio
    assert latency.sli.error_ratio_expr("1h") == latency.error_ratio_expr("1h")  # no filters in the seed
    assert availability.sli.kind == "availability"
    assert f'{conventions.REQUEST_DURATION}_count{{status_code=~"5.."}}[30m]' in availability.error_ratio_expr("30m")
    assert all(s.runbook and s.description for s in (latency, availability))
    assert slo.slo_windows(latency) == list(conventions.SLO_WINDOWS)
    assert latency.recorded(conventions.SLO_BUDGET_REMAINING) == (
        'slo:period_error_budget_remaining:ratio{service="gateway",slo="ReplyLatency"}'
    )


def test_filters_apply_to_every_series_and_periods_scale_the_factors():
    latency, availability = slo.load(FEATURES)
    ratio = latency.error_ratio_expr("1h")
    assert ratio.count('route="/pay",method!="OPTIONS"') == 3
    assert 'le=~"1|1.0"' in ratio  # a whole-number bound, as Go clients and the Python client write it
    assert [c.factor for c in latency.burn_conditions()] == [13.44, 5.6, 2.8, pytest.approx(28 / 30)]
    assert slo.slo_windows(latency)[-1] == "28d"
    assert availability.service == "checkout" and availability.window == "30d"
    assert 'checkout_requests_total{outcome="ok",route="/pay"}[5m]' in availability.error_ratio_expr("5m")


def test_other_periods_scale_the_windows_and_keep_the_budget_shares():
    """The long windows scale with the period (whole minutes), the short ones are a twelfth, none under 5m;
    each factor is the budget share the workbook spends in the long window (2%, 5%, 10%, 10%) over the
    long window's share of the period."""
    table = {
        "7d": [(14.4, "14m", "5m"), (6.0, "1h24m", "7m"), (3.0, "5h36m", "28m"), (1.0, "16h48m", "1h24m")],
        "2w": [(14.4, "28m", "5m"), (6.0, "2h48m", "14m"), (3.0, "11h12m", "56m"), (1.0, "1d9h36m", "2h48m")],
        "1d": [(5.76, "5m", "5m"), (6.0, "12m", "5m"), (3.0, "48m", "5m"), (1.0, "2h24m", "12m")],
        "90d": [(14.4, "3h", "15m"), (6.0, "18h", "1h30m"), (3.0, "3d", "6h"), (1.0, "9d", "18h")],
    }
    for period, conditions in table.items():
        assert [(c.factor, c.long_window, c.short_window) for c in burn_conditions(period)] == conditions, period
        for c, share in zip(burn_conditions(period), (0.02, 0.05, 0.1, 0.1), strict=True):
            assert c.factor * seconds(c.long_window) / seconds(period) == pytest.approx(share)
    (quarter,) = slo.loads(GOOD.replace("objective: 0.95", "objective: 0.95\n    window: 90d"))
    assert slo.slo_windows(quarter)[:3] == ["5m", "15m", "1h"]  # 5m and 1h: the current burn rate, the dashboard


def test_the_committed_rules_file_is_up_to_date():
    assert slo.DEFAULT_RULES.read_text(encoding="utf-8") == generate(slo.DEFAULT_SPEC), (
        "compose/prometheus/rules/slo.rules.yml is out of date: "
        "run obsbox slo build compose/slo.yaml --out compose/prometheus/rules/slo.rules.yml"
    )


def test_every_generated_file_passes_promtool_check_rules(tmp_path):
    log_rules = tmp_path / "my_log_rules.yaml"
    log_rules.write_text(
        textwrap.dedent("""\
            rules:
              - name: disk-full
                regex: 'No space left on device'
                metric: app_disk_full_total
                action: Free disk space on the node; raise the volume size.
                alert: {threshold: 0.01, window: 10m, for: 2m, severity: page}
            """),
        encoding="utf-8",
    )
    files = {
        "committed.yml": slo.DEFAULT_RULES.read_text(encoding="utf-8"),
        "features.yml": generate(FEATURES),
        "weekly.yml": generate(FEATURES.parent / "weekly.slo.yaml"),  # 7d: scaled windows
        "extra-log-rules.yml": generate(slo.DEFAULT_SPEC, log_rules_from([log_rules])),
    }
    assert "alert: LogDiskFull" in files["extra-log-rules.yml"]
    assert "rate(app_disk_full_total[10m]) > 0.01" in files["extra-log-rules.yml"]
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    result = promtool("check", "rules", *files, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(files)


def test_rules_have_the_conventions_names_and_labels():
    document = slo.rules(slo.load(slo.DEFAULT_SPEC))
    group = document["groups"][0]
    assert group["name"] == "obsbox-slo-ReplyLatency"
    records = [r["record"] for r in group["rules"] if "record" in r]
    ratios = [conventions.SLI_ERROR_RATIO.format(window=w) for w in conventions.SLO_WINDOWS]
    assert set(ratios) <= set(records)
    for name in (
        conventions.SLO_OBJECTIVE,
        conventions.SLO_ERROR_BUDGET,
        conventions.SLO_CURRENT_BURN_RATE,
        conventions.SLO_PERIOD_BURN_RATE,
        conventions.SLO_BUDGET_REMAINING,
    ):
        assert name in records
    identity = {"slo": "ReplyLatency", "service": "gateway"}
    stages = [r["labels"].pop("stage") for r in group["rules"] if r.get("record", "").startswith("obsbox:slo_stage_")]
    assert set(stages) == {s for s in conventions.STAGES if s != "decode"}  # the stage budgets' series
    assert all(r["labels"] == identity for r in group["rules"] if "record" in r)
    # From 1d up, windows read the two recorded 5m series, not days of every raw series.
    for rule in group["rules"]:
        if rule.get("record") in ratios[ratios.index("slo:sli_error:ratio_rate1d") :]:
            assert "gateway_reply" not in rule["expr"] and slo.ERROR_EVENTS_RATE in rule["expr"]
    alerts = [r for r in group["rules"] if r.get("alert") == conventions.SLO_ALERT]
    (no_data,) = [r for r in group["rules"] if r.get("alert") == conventions.SLO_NO_DATA_ALERT]
    assert no_data["alert"] == conventions.SLO_NO_DATA_ALERT and no_data["for"] == "10m"
    assert no_data["expr"] == 'absent(slo:sli_events:rate5m{service="gateway",slo="ReplyLatency"})'
    assert no_data["labels"] == {"severity": "ticket", "slo": "ReplyLatency", "service": "gateway"}
    expected = [(s, f, lw, sw) for s, conditions in conventions.BURN_THRESHOLDS.items() for f, lw, sw in conditions]
    assert [
        (
            a["labels"]["severity"],
            float(a["expr"].rsplit(">= ", 1)[1]),
            a["labels"]["long_window"],
            a["labels"]["short_window"],
        )
        for a in alerts
    ] == expected
    for a in alerts:
        assert {"summary", "description", "runbook", "dashboard"} <= set(a["annotations"])
        assert a["annotations"]["runbook"] in a["annotations"]["description"]


def test_output_is_deterministic_and_written_atomically(tmp_path, capsys):
    out = tmp_path / "rules" / "slo.rules.yml"
    assert main(["slo", "build", str(slo.DEFAULT_SPEC), "--out", str(out)]) == 0
    first = out.read_bytes()
    out.chmod(0o640)
    assert main(["slo", "build", str(slo.DEFAULT_SPEC), "--out", str(out)]) == 0
    assert out.read_bytes() == first
    assert out.stat().st_mode & 0o777 == 0o640
    assert os.listdir(out.parent) == ["slo.rules.yml"]
    assert yaml.safe_load(first)["groups"]
    assert str(tmp_path) not in first.decode() and str(Path.cwd()) not in first.decode()
    capsys.readouterr()
    assert main(["slo", "build", str(slo.DEFAULT_SPEC)]) == 0
    assert capsys.readouterr().out.encode() == first


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "slo.rules.yml"
    out.write_text("old\n", encoding="utf-8")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        slo.write(out, "new\n")
    assert out.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["slo.rules.yml"]


def test_check_reports_a_stale_rules_file(tmp_path, capsys):
    rules = tmp_path / "slo.rules.yml"
    assert main(["slo", "build", str(slo.DEFAULT_SPEC), "--out", str(rules)]) == 0
    assert main(["slo", "check", str(slo.DEFAULT_SPEC), "--rules", str(rules)]) == 0
    assert "ReplyLatency (gateway): latency, objective 0.95 over 30d" in capsys.readouterr().out
    rules.write_text(rules.read_text(encoding="utf-8").replace("14.4", "14"), encoding="utf-8")
    assert main(["slo", "check", str(slo.DEFAULT_SPEC), "--rules", str(rules)]) == 1
    assert "is out of date" in capsys.readouterr().err


BAD = [
    # (what, replace this in GOOD, with this, key, line, words in the message)
    ("not a bucket", "threshold: 300ms", "threshold: 250ms", "slos[0].sli.threshold", 8, "not a bucket boundary"),
    (
        "past the buckets",
        "threshold: 300ms",
        "threshold: 9s\n      off_bucket: interpolate",
        "slos[0].sli.threshold",
        8,
        "above the last finite bucket boundary",
    ),
    (
        "not positive",
        "threshold: 300ms",
        "threshold: 0s\n      histogram: native",
        "slos[0].sli.threshold",
        8,
        "positive",
    ),
    ("percent", "objective: 0.95", "objective: 95", "slos[0].objective", 4, "write 0.95 for 95%"),
    ("unreachable", "objective: 0.95", "objective: 0.9", "slos[0].objective", 4, "could never fire"),
    ("window", "objective: 0.95", "objective: 0.95\n    window: 2h", "slos[0].window", 5, "from 1d to 90d"),
    ("typo", "objective: 0.95", "objective: 0.95\n    objetive: 0.9", "slos[0].objetive", 5, "unknown key"),
    ("suffix", "latency_seconds\n", "latency_seconds_bucket\n", "slos[0].sli.metric", 7, "base name"),
    (
        "unknown histogram",
        "gateway_reply_latency_seconds",
        "my_latency_seconds",
        "slos[0].sli.metric",
        7,
        "sli.buckets",
    ),
    ("runbook", "    runbook: Look at the stage breakdown.\n", "", "slos[0]", 3, "missing required key 'runbook'"),
    ("service", "service: gateway\n", "", "slos[0]", 2, "missing required key 'service'"),
    (
        "filter",
        "objective: 0.95",
        "objective: 0.95\n    filters: ['route=/v1']",
        "slos[0].filters[0]",
        5,
        "label matcher",
    ),
    (
        "label",
        "objective: 0.95",
        "objective: 0.95\n    labels: {severity: low}",
        "slos[0].labels.severity",
        5,
        "reserved",
    ),
]
AVAILABILITY = """\
slos:
  - name: Availability
    service: gateway
    objective: 0.99
    sli:
      kind: availability
      bad: gateway_request_duration_seconds_count{status_code=~"5.."}
      total: gateway_request_duration_seconds_count
    runbook: Roll back.
"""
BAD_AVAILABILITY = [
    ("selector", '{status_code=~"5.."}', '{status_code=~"5.."', "slos[0].sli.bad", 7, "not a series selector"),
    ("unknown key", "    runbook:", "    runbook: x\n    foo:", "slos[0].foo", 10, "unknown key"),
    (
        "good and bad",
        "      total:",
        "      good: x_total\n      total:",
        "slos[0].sli",
        5,
        "exactly one of 'good' or 'bad'",
    ),
    (
        "gauge",
        "total: gateway_request_duration_seconds_count",
        "total: gateway_gpu_memory_utilization_ratio",
        "slos[0].sli.total",
        8,
        "not a counter",
    ),
    (
        "mixed",
        "kind: availability",
        "kind: availability\n      threshold: 1",
        "slos[0].sli.threshold",
        7,
        "latency SLI",
    ),
    (
        "native availability",
        "kind: availability",
        "kind: availability\n      histogram: native",
        "slos[0].sli.histogram",
        7,
        "latency SLI",
    ),
]


@pytest.mark.parametrize(
    ("base", "case"),
    [(GOOD, c) for c in BAD] + [(AVAILABILITY, c) for c in BAD_AVAILABILITY],
    ids=[c[0] for c in BAD + BAD_AVAILABILITY],
)
def test_a_bad_spec_names_the_file_the_line_and_the_key(tmp_path, base, case):
    _, old, new, key, line, words = case
    assert old in base
    spec = tmp_path / "slo.yaml"
    spec.write_text(base.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        slo.load(spec)
    assert str(caught.value).startswith(f"{spec}:{line}: {key}: "), str(caught.value)
    assert words in str(caught.value)


def test_duplicate_names_point_at_the_second(tmp_path):
    spec = tmp_path / "slo.yaml"
    spec.write_text(GOOD + GOOD.split("slos:\n", 1)[1], encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{spec}:10: slos\[1\]\.name: 'ReplyLatency' is already"):
        slo.load(spec)


def test_the_cli_reports_a_bad_spec_with_its_location(tmp_path, capsys):
    spec = tmp_path / "slo.yaml"
    spec.write_text(GOOD.replace("300ms", "250ms"), encoding="utf-8")
    assert main(["slo", "build", str(spec), "--out", str(tmp_path / "out.yml")]) == 2
    assert f"config error: {spec}:8: slos[0].sli.threshold: 0.25 is not a bucket boundary" in capsys.readouterr().err
    assert not (tmp_path / "out.yml").exists()


def test_slos_built_in_python_are_checked_too():
    (latency,) = slo.loads(GOOD)
    latency.objective = 1.5
    with pytest.raises(ConfigError, match=r"SLO ReplyLatency: objective: 1.5 is not a ratio"):
        slo.rules([latency], [])


def test_a_log_rule_alert_without_an_action_is_an_error(tmp_path):
    from obsbox.logrules import load_rules  # noqa: PLC0415

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n  - name: x\n    regex: x\n    metric: x_total\n    alert: {threshold: 1}\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"rules\.x: a rule with an alert needs an action"):
        slo.rules(slo.loads(GOOD), load_rules(rules))
