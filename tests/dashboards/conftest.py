"""Say what the dashboard tests could not check, whenever any of them ran."""

from __future__ import annotations

UNVERIFIED = """\
dashboards: Grafana, Loki and Tempo cannot run here. Still unverified:
  - LogQL and TraceQL: parsed by Grafana's Lezer grammars (tests/grammars), labels checked against a
    double of Loki's OTLP mapping; no Loki or Tempo parsed or ran them;
  - rendering: the JSON is checked against the dashboard model's structure (gridPos, ids, targets with
    refId and {type, uid} datasources, units, thresholds, no overlaps), but no Grafana drew the panels
    (heatmap options, state-timeline mappings, the table's merge transformation, variable queries);
  - exemplar links to Tempo: the heatmap asks for exemplars, and Prometheus returns them with trace IDs
    (slow test); the link itself is the datasource's exemplarTraceIdDestinations, in provisioning;
  - SLO alerts' dashboard links: rendered by Prometheus 2.42 (slow test) and by promtool, matched to
    the built dashboard's UID and slo variable; no Grafana opened one (var-slo, from/to in ms);
  - import: run against an HTTP double of Grafana's documented API (/api/folders, /api/dashboards/db,
    401/403/404/409/412), not a real Grafana;
  - PromQL: parsed by promtool 2.42 and run on Prometheus 2.42; compose runs Prometheus 3;
  - LLM serving panels: run on each server's exposition backfilled as series (test_llm_panels), not on a
    server scraped live; live, only the demo's simulated backend (vLLM's names) is scraped, in the slow
    test, which requires its series; the demo source (gateway_*) has no exposition and no data check."""


def pytest_terminal_summary(terminalreporter):
    reports = [rep for key in ("passed", "failed", "error") for rep in terminalreporter.stats.get(key, [])]
    if any(getattr(rep, "nodeid", "").startswith("tests/dashboards/") for rep in reports):
        terminalreporter.write_sep("-", "UNVERIFIED (dashboards)")
        terminalreporter.write_line(UNVERIFIED)
