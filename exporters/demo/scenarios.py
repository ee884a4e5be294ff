"""The two demo scenarios: the slow gateway as found, and the same gateway with its four fixes.

A scenario is only the four switches; what each switch changes is in ``latency.LatencyModel`` and
the simulated backends, so the tuned figures come from the fixes, not from separate numbers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    name: str
    pooled_connections: bool  # reuse TLS sessions and cache connections instead of opening new ones
    warm_cache: bool  # prompt and intent caches warmed with the frequent prompt prefixes, and sized for them
    batched_jwt: bool  # verify JWTs in small batches against a cached key set
    trimmed_context: bool  # drop sourceMap and comments from the editor context

    def describe(self) -> str:
        fixes = [
            name
            for name, on in (
                ("pooled connections", self.pooled_connections),
                ("warm cache", self.warm_cache),
                ("batched JWT verification", self.batched_jwt),
                ("trimmed context", self.trimmed_context),
            )
            if on
        ]
        return f"{self.name}: " + (", ".join(fixes) if fixes else "no fixes applied")


SCENARIOS = {
    "untuned": Scenario(
        "untuned", pooled_connections=False, warm_cache=False, batched_jwt=False, trimmed_context=False
    ),
    "tuned": Scenario("tuned", pooled_connections=True, warm_cache=True, batched_jwt=True, trimmed_context=True),
}


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}: expected one of {', '.join(SCENARIOS)}") from None
