"""Shared test setup: every test gets a clean working directory and nothing from the user's state."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path, monkeypatch):
    """Keep positions and dead letters out of the user's state dir."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
