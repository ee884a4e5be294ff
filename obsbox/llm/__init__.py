"""LLM serving metrics: each stack's names mapped to obsbox's breakdown, and the rules that unify them."""

from obsbox.llm.rules import generate, render, rules
from obsbox.llm.spec import DEFAULT_RULES, DEFAULT_SOURCES, SIGNALS, Mapping, Signal, Source, load

__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_SOURCES",
    "SIGNALS",
    "Mapping",
    "Signal",
    "Source",
    "generate",
    "load",
    "render",
    "rules",
]
