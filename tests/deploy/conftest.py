"""Fixtures for deploy/kubernetes: the manifests as written, and as kustomize renders them.

No cluster runs here. The manifests are validated against the Kubernetes API schemas
(kubernetes-validate, strict), rendered by the kustomize built into kubectl, and cross-checked
against the collector, bridge and Helm configs they run. What stays unverified is printed at the
end of the run (``UNVERIFIED``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE_DIR = REPO / "deploy" / "kubernetes"
HELM_DIR = KUSTOMIZE_DIR / "helm"
COLLECTOR_DIR = REPO / "collector"
# The newest Kubernetes release whose schemas kubernetes-validate ships.
KUBERNETES_VERSION = "1.37.0"

UNVERIFIED = """\
deploy/kubernetes: validated and cross-checked statically, NOT applied (no cluster here). Unverified:
  - that the pods start: images pulled, probes passing, the bridge reading root:root 0640 pod logs
    as UID 0 without capabilities, the collectors accepting every config key (`otelcol-contrib
    validate` would);
  - the loadbalancing exporter's k8s resolver and k8sattributes working with the RBAC given;
  - the Helm values against the charts' templates (`helm template` was not run: no helm, no charts
    here); only their parsing and the names, ports and UIDs they share with the manifests are checked;
  - Pod Security admission, node taints, and data flowing end to end in a cluster;
  - autoscaling/: KEDA (2.20) and prometheus-adapter acting on these objects: their controllers are not
    run; the objects, keys, names and queries are checked against their sources, the queries' answers
    under promtool."""


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


@pytest.fixture(scope="session")
def kustomization() -> dict[str, Any]:
    return yaml.safe_load((KUSTOMIZE_DIR / "kustomization.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def resources(kustomization) -> list[dict[str, Any]]:
    """Every object of the files the kustomization lists, as written."""
    return [doc for name in kustomization["resources"] for doc in load_all(KUSTOMIZE_DIR / name)]


@pytest.fixture(scope="session")
def rendered() -> list[dict[str, Any]]:
    """``kubectl kustomize deploy/kubernetes``: what ``kubectl apply -k`` would send."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl (with its built-in kustomize) is needed to render deploy/kubernetes: install kubectl")
    result = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZE_DIR)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


def workload(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The DaemonSet or Deployment called ``name``."""
    (found,) = [d for d in docs if d["kind"] in ("DaemonSet", "Deployment") and d["metadata"]["name"] == name]
    return found


def container(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (only,) = workload(docs, name)["spec"]["template"]["spec"]["containers"]
    return only


def env_of(ctr: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in ctr.get("env", []) if "value" in e}


def pytest_terminal_summary(terminalreporter):
    """Say what these tests could not check, whenever any of them ran."""
    reports = [rep for key in ("passed", "failed", "error") for rep in terminalreporter.stats.get(key, [])]
    if any(getattr(rep, "nodeid", "").startswith("tests/deploy/") for rep in reports):
        terminalreporter.write_sep("-", "UNVERIFIED (deploy)")
        terminalreporter.write_line(UNVERIFIED)
