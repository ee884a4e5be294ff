"""SLOs as code: a YAML spec → Prometheus recording rules and multi-window multi-burn-rate alerts.

``load(path)`` reads and validates a spec; ``rules(slos, log_rules)`` builds the rules-file structure
(the SLO groups, the alerts of the log_metrics rules, the GPU autoscaling signals); ``render`` and
``write`` turn it into a deterministic file, written atomically. ``obsbox slo build`` does all three;
``obsbox slo test`` runs the promtool tests ``testgen`` writes for each SLO.
"""

from obsbox.slo.rules import (
    DECODE_QPS,
    ERROR_EVENTS_RATE,
    EVENTS_RATE,
    GPU_MEMORY,
    GPU_SCALE_DOWN_ALERT,
    GPU_SCALE_UP_ALERT,
    render,
    rules,
    slo_windows,
    write,
)
from obsbox.slo.selectors import Matcher, Selector, parse_matcher, parse_selector
from obsbox.slo.spec import DEFAULT_RULES, DEFAULT_SPEC, SLI, SLO, BurnCondition, check, load, loads

__all__ = [
    "DECODE_QPS",
    "DEFAULT_RULES",
    "DEFAULT_SPEC",
    "ERROR_EVENTS_RATE",
    "EVENTS_RATE",
    "GPU_MEMORY",
    "GPU_SCALE_DOWN_ALERT",
    "GPU_SCALE_UP_ALERT",
    "SLI",
    "SLO",
    "BurnCondition",
    "Matcher",
    "Selector",
    "check",
    "load",
    "loads",
    "parse_matcher",
    "parse_selector",
    "render",
    "rules",
    "slo_windows",
    "write",
]
