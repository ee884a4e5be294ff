"""Label sets that PromQL matchers select: for test series a selector counts (or skips), and to find two
SLOs whose SLIs count the same series.

A label value is found among a few candidates (the matchers' own values, common status and outcome
words, the empty value of a missing label) and checked against every matcher as Prometheus does
(regular expressions anchored at both ends), so what is returned is always right; ``None`` means no
candidate fits, not that no value could.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from obsbox.slo.selectors import Matcher, Selector

GOOD_VALUES = ("200", "ok", "404", "stop", "500", "error", "other")
BAD_VALUES = ("500", "error", "503", "200", "ok", "other")
_NEGATED = {"=": "!=", "!=": "=", "=~": "!~", "!~": "=~"}


def accepts(matcher: Matcher, value: str) -> bool:
    """Whether ``matcher`` selects a series whose label has ``value`` ("" for a missing label)."""
    if matcher.op in ("=", "!="):
        return (value == matcher.value) == (matcher.op == "=")
    try:
        found = re.fullmatch(matcher.value, value) is not None
    except re.error:
        return False
    return found == (matcher.op == "=~")


def negated(matcher: Matcher) -> Matcher:
    """The matcher selecting exactly the values ``matcher`` does not."""
    return Matcher(matcher.label, _NEGATED[matcher.op], matcher.value)


def label_set(matchers: Iterable[Matcher], values: Sequence[str] = GOOD_VALUES) -> dict[str, str] | None:
    """Labels that every matcher selects (trying ``values`` before the matchers' own), or None."""
    by_label: dict[str, list[Matcher]] = {}
    for matcher in matchers:
        by_label.setdefault(matcher.label, []).append(matcher)
    out: dict[str, str] = {}
    for label, group in by_label.items():
        exact = [m.value for m in group if m.op == "="]
        pieces = [p for m in group if m.op == "=~" for p in m.value.split("|")]
        value = next((v for v in (*exact, *values, *pieces, "") if all(accepts(m, v) for m in group)), None)
        if value is None:
            return None
        if value:
            out[label] = value
    return out


def common_series(a: Selector, b: Selector) -> Selector | None:
    """A series both selectors select (as a selector of its labels), or None."""
    if a.metric != b.metric:
        return None
    labels = label_set((*a.matchers, *b.matchers))
    if labels is None:
        return None
    return Selector(a.metric, tuple(Matcher(k, "=", v) for k, v in sorted(labels.items())))
