"""The autoscaling rules under ``promtool test rules``: fed by vLLM's and DCGM's expositions through the LLM
rules, and by queue-depth schedules that show the prefill pool's damping.

The expected values come from the expositions' text and the schedules, never from the generated rules.
"""

from __future__ import annotations

import yaml

from obsbox import llm
from obsbox.cli import main
from obsbox.llm import autoscaling
from obsbox.llm.autoscaling import GPU_MEMORY, KV_CACHE, PREFILL_WAITING, WAITING
from obsbox.slo.rules import dump
from tests.llm.test_rules import MODEL, absent, case, near, text, total
from tests.slo.scenarios import promtool, run_rule_tests

USED = ("obsbox-llm-vllm", "obsbox-llm-dcgm")
SERVED = "llama-3.1-8b"  # vLLM's --served-model-name: a model name an HPA's label selector can hold


def both_rule_files() -> str:
    """The vLLM and DCGM groups of llm.rules.yml, then autoscaling.rules.yml, whose rules read their series.

    The other sources' groups record nothing from these inputs; leaving them out halves promtool's time.
    """
    sources = [g for g in yaml.safe_load(llm.generate(llm.DEFAULT_SOURCES))["groups"] if g["name"] in USED]
    return dump({"groups": sources + yaml.safe_load(autoscaling.render())["groups"]})


def vllm_served_as(name: str) -> str:
    return text("vllm.prom").replace(MODEL, name)


def test_vllm_and_dcgm_give_one_series_per_model_for_each_pool(tmp_path):
    """vLLM's KV cache (0.4375) and queue (3) and DCGM's framebuffer; 3 requests wait, so GPU memory counts."""
    dcgm = text("dcgm.prom")
    memory = total(dcgm, "DCGM_FI_DEV_FB_USED") / sum(
        total(dcgm, f"DCGM_FI_DEV_FB_{part}") for part in ("USED", "FREE", "RESERVED")
    )
    assert 0.9 < memory < 1  # vLLM holds 90% of the framebuffer from its start, busy or not
    exposition = vllm_served_as(SERVED) + dcgm
    checks = [
        near(KV_CACHE.record, 0.4375, model=SERVED),
        near(WAITING.record, total(exposition, "vllm:num_requests_waiting"), model=SERVED),
        near(GPU_MEMORY.record, memory, model=SERVED),
        near(PREFILL_WAITING.record, 3, model=SERVED),
    ]
    run_rule_tests(tmp_path, both_rule_files(), [case("vllm+dcgm", exposition, checks)])


def test_gpu_memory_counts_only_under_decode_pressure(tmp_path):
    """An idle engine's reserved framebuffer yields no series; a KV cache past its limit brings it back."""
    dcgm = text("dcgm.prom")
    idle = _set_gauge(vllm_served_as(SERVED), "vllm:num_requests_waiting", 0.0)
    full = _set_gauge(idle, "vllm:kv_cache_usage_perc", 0.93)
    tests = [
        case("idle", idle + dcgm, [absent(GPU_MEMORY.record), near(WAITING.record, 0, model=SERVED)]),
        case(
            "kv-cache-full",
            full + dcgm,
            [near(f"count({GPU_MEMORY.record})", 1), near(KV_CACHE.record, 0.93, model=SERVED)],
        ),
    ]
    run_rule_tests(tmp_path, both_rule_files(), tests)


def _set_gauge(exposition: str, name: str, value: float) -> str:
    lines = [
        line.rsplit(" ", 1)[0] + f" {value!r}" if line.startswith(name + "{") else line
        for line in exposition.splitlines()
    ]
    return "\n".join(lines) + "\n"


def queue(values: str) -> dict:
    """A promtool test case: vLLM's waiting-requests gauge following ``values`` (promtool's notation)."""
    series = f'vllm:num_requests_waiting{{job="llm",instance="a",engine="0",model_name="{SERVED}"}}'
    return {"series": series, "values": values}


def test_a_prefill_spike_moves_the_prefill_signal_by_a_fraction_and_a_lasting_queue_fully(tmp_path):
    """15 requests queued for two minutes: the decode signal is 15 at once (4 replicas at 4 each); the
    prefill signal, the 10-minute mean, stays at or under 2 * 15 / 10 (below one replica's target of 4).
    A queue of 30 held for 20 minutes: the prefill signal reaches 30. The autoscaling group reads the
    LLM rules' series as their group last recorded them, so the checks allow one evaluation's lag."""
    within = f"{PREFILL_WAITING.record} <= bool {2 * 15 / 10}"
    below_target = f"max_over_time({PREFILL_WAITING.record}[15m]) < bool {autoscaling.WAITING_PER_REPLICA}"
    spike = [expect(WAITING.record, "11m", 15, WAITING.record), expect(within, "12m"), expect(below_target, "20m")]
    lasting = [expect(PREFILL_WAITING.record, "25m", 30, PREFILL_WAITING.record)]
    tests = [
        {"name": name, "interval": "1m", "input_series": [queue(values)], "promql_expr_test": checks}
        for name, values, checks in (("spike", "0x9 15 15 0x10", spike), ("lasting", "0x9 30x20", lasting))
    ]
    run_rule_tests(tmp_path, both_rule_files(), tests)


def expect(expr: str, at: str, value: float = 1, name: str = "") -> dict:
    """A promql_expr_test: ``expr`` at ``at`` is one series of SERVED (named ``name``), of ``value``."""
    labels = f'{{__name__="{name}",model="{SERVED}"}}' if name else f'{{model="{SERVED}"}}'
    return {"expr": expr, "eval_time": at, "exp_samples": [{"labels": labels, "value": value}]}


def test_the_committed_rules_file_is_up_to_date_and_passes_promtool(tmp_path):
    assert autoscaling.DEFAULT_RULES.read_text(encoding="utf-8") == autoscaling.render(), (
        "compose/prometheus/rules/autoscaling.rules.yml is out of date: "
        "run obsbox llm autoscaling --out compose/prometheus/rules/autoscaling.rules.yml"
    )
    result = promtool("check", "rules", str(autoscaling.DEFAULT_RULES), cwd=tmp_path)
    assert result.returncode == 0 and "SUCCESS: 4 rules found" in result.stdout, result.stdout + result.stderr


def test_cli_writes_the_file_and_check_says_when_it_is_stale(tmp_path, capsys):
    out = tmp_path / "autoscaling.rules.yml"
    assert main(["llm", "autoscaling", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == autoscaling.render()
    assert main(["llm", "autoscaling", "--out", str(out), "--check"]) == 0
    out.write_text("groups: []\n", encoding="utf-8")
    assert main(["llm", "autoscaling", "--out", str(out), "--check"]) == 1
    assert "is out of date: run obsbox llm autoscaling --out" in capsys.readouterr().err
