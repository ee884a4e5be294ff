"""The ten-line example of the README runs as written: it serves, answers with the trace
headers, exposes /metrics, and its span reaches an OTLP receiver configured by OTEL_* variables."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.exporters.servers import Receiver, free_port, wait_until

README = Path(__file__).parents[2] / "README.md"


def example_code() -> str:
    section = README.read_text().split("## Instrument a Python gateway in ten lines", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs(tmp_path):
    code = example_code()
    assert len([line for line in code.splitlines() if line.strip()]) <= 14  # short enough to read at a glance
    script = tmp_path / "app.py"
    script.write_text(code)
    receiver = Receiver()
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    process = subprocess.Popen([sys.executable, str(script)], env=env, stderr=subprocess.PIPE, text=True)
    try:

        def answer():
            if process.poll() is not None:
                raise AssertionError(f"the example exited: {process.stderr.read()}")
            try:
                return httpx.post(f"http://127.0.0.1:{port}/v1/chat", json={"model": "gpt-4o"}, timeout=5)
            except httpx.TransportError:
                return None

        response = wait_until(answer, 20, "the README example to serve")
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        wait_until(receiver.spans, 10, "the example's spans to arrive over OTLP")
    finally:
        process.terminate()
        process.wait(10)
        receiver.close()
    assert response.status_code == 200
    trace_id = response.headers["traceresponse"].split("-")[1]
    assert re.fullmatch(r"[0-9a-f]{16}", response.headers["x-span-id"])
    assert 'gateway_request_duration_seconds_count{model="gpt-4o",route="/v1/chat"' in metrics
    assert 'gateway_stage_duration_seconds_count{stage="prefill"} 1.0' in metrics
    spans = receiver.spans()
    assert {resource["service.name"] for resource, _ in spans} == {"my-gateway"}
    assert {span.trace_id.hex() for _, span in spans} == {trace_id}
    assert [span.name for _, span in spans] == ["POST /v1/chat"]
