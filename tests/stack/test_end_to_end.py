"""End to end without Docker: ``obsbox up`` (what scripts/up runs here) for about a minute of the
untuned scenario: the demo gateway and its load, the bridge, a real Prometheus (Debian's package)
with the generated SLO rules. Checked through Prometheus's HTTP API and the files written."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import orjson
import pytest

from obsbox import conventions as c
from obsbox.dashboards.promapi import Prometheus, PrometheusError

HEX32 = re.compile(r"[0-9a-f]{32}")


@pytest.mark.slow
def test_untuned_gateway_burns_the_reply_latency_budget(tmp_path):
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is missing: scripts/test installs Debian's prometheus package")
    work = tmp_path / "local"
    proc = subprocess.Popen(
        [sys.executable, "-m", "obsbox", "up", "--duration", "120", "--workdir", str(work), "--refresh", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        match = re.search(r"Prometheus (http://127\.0\.0\.1:\d+)", first)
        assert match, f"obsbox up did not start a Prometheus: {first}{proc.stdout.read(2000) if proc.poll() else ''}"
        api = Prometheus(match.group(1))
        checks = {
            "p95": f"histogram_quantile(0.95, sum by (le) (rate({c.REPLY_LATENCY}_bucket[1m])))",
            "error_ratio_5m": f'{c.SLI_ERROR_RATIO.format(window="5m")}{{slo="ReplyLatency"}}',
            "error_ratio_1h": f'{c.SLI_ERROR_RATIO.format(window="1h")}{{slo="ReplyLatency"}}',
            "budget": f'{c.SLO_ERROR_BUDGET}{{slo="ReplyLatency"}}',
            "burn": f'{c.SLO_CURRENT_BURN_RATE}{{slo="ReplyLatency"}}',
            "alerts": f'ALERTS{{alertname="{c.SLO_ALERT}", slo="ReplyLatency", alertstate=~"pending|firing"}}',
        }
        values: dict[str, list] = {}
        deadline = time.monotonic() + 100
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"obsbox up exited early:\n{proc.stdout.read()}"
            try:
                values = {name: api.query(expr) for name, expr in checks.items()}
            except PrometheusError:
                values = {}
            if values and all(values.values()) and time.monotonic() > deadline - 60:  # 40 s of data
                break
            time.sleep(5)
        missing = [name for name, series in values.items() if not series] or (["all"] if not values else [])
        assert not missing, f"no value for {missing} after ~1 minute"
        p95 = values["p95"][0].finite[-1]
        error_ratio = values["error_ratio_5m"][0].finite[-1]
        assert p95 > 0.3, f"P95 reply latency {p95:.3f} s is not above the 300 ms objective"
        assert error_ratio > 0.3 and values["budget"][0].finite[-1] == pytest.approx(0.05)
        assert values["burn"][0].finite[-1] == pytest.approx(error_ratio / 0.05, rel=0.05)
        states = {(s.labels["severity"], s.labels["alertstate"]) for s in values["alerts"]}
        assert any(severity == "page" for severity, _ in states), states
        now = time.time()
        exemplars = api.query_exemplars(f"{c.REPLY_LATENCY}_bucket", now - 120, now)
        trace_ids = [labels.get("trace_id", "") for labels in exemplars]
        assert trace_ids and all(HEX32.fullmatch(t) for t in trace_ids), trace_ids[:5]
        print(
            f"\nP95 {p95 * 1000:.0f} ms, error ratio {error_ratio:.2f}, burn {error_ratio / 0.05:.1f}x, "
            f"alerts {sorted(states)}, {len(trace_ids)} exemplars with trace IDs"
        )
    finally:
        proc.terminate()
        proc.wait(60)
    enriched = [orjson.loads(line) for line in (work / "enriched.jsonl").read_bytes().splitlines()]
    assert enriched and all(e["trace_id"] == e["ActivityId"].replace("-", "") for e in enriched)
    spans = [orjson.loads(line) for line in (work / "spans.jsonl").read_bytes().splitlines()]
    server_spans = {s["span_id"] for s in spans if s["service"] == "gateway" and s["parent_span_id"] is None}
    from_logs = [s for s in spans if s["service"] == "gateway-from-logs" and s["attributes"].get("http.route")]
    assert from_logs, "the bridge sent no spans derived from the legacy logs"
    linked = [s for s in from_logs if s["parent_span_id"] in server_spans]
    assert len(linked) >= 0.9 * len(from_logs), "spans from logs hang under the gateway's own server spans"
