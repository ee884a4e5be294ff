"""Find an installed console script (``locust``, ``generate-dashboard``) beside the interpreter that
runs the tests first: a virtual environment's ``bin/`` is not on PATH unless it was activated."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def console_script(name: str) -> str | None:
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(name, path=search)
