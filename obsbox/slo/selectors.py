"""PromQL series selectors and label matchers: parsed from a spec, printed back in one canonical form."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

_METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_STRING = r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"""
_MATCHER = re.compile(rf"\s*({_LABEL})\s*(=~|!~|!=|=)\s*({_STRING})\s*")
_SELECTOR = re.compile(rf"\s*({_METRIC})\s*(?:\{{(.*)\}})?\s*", re.DOTALL)
LABEL_NAME = re.compile(_LABEL)
METRIC_NAME = re.compile(_METRIC)


@dataclass(frozen=True)
class Matcher:
    """One label matcher, ``label op "value"``, with op one of ``=``, ``!=``, ``=~``, ``!~``."""

    label: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.label}{self.op}{quote(self.value)}"


@dataclass(frozen=True)
class Selector:
    """A metric name and its matchers: ``metric{a="b",c=~"d"}``."""

    metric: str
    matchers: tuple[Matcher, ...] = ()

    def where(self, *matchers: Matcher) -> Selector:
        """The same selector with ``matchers`` added."""
        return Selector(self.metric, (*self.matchers, *matchers))

    def __str__(self) -> str:
        if not self.matchers:
            return self.metric
        return self.metric + "{" + ",".join(map(str, self.matchers)) + "}"


TARGET = ("job", "instance")  # a scrape target: where a renamed metric's two names are compared


def first_present(inners: Sequence[str], by: Sequence[str] = TARGET, aggregate: str = "sum") -> str:
    """``inners`` aggregated ``by`` each target, the first one a target has winning (``a or b``): a metric
    exposed under its new and its old name at once is counted once, and a mixed fleet still counts all."""
    options = [f"{aggregate} by ({', '.join(by)}) ({inner})" for inner in inners]
    return options[0] if len(options) == 1 else "\n  or\n".join(f"({option})" for option in options)


def num(value: float) -> str:
    """A number as PromQL and humans read it: 0.05, not 0.050000000000000044."""
    return f"{value:.12g}"


def quote(value: str) -> str:
    """A PromQL double-quoted string."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def parse_matcher(text: str) -> Matcher:
    """``route="/v1/chat"`` → Matcher; ValueError saying what is wrong."""
    match = _MATCHER.fullmatch(text)
    if match is None:
        raise ValueError(f'{text!r} is not a label matcher (write label="value", label!="value", =~ or !~)')
    return Matcher(match.group(1), match.group(2), _unquote(match.group(3)))


def parse_selector(text: str) -> Selector:
    """``metric{label="value",...}`` → Selector; ValueError saying what is wrong."""
    match = _SELECTOR.fullmatch(text)
    if match is None:
        raise ValueError(f'{text!r} is not a series selector (write metric_name or metric_name{{label="value"}})')
    metric, body = match.group(1), match.group(2)
    matchers: list[Matcher] = []
    if body is not None:
        rest = body.strip()
        while rest:
            found = _MATCHER.match(rest)
            if found is None:
                raise ValueError(f"{text!r}: cannot read the label matcher at {rest!r}")
            matchers.append(Matcher(found.group(1), found.group(2), _unquote(found.group(3))))
            rest = rest[found.end() :]
            if rest.startswith(","):
                rest = rest[1:].lstrip()
            elif rest:
                raise ValueError(f"{text!r}: expected ',' or '}}' before {rest!r}")
    return Selector(metric, tuple(matchers))


def _unquote(literal: str) -> str:
    value = ast.literal_eval(literal)
    if not isinstance(value, str):
        raise ValueError(f"{literal} is not a string")
    return value
