"""The demo LLM gateway, its latency model and scenarios, its legacy JSON log, and the load generator.

``obsbox demo`` runs the gateway with the load generator; ``obsbox load`` runs the load generator
alone. See README.md beside this file for what is simulated and the figures it reaches. Names are
imported on first use, so the CLI does not load uvicorn and the SDK until a command needs them.
"""

from __future__ import annotations

from obsbox.lazy import lazy_exports

_EXPORTS = {
    "DemoGateway": "gateway",
    "GatewayConfig": "gateway",
    "build_gateway": "gateway",
    "parse_chat": "gateway",
    "Dist": "latency",
    "LatencyModel": "latency",
    "LegacyLogWriter": "legacylog",
    "LoadConfig": "load",
    "LoadGenerator": "load",
    "SCENARIOS": "scenarios",
    "Scenario": "scenarios",
    "scenario": "scenarios",
    "GatewayServer": "server",
    "Summary": "summary",
    "percentile": "summary",
}

__all__ = [
    "SCENARIOS",
    "DemoGateway",
    "Dist",
    "GatewayConfig",
    "GatewayServer",
    "LatencyModel",
    "LegacyLogWriter",
    "LoadConfig",
    "LoadGenerator",
    "Scenario",
    "Summary",
    "build_gateway",
    "parse_chat",
    "percentile",
    "scenario",
]


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
