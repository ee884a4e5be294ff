"""Load every ``*.dashboard.py`` (grafanalib's convention: a module-level ``dashboard``) and write its JSON.

The JSON is written with sorted keys and a fixed indent, so the same definitions give the same bytes
on every run and on every machine; the file is named after the dashboard's UID.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from obsbox.dashboards.panels import TAG, DashboardError, ObsboxDashboard

DEFINITIONS = Path(__file__).resolve().parent  # the *.dashboard.py files ship next to this module
SUFFIX = ".dashboard.py"
# Where compose provisions the dashboards from, when obsbox runs from a source checkout (an editable
# install: dashboards/ is then a folder of the repository). An installed wheel has no such folder.
CHECKOUT = DEFINITIONS.parent
CHECKOUT_OUT = CHECKOUT / "compose" / "grafana" / "dashboards"


def in_checkout() -> bool:
    """Whether these dashboards are the ones of a source checkout, next to its compose/ folder."""
    return (CHECKOUT / "pyproject.toml").is_file() and CHECKOUT_OUT.is_dir()


@dataclass(frozen=True)
class Built:
    source: Path
    uid: str
    title: str
    model: dict
    text: str

    @property
    def filename(self) -> str:
        return f"{self.uid}.json"


def definition_files(directory: Path = DEFINITIONS) -> list[Path]:
    return sorted(directory.glob(f"*{SUFFIX}"))


def load(path: Path) -> ObsboxDashboard:
    """Run one definition file and return its ``dashboard``."""
    name = "obsbox.dashboards._definitions." + path.name[: -len(SUFFIX)].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DashboardError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    board = getattr(module, "dashboard", None)
    if not isinstance(board, ObsboxDashboard):
        raise DashboardError(
            f"{path}: define a module-level `dashboard` built with obsbox.dashboards.panels.dashboard(...)"
        )
    return board


def ours(directory: Path) -> list[Path]:
    """The JSON files in ``directory`` that are obsbox dashboards (tagged ``obsbox``)."""
    found = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            model = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            continue
        if isinstance(model, dict) and TAG in model.get("tags", []):
            found.append(path)
    return found


def render(model: dict) -> str:
    return json.dumps(model, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def build_one(path: Path) -> Built:
    try:
        model = load(path).to_json_data()
    except DashboardError as exc:
        raise DashboardError(f"{path.name}: {exc}") from exc
    return Built(source=path, uid=model["uid"], title=model["title"], model=model, text=render(model))


def build_all(directory: Path = DEFINITIONS) -> list[Built]:
    files = definition_files(directory)
    if not files:
        raise DashboardError(f"no *{SUFFIX} files in {directory}")
    built = [build_one(path) for path in files]
    seen: dict[str, Path] = {}
    for item in built:
        if item.uid in seen:
            raise DashboardError(
                f"{item.source.name} and {seen[item.uid].name} both use the dashboard UID {item.uid!r}"
            )
        if not 8 <= len(item.uid) <= 40:
            raise DashboardError(f"{item.source.name}: a dashboard UID must be 8 to 40 characters, not {item.uid!r}")
        seen[item.uid] = item.source
    return built


def write(built: list[Built], out: Path) -> tuple[list[Path], list[Path]]:
    """Write every dashboard into ``out``; remove obsbox dashboards there that no definition builds any more.

    Returns (written, removed). JSON files that are not obsbox dashboards are left alone.
    """
    out.mkdir(parents=True, exist_ok=True)
    wanted = {item.filename for item in built}
    removed = [stale for stale in ours(out) if stale.name not in wanted]
    for stale in removed:
        stale.unlink()
    written = []
    for item in built:
        target = out / item.filename
        target.write_text(item.text, encoding="utf-8")
        written.append(target)
    return written, removed


def differences(built: list[Built], out: Path) -> list[str]:
    """What ``write(built, out)`` would change: files missing, different, or no longer built."""
    wanted = {item.filename: item.text for item in built}
    present = {path.name for path in ours(out)} | {name for name in wanted if (out / name).is_file()}
    out_of_date = [
        f"{out / name} is missing" if name not in present else f"{out / name} differs from its definition"
        for name, text in sorted(wanted.items())
        if name not in present or (out / name).read_text(encoding="utf-8") != text
    ]
    return out_of_date + [f"{out / name} is built by no definition" for name in sorted(present - wanted.keys())]
