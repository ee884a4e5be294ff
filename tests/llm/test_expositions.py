"""The LLM servers' expositions (tests/llm/expositions/) are what a scrape of each server returns:
each parses as the Prometheus text format (prometheus_client's parser and the real promtool), and
its histograms hold together as a server's would (cumulative buckets, ``_count`` equal to the
``+Inf`` bucket), so a query over them answers what the server would make it answer."""

from __future__ import annotations

import math
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

EXPOSITIONS = sorted((Path(__file__).parent / "expositions").glob("*.prom"))


def test_there_is_one_for_each_source():
    names = {path.stem for path in EXPOSITIONS}
    assert {"vllm", "vllm-v0", "sglang", "tgi", "litellm", "dcgm", "genai-otlp", "genai-otlp-without-suffixes"} <= names


@pytest.mark.parametrize("path", EXPOSITIONS, ids=lambda p: p.stem)
def test_promtool_parses_it(path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is needed (Debian's prometheus package; scripts/test installs it)"
    # exit status 1 also for the lint warnings the servers' own names earn (see the README): read the text
    result = subprocess.run(
        [promtool, "check", "metrics"], input=path.read_bytes(), capture_output=True, timeout=60, check=False
    )
    problems = result.stdout.decode() + result.stderr.decode()
    assert "error while linting" not in problems and "parse" not in problems.lower(), problems


@pytest.mark.parametrize("path", EXPOSITIONS, ids=lambda p: p.stem)
def test_its_histograms_are_consistent(path):
    families = list(text_string_to_metric_families(path.read_text(encoding="utf-8")))
    histograms = [family for family in families if family.type == "histogram"]
    for family in histograms:
        series: dict[tuple, dict[str, object]] = defaultdict(lambda: {"buckets": []})
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            if sample.name.endswith("_bucket"):
                series[labels]["buckets"].append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                series[labels]["count"] = sample.value
        for labels, found in series.items():
            buckets = sorted(found["buckets"])
            assert buckets and math.isinf(buckets[-1][0]), f"{family.name}{labels}: no +Inf bucket"
            counts = [count for _, count in buckets]
            assert counts == sorted(counts), f"{family.name}{labels}: buckets are not cumulative"
            assert found.get("count") == counts[-1], f"{family.name}{labels}: _count is not the +Inf bucket"
