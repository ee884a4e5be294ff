"""Run the vendors' Lezer grammars (PromQL, LogQL, TraceQL) over many queries in one Node process.

The grammars are the npm packages pinned in ``tests/grammars/package.json`` (installed with
``npm ci --prefix tests/grammars``): ``@prometheus-io/lezer-promql`` (Prometheus' UI and Grafana's
Prometheus editor), ``@grafana/lezer-logql`` and ``@grafana/lezer-traceql`` (Grafana's Loki and Tempo
editors). Lezer never throws on bad input; it leaves error nodes in the tree, and ``parse.mjs``
reports where they are.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "parse.mjs"
LANGS = ("promql", "logql", "traceql")


@dataclass(frozen=True)
class Shipped:
    """One query the project ships, where it sits, and the text the parser sees."""

    where: str
    lang: str
    expr: str


@dataclass(frozen=True)
class ParseError:
    """An error node: its offset in the expression and the grammar node it sits in."""

    offset: int
    context: str

    def show(self, expr: str) -> str:
        line = expr.count("\n", 0, self.offset) + 1
        column = self.offset - (expr.rfind("\n", 0, self.offset) + 1) + 1
        pointer = expr[max(0, self.offset - 30) : self.offset] + " <HERE> " + expr[self.offset : self.offset + 30]
        return f"line {line}, column {column} (in {self.context or 'top level'}): {pointer!r}"


def node() -> str:
    binary = shutil.which("node")
    if binary is None:
        pytest.fail("node is not installed (Debian packages nodejs and npm); scripts/test installs them")
    if not (HERE / "node_modules" / "@grafana" / "lezer-logql").is_dir():
        pytest.fail("the grammar packages are not installed: run `npm ci --prefix tests/grammars`")
    return binary


def parse_all(queries: list[Shipped]) -> list[list[ParseError]]:
    """The error nodes of every query, in order; one Node process for all of them."""
    unknown = {q.lang for q in queries} - set(LANGS)
    if unknown:
        raise ValueError(f"no grammar for {sorted(unknown)}; known: {LANGS}")
    payload = json.dumps([{"lang": q.lang, "expr": q.expr} for q in queries])
    result = subprocess.run(
        [node(), str(SCRIPT)], input=payload, capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        pytest.fail(f"parse.mjs failed:\n{result.stderr}")
    found = json.loads(result.stdout)
    return [[ParseError(e["from"], e["context"]) for e in errors] for errors in found]
