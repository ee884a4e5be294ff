"""`obsbox dashboards import` against a server that answers as Grafana's HTTP API documents."""

from __future__ import annotations

import base64
import socket

import pytest

from obsbox.cli import main
from obsbox.dashboards import importer
from tests.dashboards.catalog import dashboards
from tests.dashboards.grafana_double import GrafanaDouble, GrafanaState

TOKEN = "glsa_test_token"


@pytest.fixture
def grafana():
    state = GrafanaState(
        tokens={TOKEN: "Editor", "viewer-token": "Viewer"},
        users={"admin": ("s3cret", "Admin")},
    )
    with GrafanaDouble(state) as server:
        yield server


def run(monkeypatch, capsys, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    for name in ("GRAFANA_TOKEN", "GRAFANA_USER", "GRAFANA_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["dashboards", "import", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_import_creates_the_folder_and_every_dashboard_with_overwrite(grafana, monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys, {"GRAFANA_TOKEN": TOKEN}, "--grafana-url", grafana.url, "--folder", "obs")
    assert code == 0, err
    state = grafana.state
    assert [f["title"] for f in state.folders] == ["obs"]
    assert set(state.dashboards) == {b.uid for b in dashboards()}
    posts = [r for r in state.requests if r[1] == "/api/dashboards/db"]
    assert len(posts) == 5
    for _method, _path, body, auth in posts:
        assert auth == f"Bearer {TOKEN}"
        assert body["overwrite"] is True and body["folderUid"] == state.folders[0]["uid"]
        assert body["dashboard"]["id"] is None
        built = next(b.model for b in dashboards() if b.uid == body["dashboard"]["uid"])
        assert body["dashboard"] == {**built, "id": None}
    assert out.count("success: obsbox / ") == 5 and f"{grafana.url}/d/obsbox-slo-burn/" in out

    code, out, err = run(monkeypatch, capsys, {"GRAFANA_TOKEN": TOKEN}, "--grafana-url", grafana.url, "--folder", "obs")
    assert code == 0, err
    assert len(state.folders) == 1, "the existing folder is reused"
    assert {d["version"] for d in state.dashboards.values()} == {2}
    assert "(version 2)" in out


def test_basic_auth_from_user_and_password(grafana, monkeypatch, capsys):
    env = {"GRAFANA_USER": "admin", "GRAFANA_PASSWORD": "s3cret"}
    code, _out, err = run(monkeypatch, capsys, env, "--grafana-url", grafana.url)
    assert code == 0, err
    auth = grafana.state.requests[-1][3]
    assert auth == "Basic " + base64.b64encode(b"admin:s3cret").decode()
    assert {d["folderUid"] for d in grafana.state.dashboards.values()} == {""}  # no --folder: the root


def test_datasource_mapping_points_the_dashboards_at_the_target_uids(grafana, monkeypatch, capsys):
    code, _out, err = run(
        monkeypatch,
        capsys,
        {"GRAFANA_TOKEN": TOKEN},
        "--grafana-url",
        grafana.url,
        "--datasource",
        "prometheus=PROM123",
        "--datasource",
        "loki=LOKI456",
    )
    assert code == 0, err
    for uid, saved in grafana.state.dashboards.items():
        variables = {v["name"]: v for v in saved["dashboard"]["templating"]["list"]}
        assert variables["ds_prometheus"]["current"]["value"] == "PROM123", uid
        if "ds_loki" in variables:
            assert variables["ds_loki"]["current"]["value"] == "LOKI456"
        if "ds_tempo" in variables:
            assert variables["ds_tempo"]["current"]["value"] == "obsbox-tempo"  # not mapped, left as is


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"GRAFANA_TOKEN": "wrong"}, ["401", "GRAFANA_TOKEN", "the token in GRAFANA_TOKEN"]),
        ({"GRAFANA_USER": "admin", "GRAFANA_PASSWORD": "nope"}, ["401", "user 'admin'"]),
        ({}, ["401", "neither GRAFANA_TOKEN nor GRAFANA_USER/GRAFANA_PASSWORD is set"]),
        ({"GRAFANA_TOKEN": "viewer-token"}, ["403", "Editor role", "create the folder 'obs'"]),
    ],
    ids=["bad-token", "bad-password", "no-credentials", "viewer"],
)
def test_auth_errors_name_what_to_fix(grafana, monkeypatch, capsys, env, expected):
    code, _out, err = run(monkeypatch, capsys, env, "--grafana-url", grafana.url, "--folder", "obs")
    assert code == 1
    for text in expected:
        assert text in err
    assert not grafana.state.dashboards


def test_404_when_grafana_is_served_under_a_sub_path(monkeypatch, capsys):
    state = GrafanaState(tokens={TOKEN: "Editor"}, prefix="/grafana")
    with GrafanaDouble(state) as server:
        root = server.url[: -len("/grafana")]
        code, _out, err = run(monkeypatch, capsys, {"GRAFANA_TOKEN": TOKEN}, "--grafana-url", root)
        assert code == 1
        assert "404" in err and "sub-path" in err and "--grafana-url" in err
        code, _out, err = run(monkeypatch, capsys, {"GRAFANA_TOKEN": TOKEN}, "--grafana-url", server.url)
        assert code == 0, err
        assert len(state.dashboards) == 5


def test_412_same_title_in_the_folder_under_another_uid(grafana, monkeypatch, capsys):
    grafana.state.dashboards["someone-elses"] = {
        "dashboard": {"uid": "someone-elses", "title": "obsbox / SLO burn"},
        "folderUid": "",
        "version": 3,
    }
    code, _out, err = run(monkeypatch, capsys, {"GRAFANA_TOKEN": TOKEN}, "--grafana-url", grafana.url)
    assert code == 1
    assert "412" in err and "name-exists" in err and "same title" in err and "--folder" in err


def test_412_plugin_dashboard(grafana, monkeypatch, capsys):
    grafana.state.plugin_uids.add("obsbox-bridge-health")
    code, _out, err = run(monkeypatch, capsys, {"GRAFANA_TOKEN": TOKEN}, "--grafana-url", grafana.url)
    assert code == 1
    assert "412" in err and "plugin-dashboard" in err and "plugin" in err


def test_the_double_answers_412_version_mismatch_without_overwrite(grafana):
    """The documented third 412 reason; the import itself always overwrites, so it never sends this."""
    client = importer.Grafana(grafana.url, importer.Credentials(token=TOKEN))
    model = dashboards()[0].model
    client.request("POST", "/api/dashboards/db", {"dashboard": {**model, "version": 5}, "overwrite": True})
    client.request("POST", "/api/dashboards/db", {"dashboard": {**model, "version": 5}, "overwrite": True})
    with pytest.raises(importer.GrafanaError, match="412 Precondition Failed, status version-mismatch"):
        client.request("POST", "/api/dashboards/db", {"dashboard": {**model, "version": 1}, "overwrite": False})


def test_unreachable_host(monkeypatch, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, _out, err = run(monkeypatch, capsys, {"GRAFANA_TOKEN": TOKEN}, "--grafana-url", f"http://127.0.0.1:{port}")
    assert code == 1
    assert f"cannot reach Grafana at http://127.0.0.1:{port}" in err and "--grafana-url" in err


@pytest.mark.parametrize(
    "case",
    [
        (["--datasource", "prometheus"], {"GRAFANA_TOKEN": TOKEN}, "write KIND=UID"),
        (["--datasource", "mysql=abc"], {"GRAFANA_TOKEN": TOKEN}, "KIND must be one of loki, prometheus, tempo"),
        ([], {"GRAFANA_USER": "admin"}, "GRAFANA_PASSWORD is not"),
    ],
)
def test_bad_options_are_explained(grafana, monkeypatch, capsys, case):
    args, env, expected = case
    code, _out, err = run(monkeypatch, capsys, env, "--grafana-url", grafana.url, *args)
    assert code == 1 and expected in err
    assert not grafana.state.requests


def test_a_url_without_scheme_is_explained(monkeypatch, capsys):
    code, _out, err = run(monkeypatch, capsys, {"GRAFANA_TOKEN": TOKEN}, "--grafana-url", "localhost:3000")
    assert code == 1 and "give the full URL" in err


def test_import_from_a_built_folder(grafana, monkeypatch, capsys, tmp_path):
    assert main(["dashboards", "build", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    code, _out, err = run(
        monkeypatch, capsys, {"GRAFANA_TOKEN": TOKEN}, "--grafana-url", grafana.url, "--from", str(tmp_path)
    )
    assert code == 0, err
    assert len(grafana.state.dashboards) == 5
