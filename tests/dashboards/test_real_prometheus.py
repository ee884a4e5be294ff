"""The dashboards' PromQL and the report against a real Prometheus that scrapes the demo gateway.

One run (about a minute): `obsbox demo --scenario untuned` serves the gateway's /metrics and its
simulated inference backend's (vLLM's names), and writes legacy logs; `obsbox bridge` tails them (its
own /metrics and the log_metrics rules), and Debian's Prometheus scrapes all three every second with
the rules `obsbox slo build` generates from compose/slo.yaml and those `obsbox llm rules` generates
from the LLM sources. Then every PromQL expression of every panel and variable, with its template
variables filled in, must parse and run; the core panels (P95, the stage breakdown, every burn rate)
and the backend's obsbox:llm_*{source="vllm"} series must return data; and `obsbox report` must draw
the P95 above the SLO line for the untuned scenario, and the backend's TTFT, queue, prefill and decode.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from obsbox import conventions as c
from obsbox.dashboards import queries as q
from obsbox.dashboards import slos
from obsbox.dashboards.promapi import Prometheus, PrometheusError
from obsbox.slo import DEFAULT_SPEC
from tests.dashboards.catalog import of
from tests.dashboards.procs import free_port, http_ok, obsbox, prometheus, stop, wait_for

SCRAPE_SECONDS = 1
RUN_SECONDS = 30  # of scraping, after both targets are up
DEADLINE_SECONDS = 90  # for anything to come up


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real-prometheus")
    logs, log_dir = tmp / "logs", tmp / "legacy-logs"
    logs.mkdir()
    log_dir.mkdir()
    gateway, backend, bridge, prom = free_port(), free_port(), free_port(), free_port()

    rules, llm_rules = tmp / "slo.rules.yml", tmp / "llm.rules.yml"
    for command in (("slo", "build", str(DEFAULT_SPEC)), ("llm", "rules")):
        out = rules if command[0] == "slo" else llm_rules
        subprocess.run([sys.executable, "-m", "obsbox", *command, "--out", str(out)], check=True, capture_output=True)
    (tmp / "bridge.yaml").write_text(
        yaml.safe_dump(
            {
                "sources": {"tail": {"include": [str(log_dir / "*")], "start_at": "beginning"}},
                "processors": {"parse": {}, "trace": {}, "log_metrics": {}},
                "sinks": {"file": {"path": str(tmp / "enriched.jsonl")}},
                "pipelines": {
                    "logs": {"sources": ["tail"], "processors": ["parse", "trace", "log_metrics"], "sinks": ["file"]}
                },
                "settings": {
                    "state_dir": str(tmp / "state"),
                    "metrics_port": bridge,
                    "metrics_host": "127.0.0.1",
                    "progress": False,
                },
            }
        )
    )
    (tmp / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
                "rule_files": [str(rules), str(llm_rules)],
                "scrape_configs": [
                    {"job_name": "gateway", "static_configs": [{"targets": [f"127.0.0.1:{gateway}"]}]},
                    {"job_name": "vllm", "static_configs": [{"targets": [f"127.0.0.1:{backend}"]}]},
                    {"job_name": "obsbox-bridge", "static_configs": [{"targets": [f"127.0.0.1:{bridge}"]}]},
                ],
            }
        )
    )
    procs: dict[Path, subprocess.Popen] = {}
    try:
        demo_log = logs / "demo.log"
        procs[demo_log] = obsbox(
            *("demo", "--scenario", "untuned", "--sessions", "12", "--duration", str(RUN_SECONDS + DEADLINE_SECONDS)),
            *("--port", str(gateway), "--backend-metrics-port", str(backend), "--log-dir", str(log_dir)),
            log=demo_log,
        )
        gateway_metrics = f"http://127.0.0.1:{gateway}/metrics"
        wait_for("the demo gateway's /metrics", lambda: http_ok(gateway_metrics), procs, DEADLINE_SECONDS)
        procs[logs / "bridge.log"] = obsbox("bridge", "--config", str(tmp / "bridge.yaml"), log=logs / "bridge.log")
        procs[logs / "prometheus.log"] = prometheus(
            tmp / "prometheus.yml",
            tmp / "tsdb",
            prom,
            logs / "prometheus.log",
            "--enable-feature=exemplar-storage",
            "--log.level=warn",
        )
        url = f"http://127.0.0.1:{prom}"
        api = Prometheus(url)
        wait_for("Prometheus to be ready", lambda: http_ok(f"{url}/-/ready"), procs, DEADLINE_SECONDS)
        wait_for("the three targets to be scraped", lambda: len(api.query("up == 1")) == 3, procs, DEADLINE_SECONDS)
        time.sleep(RUN_SECONDS)
        yield {"url": url, "api": api, "tmp": tmp, "start": time.time() - RUN_SECONDS}
    finally:
        stop(procs)


def core_expressions() -> dict[str, str]:
    """The panels that must show data: P95s, the stage breakdown, every burn rate of every SLO, and the
    stage budgets' spend and overspend."""
    core = {
        "request P95": q.REQUEST_QUANTILE[0.95].expr,
        "reply P95": q.REPLY_P95.expr,
        "stage breakdown": q.STAGE_MEAN.expr,
    }
    for slo in slos.load():
        for window in slos.burn_windows(slo):
            core[f"{slo.name} burn rate {window}"] = q.burn_rate(slos.panel_selector(slo), window).expr
        if slo.budgets is not None:  # the untuned demo overspends: both stage panels have data
            core[f"{slo.name} stage spend"] = q.stage_spend(slos.panel_selector(slo)).expr
            core[f"{slo.name} stages over budget"] = q.stage_overspend(slos.panel_selector(slo)).expr
    return core


# What the demo's backend gives the LLM breakdown; the rest (gateway overhead, GPU) is not vLLM's to give.
VLLM_RECORDS = [
    *(f"obsbox:llm_{signal}_seconds:mean5m" for signal in ("ttft", "queue", "prefill", "decode", "inter_token", "e2e")),
    "obsbox:llm_cache_hit:ratio",
    "obsbox:llm_prompt_tokens:rate5m",
    "obsbox:llm_generation_tokens:rate5m",
    "obsbox:llm_requests_running:sum",
    "obsbox:llm_requests_waiting:sum",
    "obsbox:llm_kv_cache_usage:ratio",
]


def run_query(api: Prometheus, expr: str):
    try:
        return api.query(expr), None
    except PrometheusError as exc:
        return [], str(exc)


@pytest.mark.slow
def test_every_promql_expression_runs_and_the_core_panels_and_report_show_data(stack):
    api: Prometheus = stack["api"]
    found = of("prometheus")
    failed, empty = [], []
    for item in found:
        result, error = run_query(api, item.promql())
        if error:
            failed.append(f"{item.dashboard} / {item.panel}: {error}\n  {item.promql()}")
        elif not any(math.isfinite(v) for s in result for v in s.values):
            empty.append(item)
    assert not failed, "Prometheus rejected:\n" + "\n".join(failed)

    on_panels = {item.expr for item in found}
    empty_exprs = {item.expr for item in empty}
    for name, expr in core_expressions().items():
        assert expr in on_panels, f"{name} is on no panel"
        assert expr not in empty_exprs, f"core panel {name!r} returned no data:\n{expr}"
    print(f"\n{len(found)} PromQL expressions ran; {len(found) - len(empty)} returned data.")
    for item in empty:
        print(f"  no data (not a core panel): {item.dashboard} / {item.panel}: {' '.join(item.promql().split())}")

    # The demo's backend, through vLLM's names and the LLM recording rules, for each of the gateway's models.
    for record in VLLM_RECORDS:
        result = api.query(f'{record}{{source="vllm"}}')
        assert {s.labels.get("model") for s in result} >= {"code-small", "code-large"}, record
        assert all(math.isfinite(v) for s in result for v in s.values), record

    # The heatmap's exemplars: Prometheus kept them, with the trace IDs Grafana links to Tempo.
    now = time.time()
    exemplars = api.query_exemplars(f"{c.REPLY_LATENCY}_bucket", now - 120, now)
    trace_ids = [labels.get("trace_id", "") for labels in exemplars]
    assert trace_ids and all(re.fullmatch(r"[0-9a-f]{32}", t) for t in trace_ids), trace_ids[:5]
    # The SLO burn dashboard's slow requests: its query, as Grafana sends it, gets the same exemplars.
    (slow,) = [item for item in found if item.panel.startswith("Slow requests")]
    assert slow not in empty, slow.promql()
    slow_ids = {labels.get("trace_id", "") for labels in api.query_exemplars(slow.promql(), now - 120, now)}
    assert slow_ids and slow_ids <= set(trace_ids), sorted(slow_ids - set(trace_ids))[:5]

    # The SLO alerts as Prometheus renders them: the untuned replies have spent ReplyLatency's budget,
    # and the policy's last step links the burn dashboard over the 30 days up to its evaluation.
    held = {(a["labels"]["alertname"], a["labels"].get("slo")): a for a in api.alerts()}
    exhausted = held[("ErrorBudgetExhausted", "ReplyLatency")]
    assert exhausted["labels"]["severity"] == "page" and exhausted["labels"]["action"] == "freeze-deploys"
    assert "of its 30d error budget left" in exhausted["annotations"]["description"]
    assert "{{" not in exhausted["annotations"]["description"]
    link = re.fullmatch(
        r"http://localhost:3000/d/obsbox-slo-burn\?var-slo=ReplyLatency&from=(\d+)&to=(\d+)",
        exhausted["annotations"]["dashboard"],
    )
    assert link, exhausted["annotations"]["dashboard"]
    start, end = int(link[1]), int(link[2])
    assert end - start == 30 * 86400 * 1000 and abs(end / 1000 - time.time()) < 60

    # The report, through the command, for the range the stack ran.
    out = stack["tmp"] / "report" / "report.html"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "obsbox",
            "report",
            "--prometheus",
            stack["url"],
            "--out",
            str(out),
            "--start",
            f"{stack['start']:.0f}",
            "--scenario",
            "untuned",
            "--rate-interval",
            "15s",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    check_report(out.read_text(encoding="utf-8"))


def check_report(text: str) -> None:
    """The data behind each chart, and the PNGs themselves, from the HTML."""
    from matplotlib import image  # noqa: PLC0415

    charts = {}
    for section in re.findall(r'<section id="([^"]+)">(.*?)</section>', text, re.DOTALL):
        key, body = section
        data = json.loads(
            re.search(r'<script type="application/json" class="chart-data">(.*?)</script>', body).group(1)
        )
        png = base64.b64decode(re.search(r'src="data:image/png;base64,([^"]+)"', body).group(1))
        charts[key] = (data, png)
    threshold = slos.reply_latency_threshold()
    expected = {"reply_p95", "stage_breakdown", "llm_breakdown", *(f"burn_rate:{s.name}" for s in slos.load())}
    assert set(charts) == expected

    p95, _png = charts["reply_p95"]
    values = [v for s in p95["series"] for v in s["v"] if math.isfinite(v)]
    assert len(values) >= 10, "the P95 line has too few points"
    assert [line["value"] for line in p95["lines"]] == [threshold]
    above = sum(v > threshold for v in values)
    assert above > len(values) / 2, f"untuned: the P95 should sit above {threshold} s; max {max(values):.3f}"
    print(
        f"report: P95 from {min(values):.3f} to {max(values):.3f} s, {above}/{len(values)} points above {threshold} s"
    )

    stages, _png = charts["stage_breakdown"]
    assert {s["labels"]["stage"] for s in stages["series"]} == set(c.STAGES)
    backend, _png = charts["llm_breakdown"]
    drawn = {s["name"] for s in backend["series"] if any(math.isfinite(v) for v in s["v"])}
    assert drawn == {f"{phase} (vllm)" for phase in ("TTFT", "queue", "prefill", "decode")}, drawn
    for slo in slos.load():
        burn, _png = charts[f"burn_rate:{slo.name}"]
        assert len(burn["series"]) == len(slos.burn_windows(slo))
        assert all(any(math.isfinite(v) for v in s["v"]) for s in burn["series"])

    for key, (_data, png) in charts.items():
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000, key
        pixels = image.imread(io.BytesIO(png), format="png")
        assert pixels.shape[:2] == (420, 1000), key
        assert pixels[..., :3].std() > 0.05, f"{key}: the image is blank"
