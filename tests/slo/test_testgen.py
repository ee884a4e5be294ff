"""``obsbox slo test``: the generated promtool tests pass on every shipped spec and fail on broken rules;
specs with two SLOs on one SLI are refused; what the generated series cannot express is said."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from obsbox import conventions, slo
from obsbox.cli import main
from obsbox.config import ConfigError
from obsbox.slo.matching import accepts, label_set
from obsbox.slo.rules import dump
from obsbox.slo.selectors import Matcher, parse_selector
from obsbox.slo.spec import DEFAULT_RULES
from tests.slo.test_spec import AVAILABILITY, GOOD

TESTDATA = Path(__file__).parent / "testdata"
COMPOSE = DEFAULT_RULES.parents[2]
# Each shipped spec, with the rules file compose loads (None: built from the spec).
SPECS = {
    "seed": (COMPOSE / "slo.yaml", DEFAULT_RULES),
    "llm": (COMPOSE / "slo-llm.yaml", DEFAULT_RULES.parent / "slo-llm.rules.yml"),
    **{path.name.split(".")[0]: (path, None) for path in sorted(TESTDATA.glob("*.yaml"))},
}


@pytest.mark.parametrize(("spec", "rules"), SPECS.values(), ids=SPECS.keys())
def test_the_generated_tests_pass_for_every_shipped_slo(spec, rules, tmp_path, capsys):
    """Every SLO passes its steady-then-no-data, fast and slow cases, a case per alert condition of its
    own and, with a policy, the budget-spent case, on the rules compose loads."""
    assert main(["slo", "test", str(spec), "--out", str(tmp_path), *(["--rules", str(rules)] if rules else [])]) == 0
    lines = capsys.readouterr().out.splitlines()
    slos = slo.load(spec)
    names = [s.name for s in slos]
    assert [line.split()[1] for line in lines] == names
    for line, one in zip(lines, slos, strict=True):
        own = [f"{alert.label} fires" for alert in one.alerts] + (["budget spent"] if one.policy else [])
        shown = ", ".join(["steady good, then no data", "fast burn", "slow burn", *own])
        assert line == f"pass {one.name} ({one.service}): {shown}"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{n}.{kind}.yml" for n in names for kind in ("rules", "test")
    )


def test_broken_rules_fail_naming_the_slo_the_case_and_the_minute(tmp_path, capsys):
    """The features spec's rules with five faults: checkout-latency's fastest page at twice its factor,
    its no-data alert gone, its own burn-rate condition without its ``for``, its policy step at 50% of
    the budget left instead of 25%; checkout-availability's filter dropped from its good events."""
    features, _ = SPECS["features"]
    document = slo.rules(slo.load(features))
    latency, availability = document["groups"][:2]
    assert availability["name"] == "obsbox-slo-checkout-availability"
    (page,) = [r for r in latency["rules"] if r.get("labels", {}).get("long_window") == "1h"]
    assert page["expr"].count(">= 13.44") == 2
    page["expr"] = page["expr"].replace(">= 13.44", ">= 26.88")
    (own,) = [r for r in latency["rules"] if r.get("alert") == conventions.SLO_BURN_RATE_ALERT]
    assert own.pop("for") == "10m"
    (step,) = [r for r in latency["rules"] if r.get("alert") == "CheckoutBudgetLow"]
    assert step["expr"].endswith(" < 0.25")
    step["expr"] = step["expr"].replace(" < 0.25", " < 0.5")
    latency["rules"] = [r for r in latency["rules"] if r.get("alert") != conventions.SLO_NO_DATA_ALERT]
    for rule in availability["rules"]:
        rule["expr"] = rule["expr"].replace('{outcome="ok",route="/pay"}', '{outcome="ok"}')
    broken = tmp_path / "broken.rules.yml"
    broken.write_text(dump(document), encoding="utf-8")
    assert main(["slo", "test", str(features), "--rules", str(broken)]) == 1
    out = capsys.readouterr().out
    failures = {
        "checkout-latency": [
            r"steady good, then no data at 30m: SLONoData expected \[ticket\], fired \[\]",
            r"fast burn at \d+m: SLOErrorBudgetBurn expected \[[^]]*page 1h/5m[^]]*\], fired \[(?![^]]*1h/5m)[^]]*\]",
            # fired before the condition had held for 10m
            r"burning-for-10m fires at \d+m: SLOBurnRate expected \[\], fired \[ticket burning-for-10m\]",
            # the budget left is under 50% before it is under 25%
            r"budget spent at \d+m: CheckoutBudgetLow expected \[\], fired \[ticket\]",
        ],
        # The good events outside the filter now count: the fast burn no longer pages.
        "checkout-availability": [
            r"fast burn at \d+m: SLOErrorBudgetBurn expected \[[^]]*page 1h/5m[^]]*\], fired \[\]"
        ],
    }
    for name, patterns in failures.items():
        assert re.search(rf"^FAIL {name} \(checkout\): ", out, re.MULTILINE), out
        for pattern in patterns:
            assert re.search(pattern, out), (pattern, out)


def test_a_missing_group_fails_and_a_native_histogram_is_skipped_with_its_reason(tmp_path, capsys):
    spec = tmp_path / "slo.yaml"
    native = GOOD.replace("      threshold: 300ms\n", "      threshold: 500ms\n      histogram: native\n")
    spec.write_text(native.replace("gateway_reply_latency_seconds", "my_ttft_seconds"), encoding="utf-8")
    assert main(["slo", "test", str(spec)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("skip ReplyLatency (gateway): a native-histogram SLI: promtool 2.42's test series have no")
    assert out.count("\n") == 1

    spec.write_text(GOOD, encoding="utf-8")
    empty = tmp_path / "empty.rules.yml"
    empty.write_text("groups: []\n", encoding="utf-8")
    assert main(["slo", "test", str(spec), "--rules", str(empty)]) == 1
    assert capsys.readouterr().out == "FAIL ReplyLatency (gateway): the rules have no group obsbox-slo-ReplyLatency\n"


def test_without_promtool_one_line_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["slo", "test", str(SPECS["seed"][0])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("obsbox slo test: promtool is not on PATH") and err.count("\n") == 1


SECOND = """
  - name: {name}
    objective: 0.99
    sli:
      kind: latency
      metric: gateway_reply_latency_seconds
      threshold: {threshold}
    filters: {filters}
    runbook: Look at the stage breakdown.
"""


@pytest.mark.parametrize(
    ("first_filters", "second", "example"),
    [
        ("[]", {"threshold": "300ms", "filters": "[]"}, 'gateway_reply_latency_seconds_bucket{le="0.3"}'),
        ("[]", {"threshold": "300ms", "filters": "['route=\"/v1/chat\"']"}, 'route="/v1/chat"'),
        ("['route=~\"/v1/.*\"']", {"threshold": "300ms", "filters": "['route=\"/v1/chat\"']"}, 'route="/v1/chat"'),
    ],
    ids=["same", "a subset", "a regex and a route it matches"],
)
def test_two_slos_on_the_same_series_are_refused(tmp_path, first_filters, second, example):
    spec = tmp_path / "slo.yaml"
    first = GOOD.replace("    runbook:", f"    filters: {first_filters}\n    runbook:")
    spec.write_text(first + SECOND.format(name="Strict", **second).lstrip("\n"), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        slo.load(spec)
    message = str(caught.value)
    assert message.startswith(f"{spec}:13: slos[1].sli: counts the same series as slos[0] (ReplyLatency), such as")
    assert example in message and "\n" not in message
    (latency,) = slo.loads(first)
    (strict,) = slo.loads("service: gateway\nslos:" + SECOND.format(name="Strict", **second))
    with pytest.raises(ConfigError, match=r"^SLO Strict: sli: counts the same series as SLO ReplyLatency"):
        slo.rules([latency, strict], [])


@pytest.mark.parametrize(
    ("first_filters", "second"),
    [
        ("[]", {"threshold": "1s", "filters": "[]"}),  # another threshold: another SLI
        ("['route=\"/v1/chat\"']", {"threshold": "300ms", "filters": "['route=\"/v1/embed\"']"}),
        ("['route=~\"/v1/.*\"']", {"threshold": "300ms", "filters": "['route=\"/v2/chat\"']"}),
    ],
    ids=["other threshold", "other route", "a route the regex does not match"],
)
def test_slos_on_different_series_of_one_histogram_are_accepted(tmp_path, first_filters, second):
    spec = tmp_path / "slo.yaml"
    first = GOOD.replace("    runbook:", f"    filters: {first_filters}\n    runbook:")
    spec.write_text(first + SECOND.format(name="Strict", **second).lstrip("\n"), encoding="utf-8")
    assert [s.name for s in slo.load(spec)] == ["ReplyLatency", "Strict"]


def test_availability_slos_overlap_on_their_bad_series_only():
    """Two error SLOs counting 503 among their errors would page twice; a latency SLO on the same
    histogram's _count counts it otherwise."""
    five = AVAILABILITY.split("slos:\n", 1)[1]
    only_503 = five.replace('status_code=~"5.."', 'status_code="503"').replace("name: Availability", "name: Only503")
    with pytest.raises(ConfigError, match=r'slos\[1\]\.sli: .*status_code="503"'):
        slo.loads(AVAILABILITY + only_503)
    four = five.replace('=~"5.."', '=~"4.."').replace("name: Availability", "name: ClientErrors")
    assert len(slo.loads(AVAILABILITY + four)) == 2
    latency = GOOD.split("slos:\n", 1)[1].replace("    objective", "    service: gateway\n    objective")
    assert len(slo.loads(AVAILABILITY + latency)) == 2


def test_label_sets_follow_prometheus_matching():
    """Anchored regular expressions, a missing label as the empty value, and None when nothing fits."""
    assert accepts(Matcher("code", "=~", "5.."), "503") and not accepts(Matcher("code", "=~", "5.."), "1503")
    assert accepts(Matcher("err", "!=", ""), "x") and not accepts(Matcher("err", "!=", ""), "")
    selector = parse_selector('m{code=~"5..",err!~"validation|template",route="/a"}')
    assert label_set(selector.matchers) == {"code": "500", "err": "200", "route": "/a"}
    assert label_set([*selector.matchers, Matcher("route", "=", "/b")]) is None
    assert label_set([Matcher("le", "=~", "1|1.0"), Matcher("le", "!=", "1")]) == {"le": "1.0"}


def test_an_slo_on_a_histograms_older_name_overlaps_one_that_reads_it_under_that_name():
    """A latency SLO with ``older_names`` reads the old histogram too: an SLO on the old name counts the
    same series (two pages for one fault)."""
    renamed = GOOD.replace("      threshold:", "      older_names: [old_reply_seconds]\n      threshold:")
    old = SECOND.format(name="Old", threshold="300ms", filters="[]").replace(
        "metric: gateway_reply_latency_seconds", "metric: old_reply_seconds\n      buckets: [0.3, 1]"
    )
    same = r'slos\[1\]\.sli: counts the same series .* old_reply_seconds_bucket\{le="0.3"\}'
    with pytest.raises(ConfigError, match=same):
        slo.loads(renamed + old.lstrip("\n"))
    assert len(slo.loads(GOOD + old.lstrip("\n"))) == 2  # without the older name, two histograms
