"""``obsbox up`` as a newcomer meets it: the default run (no --workdir, as scripts/up starts it) from a
folder that holds a directory named obsbox, a group SIGTERM, and what the summary says in the first
minutes, when the SLO windows hold less data than their length.

The default run is also the end-to-end test without Docker: the untuned demo gateway and its load,
the bridge, a real Prometheus (Debian's package) with the generated SLO rules, checked through
Prometheus's HTTP API and the files written. One run serves both tests (a module fixture): starting
the stack and gathering DATA_SECONDS of data is most of their cost."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from obsbox import conventions as c
from obsbox.dashboards.promapi import Prometheus, PrometheusError
from obsbox.local.cli import obsbox_executable
from obsbox.local.live import Alert, Summary, render, warming
from obsbox.slo.budgets import OVERSPEND_ANNOTATION
from tests.shadowing import IMPORTED, obsbox_script, shadowing_folder

DAY = 86400.0
HEX32 = re.compile(r"[0-9a-f]{32}")
# Of the untuned demo before the SLO checks are read. Every check answers from about 15 s (two scrapes
# for the rates, one evaluation on top for the 1h ratio and the page alert), with P95 near 1 s and an
# error ratio near 1 against thresholds of 0.3, so 20 s leaves a margin without waiting for more.
DATA_SECONDS = 20
# The untuned demo serializes about 270 ms of context per request against its 100 ms budget.
OVER_BUDGET = re.compile(r"ReplyLatency stage budgets: context_serialization is \d+(\.\d+)?ms over its 100ms budget")
SLO_CHECKS = {
    "p95": f"histogram_quantile(0.95, sum by (le) (rate({c.REPLY_LATENCY}_bucket[1m])))",
    "error_ratio_5m": f'{c.SLI_ERROR_RATIO.format(window="5m")}{{slo="ReplyLatency"}}',
    "error_ratio_1h": f'{c.SLI_ERROR_RATIO.format(window="1h")}{{slo="ReplyLatency"}}',
    "budget": f'{c.SLO_ERROR_BUDGET}{{slo="ReplyLatency"}}',
    "burn": f'{c.SLO_CURRENT_BURN_RATE}{{slo="ReplyLatency"}}',
    "alerts": f'ALERTS{{alertname="{c.SLO_ALERT}", slo="ReplyLatency", alertstate=~"pending|firing"}}',
}


class Up:
    """``obsbox up`` in a process group of its own, as a shell or `timeout` starts it; what it prints
    is read as it comes, into ``printed``."""

    def __init__(self, folder: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(obsbox_script()), "up", "--refresh", "1", *args],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.printed: list[str] = []
        self.reader = threading.Thread(target=lambda: self.printed.extend(self.proc.stdout or ()), daemon=True)
        self.reader.start()

    @property
    def out(self) -> str:
        return "".join(self.printed)

    def wait_until(self, what: str, ready: Callable[[], object], seconds: float, *, required: bool = True):
        """``ready()``'s first truthy value, polled every second; when ``seconds`` run out, a failure
        naming ``what``, or its last value if not ``required``."""
        deadline = time.monotonic() + seconds
        value = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.reader.join(10)
                pytest.fail(f"obsbox up exited with {self.proc.returncode} while waiting for {what}:\n{self.out}")
            if value := ready():
                return value
            time.sleep(1)
        if required:
            pytest.fail(f"no {what} after {seconds:.0f} s:\n{self.out}")
        return value

    def stop_group(self) -> str:
        """SIGTERM to the whole group (`timeout`, `kill -- -PGID`); everything it printed."""
        with contextlib.suppress(ProcessLookupError):  # the group is gone when obsbox up failed
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(60)
        self.reader.join(10)
        return self.out


def test_a_group_sigterm_stops_the_local_mode_and_exits_0(tmp_path):
    work = tmp_path / "local"
    up = Up(tmp_path, "--no-prometheus", "--sessions", "5", "--workdir", str(work))
    try:
        enriched = work / "enriched.jsonl"
        up.wait_until("enriched line", lambda: enriched.exists() and enriched.stat().st_size, 45)
    finally:
        out = up.stop_group()
    assert up.proc.returncode == 0, out
    assert "exited with" not in out and "\nstopped\n" in out, out
    assert "summary (untuned)" in (work / "gateway.log").read_text(), "the gateway did not stop gracefully"
    assert stat.S_IMODE(work.stat().st_mode) == 0o700, "the outputs are for their owner only"


@dataclass
class DefaultRun:
    """What the default ``obsbox up`` showed while it ran, and once a group SIGTERM stopped it."""

    folder: Path
    prometheus: str  # its URL, from the first line printed
    rate: float  # the first SLO burn rate Prometheus answered
    slo: dict[str, list]  # SLO_CHECKS' answers after DATA_SECONDS of data (an empty list: none by then)
    exemplar_trace_ids: list[str]
    overspend: list[str]  # the burn alerts' stage-budget annotation, as Prometheus rendered it
    scraped: set[str]
    check: subprocess.CompletedProcess  # promtool check config on the Prometheus config it wrote
    out: str
    returncode: int


def slo_answers(api: Prometheus) -> dict[str, list]:
    try:
        return {name: api.query(expr) for name, expr in SLO_CHECKS.items()}
    except PrometheusError:
        return {}


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> DefaultRun:
    """Run as scripts/up runs it: the relative default out/local, from a folder with an obsbox/ directory,
    until the summary showed the burn and the backend and Prometheus held DATA_SECONDS of data."""
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: scripts/test installs Debian's prometheus package")
    folder = shadowing_folder(tmp_path_factory.mktemp("default-run"))
    up = Up(folder)
    try:
        first = up.wait_until("first line", lambda: up.printed[:1], 30)[0]
        started = time.monotonic()
        match = re.search(r"Prometheus (http://127\.0\.0\.1:\d+)", first)
        assert match, f"obsbox up did not start a Prometheus: {first}"
        api = Prometheus(match.group(1))

        def burn():
            try:
                return api.query(f'{c.SLO_CURRENT_BURN_RATE}{{slo="ReplyLatency"}}')
            except PrometheusError:
                return None

        rate = up.wait_until("SLO burn rate in Prometheus", burn, 60)[0].finite[-1]
        young = re.compile(r"ReplyLatency +\d+\.\d\dx  \(warming up: [0-4] of 5 minutes\)")
        up.wait_until("burn rate in the summary", lambda: young.search(up.out), 30)
        backend = re.compile(r"ttft \d+\.\d  queue \d+\.\d  prefill \d+\.\d  decode \d+\.\d  prefix-cache hits \d+%")
        up.wait_until("the backend's vLLM breakdown in the summary", lambda: backend.search(up.out), 30)

        def slo_with_data():
            answers = slo_answers(api)
            held = time.monotonic() - started >= DATA_SECONDS
            return answers if held and answers and all(answers.values()) else None

        slo = up.wait_until("every SLO check", slo_with_data, 100, required=False) or slo_answers(api)
        up.wait_until("the stage over budget in the summary", lambda: OVER_BUDGET.search(up.out), 30, required=False)
        overspend = [a["annotations"].get(OVERSPEND_ANNOTATION, "") for a in api.alerts()]
        now = time.time()
        exemplars = api.query_exemplars(f"{c.REPLY_LATENCY}_bucket", now - 120, now)
        scraped = {s.labels["job"] for s in api.query("up == 1")}
        config = folder / "out" / "local" / "prometheus" / "prometheus.yml"
        check = subprocess.run(
            ["promtool", "check", "config", str(config)], check=False, capture_output=True, text=True
        )
    finally:
        out = up.stop_group()
    return DefaultRun(
        folder,
        match.group(1),
        rate,
        slo,
        [labels.get("trace_id", "") for labels in exemplars],
        overspend,
        scraped,
        check,
        out,
        up.proc.returncode,
    )


@pytest.mark.slow
def test_the_default_run_shows_the_slo_burn_from_its_own_prometheus_config(default_run):
    """promtool accepts the config it writes, and the burn rate shows in its first minute, marked as young."""
    run = default_run
    assert run.check.returncode == 0, run.check.stdout + run.check.stderr
    assert "SUCCESS: 2 rule files found" in run.check.stdout  # the SLO rules and the LLM rules
    assert run.scraped == {"gateway", "vllm", "obsbox-bridge"}, run.scraped
    assert run.rate > 1, f"the untuned gateway burns its reply-latency budget faster than 1x, not {run.rate}"
    assert IMPORTED not in run.out and run.returncode == 0, run.out
    obsbox = obsbox_script()  # not under the working directory: named by its full path
    assert f"next steps (from {run.folder}, where the paths below start)" in run.out, run.out
    assert f"{obsbox} bridge '/path/to/your/logs/*.json' --to file:out/local/yours.jsonl" in run.out, run.out
    assert f"{obsbox} report --prometheus {run.prometheus} --last 15m --out out/local/report.html" in run.out


@pytest.mark.slow
def test_untuned_gateway_burns_the_reply_latency_budget(default_run):
    """End to end: the SLO series, the page alert and exemplars in Prometheus; the bridge's output and
    spans in the files written."""
    values = default_run.slo
    missing = [name for name, series in values.items() if not series] or (["all"] if not values else [])
    assert not missing, f"no value for {missing} after {DATA_SECONDS} s of data:\n{default_run.out}"
    p95 = values["p95"][0].finite[-1]
    error_ratio = values["error_ratio_5m"][0].finite[-1]
    assert p95 > 0.3, f"P95 reply latency {p95:.3f} s is not above the 300 ms objective"
    assert error_ratio > 0.3 and values["budget"][0].finite[-1] == pytest.approx(0.05)
    assert values["burn"][0].finite[-1] == pytest.approx(error_ratio / 0.05, rel=0.05)
    states = {(s.labels["severity"], s.labels["alertstate"]) for s in values["alerts"]}
    assert any(severity == "page" for severity, _ in states), states
    named = [text for text in default_run.overspend if text.startswith("context_serialization is ")]
    assert named, f"no burn alert names the overspending stage first: {default_run.overspend}"
    assert OVER_BUDGET.search(default_run.out), default_run.out
    trace_ids = default_run.exemplar_trace_ids
    assert trace_ids and all(HEX32.fullmatch(t) for t in trace_ids), trace_ids[:5]
    print(
        f"\nP95 {p95 * 1000:.0f} ms, error ratio {error_ratio:.2f}, burn {error_ratio / 0.05:.1f}x, "
        f"alerts {sorted(states)}, {len(trace_ids)} exemplars with trace IDs"
    )
    work = default_run.folder / "out" / "local"
    enriched = [orjson.loads(line) for line in (work / "enriched.jsonl").read_bytes().splitlines()]
    assert enriched and all(e["trace_id"] == e["ActivityId"].replace("-", "") for e in enriched)
    spans = [orjson.loads(line) for line in (work / "spans.jsonl").read_bytes().splitlines()]
    server_spans = {s["span_id"] for s in spans if s["service"] == "gateway" and s["parent_span_id"] is None}
    from_logs = [s for s in spans if s["service"] == "gateway-from-logs" and s["attributes"].get("http.route")]
    assert from_logs, "the bridge sent no spans derived from the legacy logs"
    linked = [s for s in from_logs if s["parent_span_id"] in server_spans]
    assert len(linked) >= 0.9 * len(from_logs), "spans from logs hang under the gateway's own server spans"


def test_the_next_steps_name_the_environment_s_obsbox_script_from_the_checkout(monkeypatch):
    script = obsbox_script()
    monkeypatch.chdir(script.parents[2])  # the folder that holds .venv/bin/obsbox
    assert obsbox_executable() == os.path.join(script.parent.parent.name, "bin", "obsbox")


def summary(data_seconds: float) -> Summary:
    """Two SLOs, one alert: what Prometheus answers after ``data_seconds`` of the untuned demo."""
    windows = (300, 3600, 30 * DAY)
    return Summary(
        source="Prometheus",
        burn={"ReplyLatency": 18.5, "Availability": 0.5},
        budget_remaining={"ReplyLatency": 1 - 18.5, "Availability": 1 - 0.5},
        held={(name, w): min(w, data_seconds) for name in ("ReplyLatency", "Availability") for w in windows},
        periods={"ReplyLatency": 30 * DAY, "Availability": 30 * DAY},
        alerts=[Alert("ReplyLatency", "page", "1h", "5m", "firing")],
    )


def test_a_burn_rate_is_marked_until_its_window_holds_that_much_data():
    early = render(summary(130), 130)
    assert re.search(r"ReplyLatency +18\.50x  \(warming up: 2 of 5 minutes\)\n", early), early
    later = render(summary(400), 400)
    assert re.search(r"ReplyLatency +18\.50x\n", later) and re.search(r"Availability +0\.50x\n", later), later


def test_a_period_budget_is_how_long_it_lasts_until_the_period_holds_that_much_data():
    early = render(summary(400), 400)
    assert "%" not in early, "a budget left over 30 days from 7 minutes of data is not a percentage to show"
    assert "30d budget: warming up: 7 minutes of 30 days; at the rate so far it lasts 38.9 hours" in early
    assert "at the rate so far it lasts 60.0 days" in early  # 0.5x spends the budget in twice the period
    full = render(summary(31 * DAY), 31 * DAY)
    assert "budget left over 30d: -1750.0%" in full and "budget left over 30d: 50.0%" in full


def test_the_alerts_say_which_stages_are_over_their_budget():
    over = "context_serialization is 171ms over its 100ms budget. prefill is 42ms over its 60ms budget."
    text = render(
        Summary(alerts=[Alert("ReplyLatency", "page", "1h", "5m", "firing")], overspend={"ReplyLatency": over}), 1
    )
    assert re.search(
        rf"ReplyLatency page 1h/5m \(firing[^)]*\)\n    ReplyLatency stage budgets: {re.escape(over)}", text
    )
    assert "stage budgets" not in render(Summary(alerts=[Alert("ReplyLatency", "page", "1h", "5m", "firing")]), 1)


def test_an_slo_without_data_is_listed_with_the_alerts():
    """SLONoData is listed even when no burn alert fires: without data they cannot."""
    text = render(Summary(no_data={"Availability": "firing"}), 1)
    assert "    Availability SLONoData (firing): its SLI has no series for 10m, so its burn alerts cannot fire" in text
    both = render(
        Summary(alerts=[Alert("ReplyLatency", "page", "1h", "5m", "firing")], no_data={"Availability": "pending"}), 1
    )
    assert re.search(r"Availability SLONoData \(pending\)[^\n]*\n    ReplyLatency page 1h/5m \(firing", both), both
    assert "SLONoData" not in render(summary(400), 1)


def test_a_firing_alert_says_which_window_is_still_warming_up():
    assert "ReplyLatency page 1h/5m (firing; the 1h window is warming up: 7 of 60 minutes)" in render(summary(400), 1)
    assert "ReplyLatency page 1h/5m (firing)" in render(summary(2 * 3600), 1)


@pytest.mark.parametrize(
    ("data", "window", "said"),
    [
        (0, 300, "0 of 5 minutes"),
        (3 * 3600, 6 * 3600, "3 of 6 hours"),
        (600, 3 * DAY, "10 minutes of 3 days"),
        (60, 30 * DAY, "1 minute of 30 days"),
        (84, 30 * DAY, "1 minute of 30 days"),  # 1.4 minutes, printed as 1: no plural
    ],
)
def test_warming_up_is_said_in_the_window_s_own_unit(data, window, said):
    assert warming(data, window) == f"warming up: {said}"


def test_the_summary_shows_the_backend_s_own_breakdown_only_when_prometheus_has_it():
    backend = Summary(
        backend_ms={"ttft": 112.94, "queue": 0.31, "prefill": 111.0, "decode": 96.4}, backend_cache_hit=0.42
    )
    text = render(backend, 30.0)
    assert 'inference backend, from its own vLLM metrics (obsbox:llm_*{source="vllm"}, mean ms over 5m)' in text
    assert "    ttft 112.9  queue 0.3  prefill 111.0  decode 96.4  prefix-cache hits 42%" in text
    assert "inference backend" not in render(Summary(), 30.0)
