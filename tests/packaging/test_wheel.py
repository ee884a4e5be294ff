"""The wheel works anywhere: installed in a fresh venv and run from an empty folder, it needs no
checkout. The core install is lean and says which extra a command needs; the dashboards extra builds
the five dashboards. Slow: it builds the wheel and installs twice (from pip's cache once warm)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

import obsbox
from obsbox.local.receiver import Receiver
from tests.packaging.wheel_env import HEAVY, REPO, Env, build_wheel, install

pytestmark = pytest.mark.slow

LINES = [
    {"time": "2025-01-01T00:00:00Z", "level": "INFO", "msg": "request done", "request_id": "r-1", "duration_ms": 12},
    {"time": "2025-01-01T00:00:01Z", "level": "ERROR", "msg": "upstream timeout", "request_id": "r-2"},
]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def core(tmp_path_factory, wheel) -> Env:
    return install(tmp_path_factory.mktemp("core"), wheel)


@pytest.fixture(scope="module")
def with_dashboards(tmp_path_factory, wheel) -> Env:
    return install(tmp_path_factory.mktemp("dashboards"), wheel, "dashboards")


def test_the_wheel_holds_every_module_and_data_file_and_no_checkout_folder(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    mapped = {"obsbox": REPO / "obsbox", "obsbox/exporters": REPO / "exporters"}
    mapped |= {f"obsbox/{name}": REPO / name for name in ("collector", "dashboards")}
    for prefix, folder in mapped.items():
        for source in folder.rglob("*.py"):
            if "testdata" in source.parts or "__pycache__" in source.parts:
                continue
            inside = f"{prefix}/{source.relative_to(folder).as_posix()}"
            assert inside in names, f"{inside} is missing: list its package in pyproject's [tool.setuptools] packages"
    for data in ("obsbox/py.typed", "obsbox/logrules.yaml", "obsbox/slo/slo.yaml", "obsbox/collector/otelcol.yaml"):
        assert data in names
    assert len([n for n in names if n.endswith(".dashboard.py")]) == 5
    dist_info = f"obsbox-{obsbox.__version__}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert f"\nVersion: {obsbox.__version__}\n" in metadata
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    assert not [n for n in names if n.split("/")[0] in {"tests", "compose", "scripts", "exporters", "dashboards"}]


def test_the_core_install_has_none_of_the_extras(core):
    installed = core.distributions()
    assert "obsbox" in installed and "opentelemetry-proto" in installed
    assert not installed & set(HEAVY), f"the core install pulled in {sorted(installed & set(HEAVY))}"
    where = core.py("import obsbox; print(obsbox.__file__)")
    assert where.stdout.strip().startswith(str(core.root)), where  # the wheel, not the checkout


def test_core_commands_that_need_an_extra_say_which(core):
    for command, extra in (
        (["dashboards", "build", "--out", "out"], "dashboards"),
        (["report", "--prometheus", "http://127.0.0.1:1", "--out", "r.html"], "report"),
        (["demo", "--duration", "1"], "demo"),
        (["up"], "demo"),
    ):
        done = core.obsbox(*command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert f"pip install 'obsbox[{extra}]'" in done.stderr, (command, done.stderr)
    assert not (core.work / "out").exists()


def test_core_bridge_once_to_stdout_and_to_otlp(core):
    (core.work / "app.log").write_text("".join(json.dumps(line) + "\n" for line in LINES))
    # each run its own state dir: positions saved by the first would leave nothing for the second
    done = core.obsbox("bridge", "app.log", "--once", "--no-progress", "--state-dir", "../state-stdout")
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [o["msg"] for o in out] == [line["msg"] for line in LINES]
    assert all(len(o["trace_id"]) == 32 and len(o["span_id"]) == 16 for o in out)

    receiver = Receiver().start()
    try:
        target = f"otlp:{receiver.url}"
        done = core.obsbox(
            "bridge", "app.log", "--once", "--no-progress", "--state-dir", "../state-otlp", "--to", target
        )
        assert done.returncode == 0, done.stderr
        with receiver.lock:
            records = [record for _resource, record in receiver.log_records]
    finally:
        receiver.stop()
    assert sorted(r.trace_id.hex() for r in records) == sorted(o["trace_id"] for o in out)
    assert [json.loads(r.body.string_value) for r in sorted(records, key=lambda r: r.time_unix_nano)] == LINES


def test_core_slo_build_from_an_empty_folder_and_from_the_shipped_spec(core):
    shipped = core.py("from obsbox.slo import DEFAULT_SPEC; print(DEFAULT_SPEC)").stdout.strip()
    assert shipped.startswith(str(core.root)) and Path(shipped).is_file(), shipped
    (core.work / "slo.yaml").write_text(Path(shipped).read_text())
    done = core.obsbox("slo", "build", "slo.yaml", "--out", "rules.yml")
    assert done.returncode == 0, done.stderr
    committed = (REPO / "compose" / "prometheus" / "rules" / "slo.rules.yml").read_text()
    assert (core.work / "rules.yml").read_text() == committed
    done = core.obsbox("slo", "build", shipped)
    assert done.returncode == 0 and done.stdout == committed, done.stderr


def test_the_dashboards_extra_builds_the_five_dashboards_from_an_empty_folder(with_dashboards):
    done = with_dashboards.obsbox("dashboards", "build", "--out", "boards")
    assert done.returncode == 0, done.stderr
    built = sorted((with_dashboards.work / "boards").glob("*.json"))
    committed = sorted((REPO / "compose" / "grafana" / "dashboards").glob("*.json"))
    assert [p.name for p in built] == [p.name for p in committed] and len(built) == 5
    for ours, theirs in zip(built, committed, strict=True):
        assert ours.read_text() == theirs.read_text(), ours.name

    done = with_dashboards.obsbox("dashboards", "build")  # no --out, outside a checkout
    assert done.returncode == 2 and "pass --out DIR" in done.stderr, done.stderr
    assert sorted(p.name for p in with_dashboards.work.iterdir()) == ["boards"]
