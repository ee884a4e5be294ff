"""Every *.dashboard.py builds into JSON with the structure of Grafana's dashboard model."""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from grafanalib import core as g

from obsbox import conventions as c
from obsbox import slo
from obsbox.dashboards import build, slos
from obsbox.dashboards import panels as p
from obsbox.dashboards import queries as q
from obsbox.dashboards.panels import DashboardError
from obsbox.slo import DEFAULT_SPEC
from obsbox.slo.rules import EVENTS_RATE
from tests.dashboards.catalog import SLO_SPECS, burn_dashboards, dashboards
from tests.scripts_path import console_script

EXPECTED = {
    "obsbox-gateway-latency",
    "obsbox-slo-burn",
    "obsbox-llm-inference",
    "obsbox-logs-traces",
    "obsbox-bridge-health",
}


def panels(model: dict) -> list[dict]:
    return [p for p in model["panels"] if p["type"] != "row"]


def test_every_definition_file_builds_and_the_five_dashboards_are_there():
    files = build.definition_files()
    assert len(files) == len(dashboards()) == 5
    assert {b.uid for b in dashboards()} == EXPECTED
    for board in dashboards():
        assert board.source.name.endswith(".dashboard.py")
        assert json.loads(board.text) == board.model
        assert board.model["schemaVersion"] >= 36  # object datasource references, current panel models
        assert panels(board.model), board.title


@pytest.mark.parametrize("board", dashboards(), ids=lambda b: b.uid)
def test_panels_have_grid_positions_ids_targets_and_do_not_overlap(board):
    ids, cells = set(), {}
    for panel in board.model["panels"]:
        pos = panel["gridPos"]
        assert set(pos) == {"h", "w", "x", "y"}, panel["title"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] >= 0 and pos["y"] >= 0
        assert pos["x"] + pos["w"] <= 24, f"{panel['title']} is wider than the grid"
        assert isinstance(panel["id"], int) and panel["id"] not in ids, f"duplicate id {panel['id']}"
        ids.add(panel["id"])
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r} at {(x, y)}"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"{panel['title']} has no targets"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert all(ref_ids) and len(set(ref_ids)) == len(ref_ids), panel["title"]
        for target in panel["targets"]:
            assert target["expr" if target["datasource"]["type"] != "tempo" else "query"], panel["title"]


@pytest.mark.parametrize("board", dashboards(), ids=lambda b: b.uid)
def test_every_datasource_reference_is_a_type_uid_object(board):
    """grafanalib issue #493: Grafana 11 does not resolve string references."""
    seen = 0

    def check(ref, where):
        nonlocal seen
        assert isinstance(ref, dict) and set(ref) == {"type", "uid"}, f"{where}: {ref!r}"
        assert ref["type"] in c.DATASOURCE_UIDS or ref == {"type": "datasource", "uid": "-- Mixed --"}, where
        seen += 1

    for panel in panels(board.model):
        check(panel["datasource"], panel["title"])
        for target in panel["targets"]:
            check(target["datasource"], f"{panel['title']} / {target['refId']}")
            assert target["datasource"]["uid"] == "${ds_" + target["datasource"]["type"] + "}"
    for variable in board.model["templating"]["list"]:
        if variable["type"] == "query":
            check(variable["datasource"], variable["name"])
    assert seen > len(panels(board.model))


@pytest.mark.parametrize("board", dashboards(), ids=lambda b: b.uid)
def test_template_variables_datasource_by_uid_service_route_model(board):
    """route on the gateway's boards; source, where a panel reads the LLM recorded series, instead."""
    variables = {v["name"]: v for v in board.model["templating"]["list"]}
    llm = "$source" in json.dumps(board.model["panels"])
    assert {"ds_prometheus", "service", "source" if llm else "route", "model"} <= variables.keys()
    for kind in ("prometheus", "loki", "tempo"):
        name = f"ds_{kind}"
        used = f"${{{name}}}" in board.text
        assert (name in variables) == used, f"{name}: declared {name in variables}, used {used}"
        if used:
            assert variables[name]["type"] == "datasource" and variables[name]["query"] == kind
            assert variables[name]["current"]["value"] == c.DATASOURCE_UIDS[kind]
    for name in {"service", "route", "model", "source"} & variables.keys():
        assert variables[name]["type"] == "query" and variables[name]["includeAll"] and variables[name]["multi"]
        assert variables[name]["query"].startswith("label_values(")


@pytest.mark.parametrize("board", dashboards(), ids=lambda b: b.uid)
def test_every_panel_has_a_unit_thresholds_and_a_description(board):
    for panel in panels(board.model):
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["unit"], panel["title"]
        steps = defaults["thresholds"]["steps"]
        assert steps and steps[0]["value"] is None, panel["title"]
        values = [s["value"] for s in steps[1:]]
        assert values == sorted(values) and all(isinstance(v, (int, float)) for v in values), panel["title"]
        assert len(panel["description"]) > 20, panel["title"]


def test_output_is_byte_identical_across_processes(tmp_path):
    """Two builds in fresh interpreters with different hash seeds write the same bytes."""
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run(
            [sys.executable, "-m", "obsbox", "dashboards", "build", "--out", str(out)],
            check=True,
            env=env,
            capture_output=True,
        )
        outs.append({p.name: p.read_bytes() for p in sorted(out.glob("*.json"))})
    assert outs[0] == outs[1]
    assert set(outs[0]) == {f"{uid}.json" for uid in EXPECTED}
    assert outs[0] == {b.filename: b.text.encode() for b in dashboards()}


def test_committed_json_is_up_to_date():
    committed = build.CHECKOUT_OUT
    stale = build.differences(list(dashboards()), committed)
    assert not stale, "run `obsbox dashboards build` and commit the result:\n" + "\n".join(stale)


def test_build_check_reports_and_write_removes_stale_files(tmp_path):
    built = list(dashboards())
    (tmp_path / "old.json").write_text('{"tags": ["obsbox"]}')
    (tmp_path / "not-ours.json").write_text('{"tags": ["team-x"]}')
    assert "is built by no definition" in " ".join(build.differences(built, tmp_path))
    written, removed = build.write(built, tmp_path)
    assert [p.name for p in removed] == ["old.json"] and len(written) == 5
    assert build.differences(built, tmp_path) == []
    assert (tmp_path / "not-ours.json").exists()
    (tmp_path / built[0].filename).write_text("{}")
    assert build.differences(built, tmp_path) == [f"{tmp_path / built[0].filename} differs from its definition"]


def test_the_grafanalib_generator_gives_the_same_json(tmp_path):
    """The files follow grafanalib's convention, so its own generate-dashboard tool builds them too."""
    board = next(b for b in dashboards() if b.uid == "obsbox-llm-inference")
    out = tmp_path / "out.json"
    subprocess.run(
        [console_script("generate-dashboard") or "generate-dashboard", "-o", str(out), str(board.source)],
        check=True,
        capture_output=True,
    )
    assert json.loads(out.read_text()) == board.model


def test_slo_dashboard_has_one_generated_row_per_slo(tmp_path):
    """A spec with one more SLO (a copy of Availability under another name and service: two SLOs of one
    service on the same series are refused) gets one more row."""
    spec = DEFAULT_SPEC.read_text()
    availability = spec[spec.index("  - name: Availability") :]
    three = tmp_path / "slo.yaml"
    three.write_text(
        spec.rstrip()
        + "\n"
        + availability.replace("name: Availability", "name: CheckoutAvailability\n    service: checkout")
    )
    source = next(b.source for b in dashboards() if b.uid == "obsbox-slo-burn")
    for path in (DEFAULT_SPEC, three):
        with slos.using(path):
            names = [s.name for s in slos.load()]
            model = build.build_one(source).model
        rows = [p["title"] for p in model["panels"] if p["type"] == "row"]
        assert len(rows) == len(names) >= 2
        assert [r.split(" ", 1)[0] for r in rows] == names
        for name in names:
            burn = [
                p for p in model["panels"] if p["title"] == "Burn rate" and f'slo="{name}"' in p["targets"][0]["expr"]
            ]
            assert len(burn) == 1
            windows = [t["expr"].split("{", 1)[0].rsplit("rate", 1)[1] for t in burn[0]["targets"]]
            assert windows == ["5m", "30m", "1h", "2h", "6h", "1d", "3d"]
            lines = [s["value"] for s in burn[0]["fieldConfig"]["defaults"]["thresholds"]["steps"][1:]]
            assert lines == sorted(f for f, _long, _short in (t for v in c.BURN_THRESHOLDS.values() for t in v))
            assert burn[0]["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"


def test_the_burn_dashboard_shows_every_alert_and_whether_data_arrives_for_other_specs():
    """Built from the calendar, gauges and features specs: a row per SLO, whose alert lanes include
    SLONoData (and SLOBurnRate and the policy's steps where the SLO has them), and a stat saying
    whether its SLI's data arrives."""
    for path, board in zip(SLO_SPECS, burn_dashboards(), strict=True):
        names = [s.name for s in slo.load(path)]
        rows = [panel["title"].split(" ", 1)[0] for panel in board.model["panels"] if panel["type"] == "row"]
        assert rows == names, path
        for one in slo.load(path):
            mine = [panel for panel in board.model["panels"] if f'slo="{one.name}"' in str(panel.get("targets"))]
            (alerts,) = [panel for panel in mine if panel["title"] == "Alerts"]
            expr = alerts["targets"][0]["expr"]
            assert c.SLO_NO_DATA_ALERT in expr and c.SLO_ALERT in expr
            assert (c.SLO_BURN_RATE_ALERT in expr) == bool(one.alerts)
            assert all(step.name in expr for step in one.policy or ())
            (data,) = [panel for panel in mine if panel["title"] == "SLI data"]
            assert EVENTS_RATE in data["targets"][0]["expr"]
            assert data["options"]["reduceOptions"]["calcs"] == ["lastNotNull"]
            texts = data["fieldConfig"]["defaults"]["mappings"][0]["options"]
            assert texts["0"]["text"] == "missing" and texts["1"]["text"] == "receiving"


def test_a_string_datasource_is_refused():
    grid = p.Grid()
    legacy = g.TimeSeries(
        title="legacy", dataSource="Prometheus", description="the old way", unit="s", thresholds=p.steps()
    )
    grid.add(legacy)
    board = p.dashboard(uid="obsbox-test-legacy", title="t", description="d", grid=grid, variables=[])
    with pytest.raises(DashboardError, match="Grafana 11 needs an object"):
        board.to_json_data()
    grid = p.Grid()
    grid.add(g.TimeSeries(title="none", description="no datasource", unit="s", thresholds=p.steps()))
    board = p.dashboard(uid="obsbox-test-legacy", title="t", description="d", grid=grid, variables=[])
    with pytest.raises(DashboardError, match=r"panel 'none' has no \{type, uid\} datasource"):
        board.to_json_data()


def test_a_panel_without_description_or_with_a_duplicate_key_is_refused():
    with pytest.raises(DashboardError, match="needs a description"):
        p.timeseries("x", " ", [q.REPLY_P95], unit="s", thresholds=p.steps())
    grid = p.Grid()
    panel = p.timeseries("x", "a description", [q.REPLY_P95], unit="s", thresholds=p.steps())
    grid.add(panel)
    with pytest.raises(DashboardError, match="two panels have the key 'x'"):
        grid.add(panel)
    with pytest.raises(DashboardError, match="must increase"):
        p.steps((2, "red"), (1, "yellow"))


def test_definitions_are_package_data():
    """The *.dashboard.py files are not modules setuptools would find; pyproject ships them as data."""
    pyproject = (Path(build.__file__).parents[1] / "pyproject.toml").read_text()
    assert re.search(r'^"obsbox\.dashboards" = \[[^]]*"\*\.dashboard\.py"', pyproject, re.MULTILINE)
    shipped = importlib.resources.files("obsbox.dashboards")
    assert sorted(f.name for f in shipped.iterdir() if f.name.endswith(".dashboard.py")) == sorted(
        b.source.name for b in dashboards()
    )
