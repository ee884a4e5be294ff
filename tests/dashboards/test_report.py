"""`obsbox report`: the charts from series, the HTML, the command's errors, and a real (empty) Prometheus."""

from __future__ import annotations

import contextlib
import html
import io
import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from matplotlib import image

from obsbox.cli import main
from obsbox.dashboards import queries as q
from obsbox.dashboards import report, slos
from obsbox.dashboards.promapi import Prometheus, Series
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
    assert report._stacks(chart) == ([t0, t0 + 15, t0 + 30], [[0.1, 0.1, 0.1], [0.0, 0.2, 0.2]])
    assert png_pixels(report.draw(chart)).std() > 0.05


def test_no_line_is_drawn_across_a_time_without_data():
    """Prometheus returns no point where a series had no data: the line breaks there, in a stack too."""
    t0 = 1_700_000_000.0
    times = [t0, t0 + 15, t0 + 30, t0 + 300, t0 + 315]
    series = report.Series({}, times, [0.4, 0.5, 0.6, 0.2, 0.3])
    gapped_t, gapped_v = report._gapped(series.times, series.values, 15)
    assert gapped_t == [*times[:3], t0 + 165, *times[3:]]
    assert math.isnan(gapped_v[3]) and [v for v in gapped_v if not math.isnan(v)] == series.values
    assert report._gapped(series.times, series.values, 0) == (gapped_t, gapped_v), "the step found from the points"
    chart = report.Chart("stages", "Stages", "s", [q.STAGE_MEAN], series=[("a", series)], stacked=True, step=15)
    stack_t, (stack,) = report._stacks(chart)
    assert stack_t == gapped_t and math.isnan(stack[3])
    line = report.Chart("p95", "P95", "s", [q.REPLY_P95], series=[("P95", series)], step=15)
    (drawn,) = report.figure(line).axes[0].get_lines()
    assert math.isnan(drawn.get_ydata()[3])


def test_the_legend_stays_off_the_data():
    t0 = 1_700_000_000.0
    charts = report.plan(slos.load(), slos.reply_latency_threshold())
    burn = next(chart for chart in charts if chart.key.startswith("burn_rate:"))
    burn.series = [(f"ReplyLatency {w}", ramp(t0, [20.0, 18.0, 16.0], {})) for w in ("5m", "30m", "1h", "2h", "6h")]
    fig = report.figure(burn)
    fig.canvas.draw()
    axes = fig.axes[0].get_window_extent()
    (legend,) = fig.legends
    assert not legend.get_window_extent().overlaps(axes), "the legend covers the plotted data"
    assert len(legend.get_texts()) == len(burn.series) + len(burn.lines)


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
    assert "<th>series</th><th>min</th>" in text and "<td>900 ms</td><td>1,067 ms</td><td>1,200 ms</td>" in text


@contextlib.contextmanager
def empty_prometheus(folder: Path) -> Iterator[str]:
    """A real Prometheus that scrapes nothing; its URL."""
    port = free_port()
    (folder / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    log = folder / "prometheus.log"
    procs = {log: prometheus(folder / "prometheus.yml", folder / "tsdb", port, log, "--log.level=error")}
    try:
        wait_for("Prometheus to be ready", lambda: http_ok(f"http://127.0.0.1:{port}/-/ready"), procs, 30)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(procs)


def test_the_html_shows_each_query_as_it_ran_with_its_variables_filled_in(tmp_path):
    """The report's queries run against a real Prometheus; the page shows what ran, not $__rate_interval."""
    now = time.time()
    charts = report.plan(slos.load(), slos.reply_latency_threshold())
    with empty_prometheus(tmp_path) as url:
        report.collect(Prometheus(url), charts, now - 600, now, selection={"route": "/v1/.*", "source": "vllm|sglang"})
    for chart in charts:
        chart.png = report.draw(chart)
    text = report.render_html(report.Report(url, now - 600, now, 3, None, charts))
    shown = [html.unescape(m) for m in re.findall(r"<pre><code>(.*?)</code></pre>", text, re.S)]
    assert shown == [expr for chart in charts for expr in chart.exprs]
    assert not [expr for expr in shown if "$" in expr], "a template variable left in a shown query"
    assert 'route=~"/v1/.*"' in shown[0] and "[60s]" in shown[0]
    llm = report.Report(url, now - 600, now, 3, None, charts).chart("llm_breakdown")
    assert [query.legend for query in llm.queries] == [
        "TTFT ({{source}})",
        "queue ({{source}})",
        "prefill ({{source}})",
        "decode ({{source}})",
    ]
    assert all('source=~"vllm|sglang", model=~".*"' in expr for expr in llm.exprs), llm.exprs
    data = [json.loads(m) for m in re.findall(r'class="chart-data">(.*?)</script>', text)]
    assert [d["queries"] for d in data] == [chart.exprs for chart in charts]


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
    out = tmp_path / "r.html"
    with empty_prometheus(tmp_path) as url:
        code = main(["report", "--prometheus", url, "--out", str(out), "--last", "5m"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    charts = 3 + len(slos.load())  # P95, the stage breakdown, the inference server's, each SLO's burn
    assert captured.err.count("no data for") == charts
    text = out.read_text()
    assert text.count("<strong>No data</strong>") == charts
    assert len(re.findall(r"data:image/png;base64,", text)) == charts
