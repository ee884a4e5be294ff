"""The demo gateway: its legacy JSON log correlates with its traces, its scenarios land on the
right side of the 300 ms SLO, and `obsbox demo` runs end to end."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from obsbox.child import obsbox_command
from obsbox.exporters import InstrumentConfig
from obsbox.exporters.demo.gateway import GatewayConfig, build_gateway
from obsbox.exporters.demo.latency import LatencyModel
from obsbox.exporters.demo.legacylog import BREAKDOWN_KEYS
from obsbox.exporters.demo.load import LoadConfig, LoadGenerator
from obsbox.exporters.demo.scenarios import scenario
from obsbox.exporters.demo.server import GatewayServer
from tests.exporters.servers import no_otlp, serve_asgi
from tests.shadowing import IMPORTED, obsbox_script, shadowing_folder

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
FIELDS = {
    "Timestamp",
    "Level",
    "Service",
    "ActivityId",
    "ParentId",
    "Route",
    "Model",
    "StatusCode",
    "DurationMs",
    "Message",
    "LatencyBreakdown",
}


def check_line(line: dict) -> None:
    assert set(line) == FIELDS, set(line) ^ FIELDS
    assert ISO_UTC.fullmatch(line["Timestamp"])
    assert line["Service"] == "gateway"
    assert GUID.fullmatch(line["ActivityId"])
    assert re.fullmatch(r"[0-9a-f]{16}", line["ParentId"])
    assert set(line["LatencyBreakdown"]) == set(BREAKDOWN_KEYS.values())
    assert all(isinstance(v, float) and v >= 0 for v in line["LatencyBreakdown"].values())
    assert line["DurationMs"] >= sum(line["LatencyBreakdown"].values()) * 0.99


def test_legacy_log_lines_carry_the_request_trace(tmp_path):
    spans = InMemorySpanExporter()
    config = InstrumentConfig(registry=CollectorRegistry(), otel=no_otlp(span_processors=[SimpleSpanProcessor(spans)]))
    app = build_gateway(GatewayConfig(scenario=scenario("untuned"), time_scale=0.05, log_dir=tmp_path), config)
    activity = uuid.uuid4()
    parent_trace = "5bf92f3577b34da6a3ce929d0e0e4736"
    with serve_asgi(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        body = {"model": "code-large", "messages": [{"role": "user", "content": "fix this go handler #12"}]}
        sent = [
            client.post(
                "/v1/chat/completions", json={**body, "stream": True}, headers={"X-Activity-ID": str(activity)}
            ),
            client.post(
                "/v1/chat/completions",
                json=body,
                headers={"traceparent": f"00-{parent_trace}-1111111111111111-01"},
            ),
            client.post("/v1/chat/completions", json={**body, "stream": True, "model": "gpt-9"}),
        ]
        bad = client.post("/v1/chat/completions", json={"model": "code-small", "messages": "hi"})
    app.instrumentation.shutdown()
    app.close()

    assert [r.status_code for r in sent] == [200, 200, 200]
    assert bad.status_code == 400 and "'messages' must be a non-empty list" in bad.text
    assert sent[0].text.rstrip().endswith("data: [DONE]")
    assert sent[1].json()["choices"][0]["message"]["content"]
    lines = [json.loads(line) for line in (tmp_path / "gateway.json").read_text().splitlines()]
    assert len(lines) == 3  # the rejected request never reached the stages and wrote no request line
    for line, response in zip(lines, sent, strict=True):
        check_line(line)
        trace_id, span_id = response.headers["traceresponse"].split("-")[1:3]
        assert line["ActivityId"].replace("-", "") == trace_id
        assert line["ParentId"] == span_id
        assert line["StatusCode"] == 200 and line["Route"] == "/v1/chat/completions"
    assert lines[0]["ActivityId"] == str(activity)
    assert lines[1]["ActivityId"].replace("-", "") == parent_trace
    assert [line["Model"] for line in lines] == ["code-large", "code-large", "other"]
    servers = {format(s.context.span_id, "016x"): s for s in spans.get_finished_spans() if s.kind.name == "SERVER"}
    assert set(servers) >= {line["ParentId"] for line in lines}
    # The span's stage children and the line's breakdown measure the same stages.
    first = servers[lines[0]["ParentId"]]
    stage_spans = [s for s in spans.get_finished_spans() if s.parent and s.parent.span_id == first.context.span_id]
    assert {s.name for s in stage_spans} == set(BREAKDOWN_KEYS)


def test_failures_are_logged_with_the_messages_the_bridge_rules_match(tmp_path):
    """Forced rates: every request hits the retrieval timeout; a deadline or an OOM ends some."""
    model = LatencyModel(retrieval_timeout_rate=1.0, deadline_rate=0.3, oom_rate=0.3)
    config = InstrumentConfig(registry=CollectorRegistry(), otel=no_otlp())
    app = build_gateway(
        GatewayConfig(scenario=scenario("untuned"), time_scale=0.0, log_dir=tmp_path, latency=model, seed=5), config
    )
    with serve_asgi(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        body = {"model": "code-small", "messages": [{"role": "user", "content": "test this sql query #40"}]}
        statuses = [client.post("/v1/chat/completions", json=body).status_code for _ in range(30)]
    app.instrumentation.shutdown()
    app.close()
    lines = [json.loads(line) for line in (tmp_path / "gateway.json").read_text().splitlines()]
    assert len(lines) == 30
    for line in lines:
        check_line(line)
    assert sorted(statuses) == sorted(line["StatusCode"] for line in lines)
    assert {line["Level"] for line in lines} == {"Error"}
    messages = [line["Message"] for line in lines]
    assert any(re.search(r"timeout after \d+ms", m) for m in messages)
    assert any("context deadline exceeded" in m for m in messages)
    assert any("OOMKilled" in m for m in messages)
    assert {504, 503} <= set(statuses)


async def run_scenario(name: str, seconds: float) -> tuple[float, float]:
    app = build_gateway(
        GatewayConfig(scenario=scenario(name)), InstrumentConfig(registry=CollectorRegistry(), otel=no_otlp())
    )
    server = GatewayServer(app, "127.0.0.1", 0)
    await server.start()
    try:
        generator = LoadGenerator(LoadConfig(target=server.url, sessions=10, duration=seconds, think_time=(0.0, 0.3)))
        summary = await generator.run()
    finally:
        await server.stop()
        app.instrumentation.shutdown()
    assert summary.requests > 20, summary
    return summary.reply_p95, summary.slower_than_300ms


@pytest.mark.slow
def test_untuned_misses_the_300ms_slo_and_tuned_meets_it():
    untuned_p95, untuned_slow = asyncio.run(run_scenario("untuned", 6))
    tuned_p95, tuned_slow = asyncio.run(run_scenario("tuned", 6))
    print(f"untuned P95 {untuned_p95:.3f} s ({untuned_slow:.0%} > 300 ms); tuned P95 {tuned_p95:.3f} s")
    assert untuned_p95 > 0.6
    assert untuned_slow > 0.5
    assert tuned_p95 <= 0.3
    assert tuned_slow < 0.05


def test_obsbox_demo_runs_and_prints_a_summary(tmp_path):
    command = [sys.executable, "-m", "obsbox", "demo", "--scenario", "tuned", "--sessions", "4", "--duration", "3"]
    command += ["--think-time", "0,0.2", "--port", "0", "--backend-metrics-port", "0", "--log-dir", str(tmp_path)]
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "summary (tuned)" in out
    assert re.search(r"reply latency \(client, time to first byte\): P50 \d+ ms  P95 \d+ ms  P99 \d+ ms", out)
    assert re.search(r"gateway_reply_latency_seconds \(gateway histogram, \d+ replies\): P50", out)
    served = int(re.search(r"load generator: (\d+) requests", out).group(1))
    lines = [json.loads(line) for line in (tmp_path / "gateway.json").read_text().splitlines()]
    assert served > 5
    assert len(lines) == served  # one legacy line per request the load generator saw answered
    for line in lines:
        check_line(line)


def test_obsbox_load_names_a_gateway_that_is_down():
    command = [sys.executable, "-m", "obsbox", "load", "--target", "http://127.0.0.1:9", "--sessions", "1"]
    result = subprocess.run(
        [*command, "--duration", "1", "--think-time", "0"], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "no successful request to http://127.0.0.1:9" in result.stderr
    bad = subprocess.run([*command, "--think-time", "3,1"], check=False, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "0 <= MIN <= MAX" in bad.stderr


@pytest.mark.parametrize("safe_path_flag", [True, False], ids=["-P", "-c stub"])
def test_a_child_obsbox_ignores_an_obsbox_folder_in_its_working_directory(tmp_path, safe_path_flag):
    command = obsbox_command("--version", safe_path_flag=safe_path_flag)
    folder = shadowing_folder(tmp_path)
    result = subprocess.run(command, cwd=folder, check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("obsbox "), result.stdout + result.stderr


def test_obsbox_demo_runs_from_a_folder_that_holds_a_directory_named_obsbox(tmp_path):
    """The load generator is a child process: it must import the installed package, not ./obsbox."""
    folder = shadowing_folder(tmp_path)
    command = [str(obsbox_script()), "demo", "--scenario", "tuned", "--sessions", "2", "--duration", "2"]
    command += ["--think-time", "0,0.2", "--port", "0", "--backend-metrics-port", "0"]
    result = subprocess.run(command, cwd=folder, check=False, capture_output=True, text=True, timeout=90)
    out = result.stdout + result.stderr
    assert IMPORTED not in out
    assert result.returncode == 0, out
    assert re.search(r"load generator: [1-9]\d* requests", out), out
