"""Permission modes: what the bridge creates (state dir, positions, held links, dead letters,
outputs) is its owner's only, unless a sink's ``mode`` says otherwise: dead letters and outputs
hold whole lines of the source logs, which may be readable by their owner alone."""

from __future__ import annotations

import contextlib
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path) -> None:
    """Create ``path`` for its owner only (missing parents get the usual mode, as ``mkdir -p`` gives)."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)


def parse_mode(value: object) -> int:
    """A permission mode from config: an int (YAML reads ``0640`` as octal) or an octal string."""
    mode = -1
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            mode = int(value.strip(), 8)
    elif isinstance(value, int) and not isinstance(value, bool):
        mode = value
    if not 0 <= mode <= 0o777:
        raise ValueError(f"mode {value!r} is not a permission mode; write it in octal, as 0640 or '0640'")
    return mode
