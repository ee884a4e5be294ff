"""The Helm values files (deploy/kubernetes/helm) parse, and name the services the manifests use.

The charts themselves are not vendored and no Helm runs here, so the Service names are derived the
way the charts derive them: ``fullnameOverride`` + "-" + component (Loki's and tempo-distributed's
``resourceName`` helpers, kube-prometheus-stack's ``fullname``-prometheus). The links between the
signals are those of the compose stack's Grafana data sources, which the values must repeat.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from obsbox import conventions
from tests.deploy.conftest import HELM_DIR, REPO, by_kind, container, env_of, workload

DATASOURCES = REPO / "compose" / "grafana" / "provisioning" / "datasources" / "datasources.yaml"


def values(name: str) -> dict[str, Any]:
    return yaml.safe_load((HELM_DIR / f"{name}-values.yaml").read_text(encoding="utf-8"))


def service_url(release: dict[str, Any], component: str, namespace: str) -> str:
    return f"{release['fullnameOverride']}-{component}.{namespace}.svc"


@pytest.fixture(scope="module")
def namespace(rendered) -> str:
    (name,) = by_kind(rendered, "Namespace")
    return name


@pytest.fixture(scope="module")
def gateway_env(rendered, namespace) -> dict[str, str]:
    env = env_of(container(rendered, "otel-gateway"))
    return {k: v.replace("$(POD_NAMESPACE)", namespace) for k, v in env.items()}


def test_every_values_file_parses_as_a_mapping():
    files = sorted(HELM_DIR.glob("*.yaml"))
    assert [f.name for f in files] == [
        "kube-prometheus-stack-values.yaml",
        "loki-values.yaml",
        "prometheus-adapter-values.yaml",
        "tempo-values.yaml",
    ]
    for path in files:
        assert isinstance(yaml.safe_load(path.read_text(encoding="utf-8")), dict), path


def test_loki_is_simple_scalable_with_otlp_structured_metadata(gateway_env, namespace):
    loki = values("loki")
    assert loki["deploymentMode"] == "SimpleScalable"
    assert loki["singleBinary"]["replicas"] == 0 and min(loki[t]["replicas"] for t in ("read", "write", "backend")) >= 2
    assert loki["loki"]["limits_config"]["allow_structured_metadata"] is True
    (schema,) = loki["loki"]["schemaConfig"]["configs"]
    assert (schema["schema"], schema["store"]) == ("v13", "tsdb")  # structured metadata needs both
    url = urlsplit(gateway_env["LOKI_OTLP_ENDPOINT"])
    assert url.hostname == f"{service_url(loki, 'gateway', namespace)}.cluster.local"
    assert (url.port, url.path) == (loki["gateway"]["service"]["port"], "/otlp")


def test_tempo_receives_otlp_grpc_where_the_gateway_sends_and_writes_metrics_with_exemplars(gateway_env, namespace):
    tempo = values("tempo")
    assert tempo["traces"]["otlp"]["grpc"]["enabled"] is True
    host, port = gateway_env["TEMPO_OTLP_ENDPOINT"].rsplit(":", 1)
    assert host == f"{service_url(tempo, 'distributor', namespace)}.cluster.local"
    assert int(port) == conventions.PORTS["otlp_grpc"]
    generator = tempo["metricsGenerator"]
    assert generator["enabled"] is True
    (remote_write,) = generator["config"]["storage"]["remote_write"]
    assert remote_write["send_exemplars"] is True
    kps = values("kube-prometheus-stack")
    write = urlsplit(remote_write["url"])
    assert (write.hostname, write.port, write.path) == (
        service_url(kps, "prometheus", namespace),
        conventions.PORTS["prometheus"],
        "/api/v1/write",
    )
    assert kps["prometheus"]["prometheusSpec"]["enableRemoteWriteReceiver"] is True
    processors = tempo["overrides"]["defaults"]["metrics_generator"]["processors"]
    assert {"service-graphs", "span-metrics"} <= set(processors)
    compose_tempo = yaml.safe_load((REPO / "compose" / "tempo" / "tempo.yaml").read_text(encoding="utf-8"))
    assert (
        generator["config"]["registry"]["external_labels"]
        == compose_tempo["metrics_generator"]["registry"]["external_labels"]
    )


def test_prometheus_takes_otlp_from_the_gateway_and_keeps_exemplars(gateway_env, namespace):
    kps = values("kube-prometheus-stack")
    spec = kps["prometheus"]["prometheusSpec"]
    assert spec["enableOTLPReceiver"] is True
    assert spec["enableFeatures"] == ["exemplar-storage"]  # native-histograms is a no-op since 3.9
    assert spec["scrapeNativeHistograms"] is True
    url = urlsplit(gateway_env["PROMETHEUS_OTLP_ENDPOINT"])
    assert url.hostname == f"{service_url(kps, 'prometheus', namespace)}.cluster.local"
    assert (url.port, url.path) == (conventions.PORTS["prometheus"], "/api/v1/otlp")


def test_grafanas_data_sources_are_composes_with_the_cluster_urls(namespace):
    kps = values("kube-prometheus-stack")
    assert kps["grafana"]["sidecar"]["datasources"]["defaultDatasourceEnabled"] is False
    cluster = {ds["uid"]: ds for ds in kps["grafana"]["additionalDataSources"]}
    compose = {ds["uid"]: ds for ds in yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))["datasources"]}
    assert set(cluster) == set(compose) == set(conventions.DATASOURCE_UIDS.values())
    for uid, source in compose.items():
        assert {k: v for k, v in cluster[uid].items() if k != "url"} == {k: v for k, v in source.items() if k != "url"}
    urls = {uid: urlsplit(ds["url"]) for uid, ds in cluster.items()}
    expected = {
        conventions.DATASOURCE_UIDS["prometheus"]: (
            service_url(kps, "prometheus", namespace),
            conventions.PORTS["prometheus"],
        ),
        conventions.DATASOURCE_UIDS["loki"]: (service_url(values("loki"), "gateway", namespace), 80),
        conventions.DATASOURCE_UIDS["tempo"]: (
            service_url(values("tempo"), "query-frontend", namespace),
            conventions.PORTS["tempo"],
        ),
    }
    assert {uid: (u.hostname, u.port) for uid, u in urls.items()} == expected


def test_each_link_between_signals_points_at_a_defined_data_source():
    kps = values("kube-prometheus-stack")
    uids = {ds["uid"] for ds in kps["grafana"]["additionalDataSources"]}
    text = yaml.safe_dump(kps["grafana"]["additionalDataSources"])
    linked = set(re.findall(r"datasourceUid: (\S+)", text))
    assert linked == uids  # each of the three is the target of a link, and no link dangles


def test_images_are_the_versions_compose_runs():
    compose = yaml.safe_load((REPO / "compose" / "docker-compose.yml").read_text(encoding="utf-8"))["services"]
    tag = {name: compose[name]["image"].rsplit(":", 1)[1] for name in ("loki", "tempo", "prometheus", "grafana")}
    kps = values("kube-prometheus-stack")
    assert values("loki")["loki"]["image"]["tag"] == tag["loki"]
    assert values("tempo")["tempo"]["image"]["tag"] == tag["tempo"]
    assert kps["prometheus"]["prometheusSpec"]["image"]["tag"] == tag["prometheus"]
    assert kps["grafana"]["image"]["tag"] == tag["grafana"]


def annotation_label(key: str) -> str:
    """Prometheus' kubernetes_sd meta label for a pod annotation (non-alphanumerics become "_")."""
    return "__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def test_the_annotation_scrape_job_reads_the_annotations_the_pods_carry(rendered):
    (job,) = values("kube-prometheus-stack")["prometheus"]["prometheusSpec"]["additionalScrapeConfigs"]
    read = {label for rule in job["relabel_configs"] for label in rule.get("source_labels", [])}
    for name in ("obsbox-bridge", "otel-agent", "otel-gateway"):
        annotations = workload(rendered, name)["spec"]["template"]["metadata"]["annotations"]
        assert {annotation_label(key) for key in annotations} <= read, name
    keep = next(rule for rule in job["relabel_configs"] if rule["action"] == "keep")
    assert re.fullmatch(keep["regex"], "true")


def test_promtool_accepts_the_scrape_job(tmp_path: Path):
    """The scrape job's relabel rules are Prometheus configuration: Prometheus' own checker must accept them.

    Debian builds Prometheus without Kubernetes service discovery, so its promtool rejects the
    kubernetes_sd_configs key; the job is checked with a static target in its place (the
    kubernetes_sd_configs block itself stays unchecked here).
    """
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool (Debian package prometheus) is needed to check the scrape job")
    jobs = values("kube-prometheus-stack")["prometheus"]["prometheusSpec"]["additionalScrapeConfigs"]
    assert [job["kubernetes_sd_configs"] for job in jobs] == [[{"role": "pod"}]]
    jobs = [
        {
            **{k: v for k, v in job.items() if k != "kubernetes_sd_configs"},
            "static_configs": [{"targets": ["pod:9465"]}],
        }
        for job in jobs
    ]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    result = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    broken = dict(jobs[0], relabel_configs=[{"action": "keepp", "source_labels": ["x"]}])
    config.write_text(yaml.safe_dump({"scrape_configs": [broken]}))
    result = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode != 0
