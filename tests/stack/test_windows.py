"""Every time window of the stack agrees with the backfill window, and Loki's log stays quiet.

Loki accepts lines up to ``reject_old_samples_max_age`` old and keeps them ``retention_period``; a
query may span at most ``max_query_length`` (Loki's default, 721h, is shorter than the 31 days the
stack keeps: a label, series or range query over all of it failed on a real Loki 3.7.6 with "the
query time range exceeds the limit"). Tempo keeps traces as long, so a kept line's trace link
resolves. Deletion stays on because, with the tsdb index, every query of a tenant without it logs an
error (grafana/loki#8468); the delete API is then reachable on Loki's port, which is published on
loopback only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.stack.conftest import COMPOSE_DIR, docker_compose, load_yaml
from tests.stack.test_links import duration

REPO = Path(__file__).resolve().parents[2]
LOKI = load_yaml(COMPOSE_DIR / "loki" / "loki.yaml")
TEMPO = load_yaml(COMPOSE_DIR / "tempo" / "tempo.yaml")
HELM = REPO / "deploy" / "kubernetes" / "helm"
LOKI_DEFAULT_MAX_QUERY_LENGTH = "721h"  # pkg/validation/limits.go (v3.7.6): f.Var(&l.MaxQueryLength, ..., 721h)


def test_a_query_may_span_everything_loki_keeps():
    limits = LOKI["limits_config"]
    kept = duration(limits["retention_period"]) + duration(limits["creation_grace_period"])
    assert duration(limits["max_query_length"]) >= kept
    assert duration(LOKI_DEFAULT_MAX_QUERY_LENGTH) < kept, "the default would refuse the window"
    assert duration(limits["retention_period"]) >= duration(limits["reject_old_samples_max_age"])


def test_tempo_keeps_traces_as_long_as_loki_keeps_their_logs():
    retention = TEMPO["backend_scheduler"]["provider"]["compaction"]["compaction"]["block_retention"]
    assert duration(retention) >= duration(LOKI["limits_config"]["retention_period"])


def test_the_kubernetes_values_keep_the_same_windows():
    loki = load_yaml(HELM / "loki-values.yaml")["loki"]["limits_config"]
    tempo = load_yaml(HELM / "tempo-values.yaml")
    assert duration(loki["max_query_length"]) > duration(loki["retention_period"])
    scheduler = tempo["backendScheduler"]["config"]["provider"]["compaction"]["compaction"]
    assert duration(scheduler["block_retention"]) >= duration(loki["retention_period"])


def test_deletion_stays_on_so_queries_log_no_cache_generation_errors():
    assert LOKI["limits_config"].get("deletion_mode", "filter-and-delete") != "disabled"
    assert LOKI["compactor"]["delete_request_store"] == "filesystem"


@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0"])
def test_loki_s_port_with_its_delete_api_is_published_on_loopback_only(env_file, tmp_path, bind):
    env = tmp_path / "bind.env"
    env.write_text(env_file.read_text(encoding="utf-8") + f"\nBIND_ADDRESS={bind}\n")
    result = docker_compose("config", env_file=env)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    (loki,) = services["loki"]["ports"]
    assert published_on(loki) == "127.0.0.1"
    assert published_on(services["grafana"]["ports"][0]) == bind  # the others follow BIND_ADDRESS


def published_on(port: str | dict) -> str:
    """The host address of a rendered port, in docker-compose 1.29's short form (ip:host:container)."""
    return port["host_ip"] if isinstance(port, dict) else str(port).rsplit(":", 2)[0]
