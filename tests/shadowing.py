"""A working directory that holds a directory named ``obsbox``, as a checkout or a project of that name does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

IMPORTED = "the obsbox folder in the working directory was imported instead of the package"


def shadowing_folder(folder: Path) -> Path:
    """``folder`` with an ``obsbox/`` package that fails when imported."""
    (folder / "obsbox").mkdir()
    (folder / "obsbox" / "__init__.py").write_text(f"raise SystemExit({IMPORTED!r})\n")
    return folder


def obsbox_script() -> Path:
    """The ``obsbox`` script pip installed beside this interpreter, as a user runs it."""
    script = Path(sys.executable).with_name("obsbox")
    if not script.is_file():
        pytest.fail(f"no obsbox script beside {sys.executable}: pip install -e . into this environment")
    return script
