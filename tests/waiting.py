"""Helpers every test area uses: a free loopback port, and bounded waiting for a condition."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """``check()``'s first truthy value; the test fails, naming ``what``, when ``timeout`` runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")
