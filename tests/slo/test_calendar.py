"""Calendar periods and time slices under ``promtool test rules``: the budget left resets at the
calendar boundary while the rolling windows keep the errors; the period index follows the time zone's
UTC offsets (New York's DST) at the real dates; a broken slice rule fails its generated tests."""

from __future__ import annotations

import calendar as gregorian
import datetime as dt
from pathlib import Path

import yaml

from obsbox import slo
from obsbox.cli import main
from obsbox.slo.periods import Calendar
from obsbox.slo.rules import SLICE_ERROR, dump
from tests.slo.scenarios import promtool, run_rule_tests

TESTDATA = Path(__file__).parent / "testdata"
SPEC = """
slos:
  - name: daily
    service: shop
    objective: 0.99
    window: 1d
    calendar: {start: "2024-01-01 01:00:00", time_zone: UTC}  # days from 01:00 UTC: 1970-01-01 01:00 is a boundary
    sli: {kind: availability, bad: 'orders_total{code="500"}', total: orders_total}
    runbook: Look at the order service.
"""


def utc(text: str) -> int:
    return gregorian.timegm(dt.datetime.fromisoformat(text).timetuple())


def test_the_budget_left_resets_at_the_calendar_boundary_and_the_rolling_windows_do_not(tmp_path: Path):
    """5% errors for the first hour (5x a 1% budget), then none: before 01:00 the day's budget is
    overspent; once the 5m rates after 01:00 are in, it is whole again, while the rolling 1d window
    still holds the first hour's errors."""
    (daily,) = slo.loads(SPEC)
    remaining = 'slo:period_error_budget_remaining:ratio{slo="daily"}'
    labels = '{service="shop", slo="daily"}'
    test = {
        "name": "calendar day",
        "interval": "1m",
        "input_series": [
            {"series": 'orders_total{code="500"}', "values": "0+300x60 18000+0x60"},
            {"series": 'orders_total{code="200"}', "values": "0+5700x60 342000+6000x60"},
        ],
        "promql_expr_test": [
            {"expr": f"{remaining} < bool -3", "eval_time": "55m", "exp_samples": [{"labels": labels, "value": 1}]},
            {"expr": f"{remaining} == bool 1", "eval_time": "55m", "exp_samples": [{"labels": labels, "value": 0}]},
            {"expr": f"{remaining} == bool 1", "eval_time": "90m", "exp_samples": [{"labels": labels, "value": 1}]},
            {
                "expr": 'slo:sli_error:ratio_rate1h{slo="daily"} > bool 0.02',
                "eval_time": "90m",
                "exp_samples": [{"labels": labels, "value": 1}],
            },
        ],
    }
    run_rule_tests(tmp_path, dump(slo.rules([daily])), [test])


def test_the_period_index_follows_new_yorks_offsets_at_the_real_dates(tmp_path: Path):
    """Weeks from Saturday noon in New York: the index steps at 17:00 UTC in winter and at 16:00 UTC in
    summer; months from the 15th at 00:00 step at 05:00 UTC (EST) or 04:00 UTC (EDT)."""
    weekly = Calendar(start="2022-01-01 12:00:00", time_zone="America/New_York")
    monthly = Calendar(start="2022-01-15 00:00:00", time_zone="America/New_York")
    offset = weekly.offset_expr()
    assert offset is not None and weekly.transitions()[:2] == [(1647154800, -14400), (1667714400, -18000)]
    checks = [  # (calendar, window, the UTC instant a period starts, the periods before it since start)
        (weekly, "1w", "2024-01-06 17:00:00", 105),  # Saturday noon EST
        (weekly, "1w", "2024-06-15 16:00:00", 128),  # Saturday noon EDT
        (monthly, "1M", "2024-03-15 04:00:00", 26),  # the 15th, EDT since 2024-03-10
        (monthly, "1Q", "2024-01-15 05:00:00", 8),
    ]
    tests = []
    for calendar, window, boundary, before in checks:
        expr = calendar.index_expr(window, offset)
        for at, index in ((utc(boundary) - 1, before - 1), (utc(boundary), before)):
            tests.append({"expr": expr, "eval_time": f"{at}s", "exp_samples": [{"labels": "{}", "value": index}]})
    document = {
        "rule_files": [],
        "evaluation_interval": "1000000h",
        "tests": [{"interval": "1m", "promql_expr_test": tests}],
    }
    (tmp_path / "index.test.yml").write_text(yaml.safe_dump(document, width=1_000_000), encoding="utf-8")
    result = promtool("test", "rules", "index.test.yml", cwd=tmp_path)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_a_zone_without_daylight_saving_is_a_constant_offset():
    kolkata = Calendar(time_zone="Asia/Kolkata")
    assert kolkata.transitions() == [] and kolkata.offset_expr() is None
    assert kolkata.index_expr("1d", None) == "floor((vector(time() + 19800) - 1704067200) / 86400)"


def test_a_broken_slice_rule_fails_its_generated_tests(tmp_path: Path, capsys):
    """The calendar spec's time-slice SLO with its slices never bad: the fast burn no longer pages."""
    spec = tmp_path / "web-uptime.slo.yaml"
    text = (TESTDATA / "calendar.slo.yaml").read_text()
    spec.write_text("slos:\n" + text[text.index("  - name: web-uptime") : text.index("  - name: search-")])
    document = slo.rules(slo.load(spec))
    (group,) = [g for g in document["groups"] if g["name"] == "obsbox-slo-web-uptime"]
    (rule,) = [r for r in group["rules"] if r.get("record") == SLICE_ERROR]
    rule["expr"] = f"0 * ({rule['expr']})"
    broken = tmp_path / "broken.rules.yml"
    broken.write_text(dump(document), encoding="utf-8")
    assert main(["slo", "test", str(spec), "--rules", str(broken)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL web-uptime (web): fast burn at"), out
