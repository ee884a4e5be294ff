"""The ready LLM SLOs (``obsbox llm slo``) on each server's exposition, and thresholds off the buckets.

Each exposition is fed to ``promtool test rules`` as tests/llm/test_rules.py does (counters rising
linearly over ten minutes), so at minute 10 every SLO's 5m error ratio is the exposition's own: for a
threshold inside a bucket, the linear interpolation between its two bounds, computed here from the
exposition's text alone.
"""

from __future__ import annotations

import re
import time

import pytest
import yaml

from obsbox import llm, slo
from obsbox.cli import main
from obsbox.config import ConfigError
from obsbox.dashboards.promapi import Prometheus
from obsbox.llm.slo import template
from obsbox.slo.cli import generate
from obsbox.slo.rules import dump
from obsbox.slo.selectors import Selector, parse_selector
from obsbox.slo.spec import DEFAULT_RULES
from tests.dashboards.procs import free_port, http_ok, prometheus, stop, wait_for
from tests.llm.test_rules import FIXTURES as LLM_FIXTURES
from tests.llm.test_rules import SECONDS, case, near, samples, text
from tests.slo.remote_write import histogram, push
from tests.slo.scenarios import promtool, run_rule_tests
from tests.slo.test_spec import GOOD

SPEC = DEFAULT_RULES.parents[2] / "slo-llm.yaml"
RULES = DEFAULT_RULES.parent / "slo-llm.rules.yml"
FIXTURES = {fixture: source for fixture, source in LLM_FIXTURES.items() if source != "dcgm"}  # dcgm: no requests


def matches(selector: Selector, name: str, labels: dict[str, str]) -> bool:
    def one(op: str, value: str, want: str) -> bool:
        return {
            "=": value == want,
            "!=": value != want,
            "=~": re.fullmatch(want, value) is not None,
            "!~": re.fullmatch(want, value) is None,
        }[op]

    return name == selector.metric and all(one(m.op, labels.get(m.label, ""), m.value) for m in selector.matchers)


def counted(exposition: str, selector: Selector) -> float:
    return sum(v for name, labels, v, _ in samples(exposition) if matches(selector, name, labels))


def expected_error_ratio(expositions: list[str], objective: slo.SLO) -> float | None:
    """The SLO's error ratio over the expositions (each one target); None when none has its series."""
    sli = objective.sli
    if sli.kind == "availability":
        assert sli.bad and sli.total
        total = sum(counted(e, parse_selector(sli.total)) for e in expositions)
        return sum(counted(e, parse_selector(sli.bad)) for e in expositions) / total if total else None
    assert sli.metric and sli.threshold and sli.buckets
    lower, upper = sli.bucket_around(sli.buckets)
    assert upper is not None
    share = (sli.threshold - lower) / (upper - lower)
    good = total = 0.0
    for exposition in expositions:
        name = next((n for n in [sli.metric, *sli.older_names] if f"{n}_count" in exposition), None)
        if name is None:
            continue
        buckets: dict[float, float] = {0.0: 0.0}
        for sample, labels, value, _ in samples(exposition):
            if sample == f"{name}_bucket" and labels["le"] != "+Inf":
                buckets[float(labels["le"])] = buckets.get(float(labels["le"]), 0.0) + value
        good += buckets[lower] * (1 - share) + buckets[upper] * share
        total += counted(exposition, Selector(f"{name}_count"))
    return 1 - good / total if total else None


def test_the_committed_llm_spec_and_rules_are_up_to_date_and_pass_promtool(tmp_path):
    assert SPEC.read_text(encoding="utf-8") == template(llm.load(), "sources.yaml"), (
        "compose/slo-llm.yaml is out of date: run obsbox llm slo --out compose/slo-llm.yaml"
    )
    assert RULES.read_text(encoding="utf-8") == generate(SPEC), (
        "compose/prometheus/rules/slo-llm.rules.yml is out of date: "
        "run obsbox slo build compose/slo-llm.yaml --out compose/prometheus/rules/slo-llm.rules.yml"
    )
    result = promtool("check", "rules", str(RULES), cwd=tmp_path)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    header = RULES.read_text(encoding="utf-8").split("groups:", 1)[0]
    assert "# SLO vllm-ttft (vllm): 0.45 s lies inside the bucket (0.25, 0.5]" in header


def test_every_source_slo_shows_data_with_the_expositions_ratio(tmp_path):
    """One promtool run, each exposition its own scrape target (instance), on the SLOs' 5m records (the
    other windows are the same expressions). vLLM's V1 and V0 expositions are two targets of one source;
    the V0 one prints inter-token latency under both names, which the SLI counts once."""
    slos = slo.load(SPEC)
    expositions: dict[str, list[str]] = {}
    series = []
    for fixture, source in FIXTURES.items():
        expositions.setdefault(source, []).append(text(fixture))
        series += case(fixture, text(fixture), [])["input_series"]
    checks, checked = [], set()
    for objective in slos:
        ratio = expected_error_ratio(expositions[objective.service or ""], objective)
        if ratio is not None:
            identity = {"slo": objective.name, "service": objective.service or ""}
            checks.append(near(objective.recorded("slo:sli_error:ratio_rate5m"), ratio, **identity))
            checked.add(objective.name)
    assert checked == {s.name for s in slos}, {s.name for s in slos} - checked  # every SLO has data
    v1, v0 = expositions["vllm"]
    itl = [Selector("vllm:inter_token_latency_seconds_count"), Selector("vllm:time_per_output_token_seconds_count")]
    assert counted(v0, itl[0]) == counted(v0, itl[1]) > 0 and counted(v1, itl[1]) == 0
    once = (counted(v1, itl[0]) + counted(v0, itl[0])) / SECONDS
    checks.append(near('slo:sli_events:rate5m{slo="vllm-inter-token"}', once, slo="vllm-inter-token", service="vllm"))
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    keep = {"slo:sli_error:ratio_rate5m", slo.EVENTS_RATE}
    for group in document["groups"]:
        group["rules"] = [r for r in group["rules"] if r.get("record") in keep]
    test = {"name": "every source", "interval": "1m", "input_series": series, "promql_expr_test": checks}
    run_rule_tests(tmp_path, dump(document), [test])


OFF = GOOD.replace("      threshold: 300ms\n", "      threshold: 250ms\n{extra}")


def test_an_off_bucket_threshold_is_refused_naming_the_nearest_boundaries(tmp_path):
    spec = tmp_path / "slo.yaml"
    spec.write_text(OFF.format(extra=""), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        slo.load(spec)
    message = str(caught.value)
    assert message.startswith(f"{spec}:8: slos[0].sli.threshold: 0.25 is not a bucket boundary"), message
    assert "(nearest: 0.2 and 0.3)" in message and "\n" not in message


@pytest.mark.parametrize(
    ("mode", "bucket_rates"),
    [
        ("interpolate", ['0.5 * (sum(rate(gateway_reply_latency_seconds_bucket{le="0.2"}', "+ 0.5 * ("]),
        # halfway: the lower bound, the stricter SLI
        ("nearest", ['sum(rate(gateway_reply_latency_seconds_bucket{le="0.2"}[5m]))', "under 0.2 s instead"]),
    ],
)
def test_an_estimated_threshold_warns_with_its_bound_in_the_build_the_header_and_the_alerts(
    tmp_path, capsys, mode, bucket_rates
):
    spec = tmp_path / "slo.yaml"
    spec.write_text(OFF.format(extra=f"      off_bucket: {mode}\n"), encoding="utf-8")
    out = tmp_path / "rules.yml"
    assert main(["slo", "build", str(spec), "--out", str(out)]) == 0
    bound = "can count wrong at most the requests of that bucket"
    warning = capsys.readouterr().err
    assert warning.startswith("warning: SLO ReplyLatency (gateway): 0.25 s lies inside the bucket (0.2, 0.3]")
    assert bound in warning
    rules = out.read_text(encoding="utf-8")
    assert bound in rules.split("groups:", 1)[0]
    assert rules.count("The SLI is an estimate: 0.25 s lies inside") == 4  # each burn alert says it
    assert all(part in rules for part in bucket_rates)
    result = promtool("check", "rules", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_interpolated_threshold_evaluates_to_the_linear_estimate(tmp_path):
    """100 requests a minute: 60 under 0.2 s, 90 under 0.3 s; at 0.22 s the estimate is 60 + 0.2 * 30."""
    spec = tmp_path / "slo.yaml"
    spec.write_text(OFF.format(extra="      off_bucket: interpolate\n").replace("250ms", "220ms"), encoding="utf-8")
    (objective,) = slo.load(spec)
    series = [
        {"series": f'gateway_reply_latency_seconds_bucket{{le="{le}"}}', "values": f"0+{n}x15"}
        for le, n in (("0.2", 60), ("0.3", 90), ("+Inf", 100))
    ]
    series.append({"series": "gateway_reply_latency_seconds_count", "values": "0+100x15"})
    test = {
        "name": "interpolated",
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            near(objective.recorded("slo:sli_error:ratio_rate5m"), 0.34, slo="ReplyLatency", service="gateway")
        ],
    }
    run_rule_tests(tmp_path, generate(spec), [test])


def test_a_native_histogram_sli_evaluates_in_the_real_prometheus(tmp_path):
    """Debian's promtool (2.42) checks histogram_fraction but its test series have no native histograms;
    its Prometheus, with native histograms on, takes them by remote write and evaluates the SLO's rules.
    Per minute: 6 observations in (0.25, 0.5], 3 in (0.5, 1], 1 in (1, 2]: 40% slower than 500 ms."""
    spec = tmp_path / "slo.yaml"
    native = OFF.format(extra="      histogram: native\n").replace("gateway_reply_latency_seconds", "my_ttft_seconds")
    spec.write_text(native.replace("250ms", "500ms"), encoding="utf-8")
    (objective,) = slo.load(spec)  # no buckets needed: histogram_fraction takes any threshold
    assert objective.sli.estimate() is None
    ratio = objective.error_ratio_expr("5m")
    assert "histogram_fraction(0, 0.5, sum(rate(my_ttft_seconds[5m])))" in ratio
    assert "histogram_count(sum(rate(my_ttft_seconds[5m])))" in ratio
    rules = tmp_path / "rules.yml"
    rules.write_text(generate(spec), encoding="utf-8")
    assert promtool("check", "rules", "rules.yml", cwd=tmp_path).returncode == 0

    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"evaluation_interval": "1s"}, "rule_files": [str(rules)]}))
    log = tmp_path / "prometheus.log"
    flags = ("--enable-feature=native-histograms", "--web.enable-remote-write-receiver")
    procs = {log: prometheus(config, tmp_path / "data", port, log, *flags)}
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for("Prometheus", lambda: http_ok(f"{url}/-/ready"), procs, timeout=30)
        now = int(time.time() * 1000)
        per_round = {-1: 6, 0: 3, 1: 1}  # (0.25, 0.5], (0.5, 1], (1, 2]
        points = [
            histogram(now - ago * 1000, {i: n * r for i, n in per_round.items()}, 0.5 * 10 * r)
            for r, ago in enumerate((120, 60, 0), start=1)
        ]
        push(url, {"__name__": "my_ttft_seconds", "job": "llm"}, points)
        api = Prometheus(url)
        recorded = objective.recorded("slo:sli_error:ratio_rate5m")
        (series,) = wait_for(recorded, lambda: api.query(recorded), procs, timeout=30)
    finally:
        stop(procs)
    assert series.values == [pytest.approx(0.4)]


def test_llm_slo_cli_prints_one_source_and_refuses_an_unknown_one(capsys):
    assert main(["llm", "slo", "--source", "tgi"]) == 0
    out = capsys.readouterr().out
    assert "name: tgi-errors" in out and "vllm" not in out
    assert "# tgi: no ttft SLO (TGI has no time-to-first-token histogram" in out
    assert main(["llm", "slo", "--source", "vlm"]) == 2
    err = capsys.readouterr().err
    assert "no source vlm" in err and err.count("\n") == 1
