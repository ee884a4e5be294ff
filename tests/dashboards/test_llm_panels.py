"""The LLM serving panels on each server's exposition, in a real Prometheus with the real LLM rules.

Each exposition of tests/llm/expositions (its source: FIXTURES of tests/llm/test_rules.py) becomes
OpenMetrics series: counters and histogram parts rising linearly from 0 to the exposition's value over
ten minutes, gauges held at it, the last sample a second ago. `promtool tsdb create-blocks-from
openmetrics` backfills them, and Debian's Prometheus starts on those blocks with compose's
llm.rules.yml, evaluating the rules itself every second as compose's Prometheus does. (`promtool
tsdb create-blocks-from rules` would need two passes and a restart: the means read the rates recorded
before them in their group, which its documentation says the rule backfiller cannot see.)

Then every query of the LLM dashboard's recorded-series panels runs with source=<the exposition's
source>: a panel whose signal the source maps returns data, one whose signal it lacks returns none.
Expositions of one source (vLLM's V1 and V0 engines) go to separate Prometheus servers, run side by
side, so that one cannot fill the other's panels.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from obsbox import llm
from obsbox.dashboards import llm_sources
from obsbox.dashboards.promapi import Prometheus
from obsbox.dashboards.queries import Query
from obsbox.slo.selectors import quote
from tests.dashboards.catalog import FILLED, LABEL_VALUES, Found, dashboards
from tests.dashboards.procs import free_port, http_ok, prometheus, stop, wait_for
from tests.llm.test_rules import FIXTURES, MODEL, NOT_IN_FIXTURE, quantile, samples, text, total
from tests.slo.scenarios import promtool

UID = "obsbox-llm-inference"
STEP_SECONDS = 30
STEPS = 20  # ten minutes of samples: each 5m rate the rules take sees ten of them
DEADLINE_SECONDS = 30
RECORDED = re.compile(r"obsbox:llm_\w+:\w+")
SIGNAL_OF = {record: name for name, signal in llm.SIGNALS.items() for record in signal.records}


def rounds(fixtures: dict[str, str]) -> list[dict[str, str]]:
    """The fixtures split so that no source appears twice in one Prometheus."""
    out: list[dict[str, str]] = []
    for fixture, source in fixtures.items():
        free = next((r for r in out if source not in r.values()), None)
        if free is None:
            out.append(free := {})
        free[fixture] = source
    return out


def openmetrics(fixtures: list[str], end: int) -> str:
    """Every sample of the fixtures as a series over ten minutes up to ``end``, one instance per fixture."""
    lines = []
    for fixture in fixtures:
        for name, own, value, kind in samples(text(fixture)):
            labels = {"job": "llm", "instance": fixture, **own}
            series = name + "{" + ",".join(f"{k}={quote(v)}" for k, v in labels.items()) + "}"
            rising = kind in ("counter", "histogram")
            lines.extend(
                f"{series} {value * i / STEPS if rising else value!r} {end - (STEPS - i) * STEP_SECONDS}"
                for i in range(STEPS + 1)
            )
    return "\n".join(lines) + "\n# EOF\n"


def evaluated(url: str) -> bool:
    """Every rule group has run once (a group's results are all stored when its evaluation ends)."""
    with urllib.request.urlopen(f"{url}/api/v1/rules?type=record", timeout=2) as resp:
        groups = json.loads(resp.read())["data"]["groups"]
    return bool(groups) and all(not g["lastEvaluation"].startswith("0001-") for g in groups)


def backfill(directory: Path, fixtures: list[str], end: int) -> Path:
    directory.mkdir()
    (directory / "series.om").write_text(openmetrics(fixtures, end), encoding="utf-8")
    result = promtool("tsdb", "create-blocks-from", "openmetrics", "series.om", "tsdb", cwd=directory)
    assert result.returncode == 0, result.stdout + result.stderr
    config = {"global": {"evaluation_interval": "1s"}, "rule_files": [str(llm.DEFAULT_RULES)]}
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, Prometheus]]:
    """One Prometheus per round of fixtures, on their backfilled series: fixture -> its Prometheus."""
    tmp = tmp_path_factory.mktemp("llm-panels")
    end = int(time.time()) - 1
    groups = rounds(FIXTURES)
    with ThreadPoolExecutor(max_workers=2) as pool:
        dirs = list(pool.map(lambda i: backfill(tmp / f"round{i}", list(groups[i]), end), range(len(groups))))
    procs: dict[Path, subprocess.Popen] = {}
    urls = []
    try:
        for directory in dirs:
            port = free_port()
            log = directory / "prometheus.log"
            procs[log] = prometheus(directory / "prometheus.yml", directory / "tsdb", port, log, "--log.level=warn")
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            wait_for(f"{url} to be ready", lambda url=url: http_ok(f"{url}/-/ready"), procs, DEADLINE_SECONDS)
            wait_for(f"{url} to evaluate the rules", lambda url=url: evaluated(url), procs, DEADLINE_SECONDS)
        yield {fixture: Prometheus(url) for url, group in zip(urls, groups, strict=True) for fixture in group}
    finally:
        stop(procs)


def llm_board() -> dict:
    return next(b.model for b in dashboards() if b.uid == UID)


def recorded_queries() -> list[Found]:
    """The LLM dashboard's queries on the recorded series, each naming exactly one signal."""
    found = [
        Found(UID, panel["title"], "prometheus", target["expr"])
        for panel in llm_board()["panels"]
        for target in panel.get("targets", [])
        if RECORDED.search(target["expr"])
    ]
    for item in found:
        assert len({SIGNAL_OF[r] for r in RECORDED.findall(item.expr)}) == 1, item.expr
    return found


def signal_of(item: Found) -> str:
    return SIGNAL_OF[RECORDED.findall(item.expr)[0]]


def picked(value: str) -> str:
    """A value picked in a variable, as it lands in a =~ matcher: regex-escaped, in a PromQL string."""
    return re.escape(value).replace("\\", "\\\\")


def run(api: Prometheus, expr: str, source: str, model: str = ".*") -> list[float]:
    """The query's finite values with $source picked and $model set to a regex (All: .*)."""
    filled = Query(expr).fill({**FILLED, "source": picked(source), "model": model})
    return [v for series in api.query(filled) for v in series.values if math.isfinite(v)]


def test_the_dashboard_shows_every_signal_per_source_and_model_and_says_which_sources_lack_each():
    found = recorded_queries()
    assert {signal_of(item) for item in found} == set(llm.SIGNALS)
    for panel in llm_board()["panels"]:
        for target in panel.get("targets", []):
            if not RECORDED.search(target["expr"]):
                continue
            assert {"{{source}}", "{{model}}"} <= set(re.findall(r"\{\{\w+\}\}", target["legendFormat"]))
            assert 'source=~"$source"' in target["expr"], target["expr"]
            signal = SIGNAL_OF[RECORDED.findall(target["expr"])[0]]
            for source, why in llm_sources.lacking(signal).items():
                assert f"{source} ({why})" in panel["description"], (panel["title"], source)
    # a gap the sources file states reaches the description: TGI has no time to first token
    ttft = next(p for p in llm_board()["panels"] if p["title"] == "Time to first token")
    assert "No data from tgi (TGI has no time-to-first-token histogram" in ttft["description"]


@pytest.mark.parametrize("fixture", list(FIXTURES))
def test_each_source_fills_the_panels_of_its_signals_and_no_other(servers, fixture):
    source = FIXTURES[fixture]
    mapped = {s.name: s for s in llm_sources.sources()}[source].signals
    api = servers[fixture]
    wrong = []
    for item in recorded_queries():
        signal = signal_of(item)
        expected = signal in mapped and (fixture, signal) not in NOT_IN_FIXTURE
        values = run(api, item.expr, source)
        if bool(values) != expected:
            wrong.append(f"{item.panel} ({signal}): {'no data' if expected else f'data {values}'}\n  {item.expr}")
    assert not wrong, f"{fixture} as source={source}:\n" + "\n".join(wrong)


def test_the_variables_list_the_sources_and_their_models(servers):
    """source lists what the rules recorded; model, the chosen source's models; picking one filters."""
    variables = {v["name"]: v["query"] for v in llm_board()["templating"]["list"] if v["type"] == "query"}
    api = servers["vllm.prom"]
    in_round = {FIXTURES[f] for f, other in servers.items() if other.url == api.url}

    def values(name: str, source: str) -> set[str]:
        """What Grafana lists: /api/v1/label/NAME/values with the variable's selector as match[]."""
        selector, label = LABEL_VALUES.match(Query(variables[name]).fill({"source": source})).groups()
        query = urllib.parse.urlencode({"match[]": selector})
        with urllib.request.urlopen(f"{api.url}/api/v1/label/{label}/values?{query}", timeout=5) as resp:
            return set(json.loads(resp.read())["data"])

    assert values("source", ".*") == in_round
    assert values("model", "vllm") == {MODEL}
    assert values("model", "tgi") == set()  # TGI has no model label; "All" (.*) still shows it:
    e2e = next(i for i in recorded_queries() if signal_of(i) == "e2e" and "mean5m" in i.expr)
    assert run(api, e2e.expr, "tgi")
    assert run(api, e2e.expr, "vllm", picked(MODEL)) and not run(api, e2e.expr, "vllm", "another-model")


def test_the_panels_show_the_exposition_values(servers):
    """The backfilled rise gives back the exposition: vLLM's mean end-to-end latency and TTFT P95."""
    v1 = text("vllm.prom")
    api = servers["vllm.prom"]
    e2e = next(i for i in recorded_queries() if signal_of(i) == "e2e" and "mean5m" in i.expr)
    ttft = next(i for i in recorded_queries() if signal_of(i) == "ttft" and "0.95" in i.expr)
    mean = total(v1, "vllm:e2e_request_latency_seconds_sum") / total(v1, "vllm:e2e_request_latency_seconds_count")
    assert run(api, e2e.expr, "vllm") == [pytest.approx(mean, rel=1e-9)]
    p95 = quantile(v1, "vllm:time_to_first_token_seconds", 0.95)
    assert run(api, ttft.expr, "vllm") == [pytest.approx(p95, rel=1e-9)]
