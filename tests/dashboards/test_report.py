"""`obsbox report`: the charts from series, the HTML, the command's errors, and a real (empty) Prometheus."""

from __future__ import annotations

import io
import json
import re

import pytest
from matplotlib import image

from obsbox.cli import main
from obsbox.dashboards import queries as q
from obsbox.dashboards import report, slos
from obsbox.dashboards.promapi import Series
from obsbox.dashboards.report_cli import parse_time
from tests.dashboards.procs import free_port, http_ok, prometheus, stop, wait_for


def png_pixels(png: bytes):
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    return image.imread(io.BytesIO(png), format="png")


def ramp(start: float, values: list[float], labels: dict[str, str]) -> Series:
    return Series(labels, [start + 15 * i for i in range(len(values))], values)


def test_a_chart_is_drawn_from_its_series_and_counts_points_above_its_line():
    t0 = 1_700_000_000.0
    chart = report.Chart("p95", "P95", "s", [q.REPLY_P95], lines=[report.Line(0.3, "SLO")])
    chart.series = [("P95", ramp(t0, [0.1, 0.2, 0.35, 0.5, float("nan"), 0.25], {}))]
    assert chart.has_data and chart.crossings(chart.lines[0]) == 2
    assert chart.summary()[0]["max"] == 0.5 and chart.summary()[0]["points"] == 5
    drawn = png_pixels(report.draw(chart))
    empty = report.Chart("p95", "P95", "s", [q.REPLY_P95], lines=[report.Line(0.3, "SLO")])
    assert not empty.has_data
    blank = png_pixels(report.draw(empty))
    assert drawn.shape == blank.shape == (420, 1000, 4)
    assert (drawn != blank).any(), "the series changed nothing in the picture"


def test_a_stacked_chart_aligns_series_on_one_timeline():
    t0 = 1_700_000_000.0
    chart = report.Chart("stages", "Stages", "s", [q.STAGE_MEAN], stacked=True)
    chart.series = [("a", ramp(t0, [0.1, 0.1, 0.1], {"stage": "a"})), ("b", ramp(t0 + 15, [0.2, 0.2], {"stage": "b"}))]
    assert report._timeline(chart.series) == [t0, t0 + 15, t0 + 30]
    assert report._on([t0, t0 + 15, t0 + 30], chart.series[1][1]) == [0.0, 0.2, 0.2]
    assert png_pixels(report.draw(chart)).std() > 0.05


def test_the_html_embeds_each_png_and_the_data_behind_it():
    t0 = 1_700_000_000.0
    charts = report.plan(slos.load(), slos.reply_latency_threshold())
    charts[0].series = [("P95 reply latency", ramp(t0, [0.9, 1.1, 1.2], {}))]
    for chart in charts:
        chart.png = report.draw(chart)
    text = report.render_html(report.Report("http://prom:9090", t0, t0 + 30, 15, "untuned", charts))
    assert "<title>obsbox report: untuned</title>" in text
    sections = re.findall(r'<section id="([^"]+)">', text)
    assert sections == [c.key for c in charts]
    data = [json.loads(m) for m in re.findall(r'class="chart-data">(.*?)</script>', text)]
    assert data[0]["series"][0]["v"] == [0.9, 1.1, 1.2] and data[0]["lines"][0]["value"] == 0.3
    assert "SLO threshold 300 ms: 3 points at or above it." in text
    assert text.count("<strong>No data</strong>") == len(charts) - 1


def test_time_arguments():
    assert parse_time("1700000000") == 1_700_000_000.0
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000.0
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_time("yesterday")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--end", "1700000000"], "--end needs --start"),
        (["--start", "1700000100", "--end", "1700000000"], "the range is empty"),
        (["--last", "1x"], "is not a Prometheus duration"),
    ],
)
def test_report_argument_errors(tmp_path, capsys, args, expected):
    code = main(["report", "--prometheus", "http://127.0.0.1:9", "--out", str(tmp_path / "r.html"), *args])
    assert code == 2 and expected in capsys.readouterr().err


def test_report_names_an_unreachable_prometheus(tmp_path, capsys):
    port = free_port()
    code = main(["report", "--prometheus", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "r.html")])
    assert code == 2
    assert f"cannot reach Prometheus at http://127.0.0.1:{port}" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_report_against_a_real_prometheus_without_data(tmp_path, capsys):
    """A Prometheus that scrapes nothing: the report is written, and says which charts have no data."""
    port = free_port()
    (tmp_path / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    log = tmp_path / "prometheus.log"
    procs = {log: prometheus(tmp_path / "prometheus.yml", tmp_path / "tsdb", port, log, "--log.level=error")}
    try:
        wait_for("Prometheus to be ready", lambda: http_ok(f"http://127.0.0.1:{port}/-/ready"), procs, 30)
        out = tmp_path / "r.html"
        code = main(["report", "--prometheus", f"http://127.0.0.1:{port}", "--out", str(out), "--last", "5m"])
    finally:
        stop(procs)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    charts = 2 + len(slos.load())
    assert captured.err.count("no data for") == charts
    text = out.read_text()
    assert text.count("<strong>No data</strong>") == charts
    assert len(re.findall(r"data:image/png;base64,", text)) == charts
