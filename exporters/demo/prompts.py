"""The prompt prefixes the load generator asks with and the tuned gateway warms its caches with.

Prefix ``i`` is a fixed phrase; the load generator draws ``i`` from a Zipf-like law, so a few
prefixes are frequent and a warm cache of the top ones gets most hits, as in real completion traffic.
"""

from __future__ import annotations

import bisect
import itertools
import random

PREFIXES = 3000
ZIPF_S = 1.1
_VERBS = ("complete", "explain", "refactor", "document", "test", "fix", "optimise", "rename", "type", "review")
_THINGS = ("function", "class", "query", "handler", "parser", "loop", "test case", "endpoint", "migration", "hook")
_LANGS = ("python", "typescript", "go", "rust", "java", "c#", "sql", "bash", "kotlin", "ruby")
_WEIGHTS = list(itertools.accumulate(1.0 / (i + 1) ** ZIPF_S for i in range(PREFIXES)))


def prefix(index: int) -> str:
    """The text of prefix ``index`` (0 is the most frequent)."""
    verb = _VERBS[index % len(_VERBS)]
    thing = _THINGS[(index // len(_VERBS)) % len(_THINGS)]
    lang = _LANGS[(index // (len(_VERBS) * len(_THINGS))) % len(_LANGS)]
    return f"{verb} this {lang} {thing} #{index}"


def draw(rng: random.Random) -> int:
    """A prefix index, Zipf-distributed over ``PREFIXES``."""
    return bisect.bisect_left(_WEIGHTS, rng.random() * _WEIGHTS[-1])


def frequent(count: int) -> list[str]:
    """The ``count`` most frequent prefixes, for warming a cache."""
    return [prefix(i) for i in range(min(count, PREFIXES))]


def key(text: str) -> str:
    """The cache key of a prompt: its prefix, up to the ``#index`` marker."""
    head, sep, tail = text.partition("#")
    return head + sep + tail.split(" ", 1)[0] if sep else text[:64]
