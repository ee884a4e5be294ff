"""What the LLM sources file says about each signal, for the descriptions of the panels that read it.

The text comes from ``obsbox/llm/sources.yaml`` (through :func:`obsbox.llm.load`), so each panel says
which sources record its signal, which lack it and why, in the mapping's own words, and cannot drift
from the rules ``obsbox llm rules`` generates from the same file.
"""

from __future__ import annotations

from functools import cache

from obsbox import llm
from obsbox.dashboards.panels import DashboardError


@cache
def sources() -> tuple[llm.Source, ...]:
    return tuple(llm.load())


def lacking(signal: str) -> dict[str, str]:
    """The sources without ``signal``, each with the reason the sources file gives."""
    if signal not in llm.SIGNALS:
        raise DashboardError(f"unknown LLM signal {signal!r}; obsbox.llm.SIGNALS has {', '.join(llm.SIGNALS)}")
    return {s.name: s.missing[signal] for s in sources() if signal in s.missing}


def about(signal: str, label: str = "") -> str:
    """One paragraph: the sources that record ``signal`` (with their notes), and those that lack it and why."""
    gaps = lacking(signal)
    recorded = [s for s in sources() if signal in s.signals]
    names = ", ".join(s.name for s in recorded) or "no source"
    notes = [f"{s.name}: {s.signals[signal].note}" for s in recorded if s.signals[signal].note]
    text = f"{label}: recorded" if label else "Recorded"
    text += f" for {names}" + (f" ({'; '.join(notes)})" if notes else "") + "."
    if gaps:
        text += " No data from " + "; ".join(f"{name} ({why})" for name, why in gaps.items()) + "."
    return text
