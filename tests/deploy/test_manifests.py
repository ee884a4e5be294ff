"""deploy/kubernetes against the Kubernetes API schemas, and the references between its objects.

kubernetes-validate checks each object against the OpenAPI schemas of a current Kubernetes release,
strictly (an unknown field is an error). The other tests do what kustomize and the API server would
only find out at apply time: every file listed exists, selectors match the pod labels, Services
reach named container ports, and every ConfigMap, ServiceAccount and RBAC subject named exists.
"""

from __future__ import annotations

import copy
import re

import kubernetes_validate
import pytest

from tests.deploy.conftest import (
    COLLECTOR_DIR,
    KUBERNETES_VERSION,
    KUSTOMIZE_DIR,
    by_kind,
    container,
    env_of,
    workload,
)

WORKLOADS = ("obsbox-bridge", "otel-agent", "otel-gateway")


def validate(doc: dict) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_rendered_object_is_valid_against_the_kubernetes_schemas(rendered):
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in rendered)
    for doc in rendered:
        validate(doc)
    assert {"DaemonSet/obsbox-bridge", "DaemonSet/otel-agent", "Deployment/otel-gateway", "Namespace/obsbox"} <= set(
        kinds
    )
    print(f"{len(kinds)} objects valid against Kubernetes {KUBERNETES_VERSION} (strict): {', '.join(kinds)}")


def test_every_source_file_is_valid_as_written(resources):
    for doc in resources:
        validate(doc)


def test_strict_validation_rejects_an_unknown_field_and_a_wrong_type(rendered):
    daemonset = copy.deepcopy(workload(rendered, "obsbox-bridge"))
    daemonset["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePullPolicyy"):
        validate(daemonset)
    daemonset = copy.deepcopy(workload(rendered, "obsbox-bridge"))
    daemonset["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9465"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(daemonset)


def test_the_kustomization_lists_files_that_exist_and_puts_everything_in_one_namespace(kustomization, rendered):
    listed = [*kustomization["resources"], *(f for gen in kustomization["configMapGenerator"] for f in gen["files"])]
    missing = [name for name in listed if not (KUSTOMIZE_DIR / name).is_file()]
    assert missing == []
    (namespace,) = by_kind(rendered, "Namespace")
    assert namespace == kustomization["namespace"] == "obsbox"
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for doc in rendered:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"]["namespace"] == namespace, doc["metadata"]["name"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "obsbox", doc["metadata"]["name"]


@pytest.mark.parametrize("name", ["agent.yaml", "gateway.yaml"])
def test_the_collector_configs_in_the_kustomization_are_the_collector_folders_files(name):
    """kustomize reads nothing outside its folder, so it keeps copies: they must not drift."""
    copy_ = (KUSTOMIZE_DIR / "config" / name).read_bytes()
    assert copy_ == (COLLECTOR_DIR / name).read_bytes(), f"run: cp collector/{name} deploy/kubernetes/config/{name}"


def test_selectors_match_the_pod_labels(rendered):
    for name in WORKLOADS:
        spec = workload(rendered, name)["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items(), name
    for name, pdb in by_kind(rendered, "PodDisruptionBudget").items():
        labels = workload(rendered, name)["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(), name


def test_each_service_selects_one_workload_and_targets_its_named_ports(rendered):
    for name, service in by_kind(rendered, "Service").items():
        selected = [
            w
            for w in WORKLOADS
            if service["spec"]["selector"].items()
            <= workload(rendered, w)["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert selected == [name], (name, selected)
        ports = {p["name"]: p["containerPort"] for p in container(rendered, name)["ports"]}
        for port in service["spec"]["ports"]:
            assert ports[port["targetPort"]] == port["port"], (name, port)


def test_volumes_name_the_generated_configmaps_and_service_accounts_exist(rendered):
    configmaps = by_kind(rendered, "ConfigMap")
    accounts = by_kind(rendered, "ServiceAccount")
    for name in WORKLOADS:
        pod = workload(rendered, name)["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] in accounts, name
        for volume in pod["volumes"]:
            if "configMap" in volume:
                generated = volume["configMap"]["name"]
                assert generated in configmaps, (name, generated)
                assert re.fullmatch(r"[a-z-]+-config-[a-z0-9]{10}", generated), "kustomize's content hash is missing"


def test_rbac_binds_existing_roles_to_existing_accounts(rendered):
    accounts = by_kind(rendered, "ServiceAccount")
    roles = {("Role", n) for n in by_kind(rendered, "Role")} | {
        ("ClusterRole", n) for n in by_kind(rendered, "ClusterRole")
    }
    bindings = [*by_kind(rendered, "RoleBinding").values(), *by_kind(rendered, "ClusterRoleBinding").values()]
    assert bindings
    for binding in bindings:
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in roles
        for subject in binding["subjects"]:
            assert subject["name"] in accounts
            assert subject["namespace"] == accounts[subject["name"]]["metadata"]["namespace"]


def rules_of(rendered: list[dict], kind: str, name: str) -> set[tuple[str, str, str]]:
    role = by_kind(rendered, kind)[name]
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


def test_the_agent_may_read_what_k8sattributes_and_the_k8s_resolver_watch_and_nothing_more(rendered):
    read = {"get", "list", "watch"}
    cluster = rules_of(rendered, "ClusterRole", "obsbox-otel-agent")
    assert cluster == {(g, r, v) for g, r in (("", "pods"), ("", "namespaces"), ("apps", "replicasets")) for v in read}
    local = rules_of(rendered, "Role", "otel-agent-endpoints")
    assert local == {(g, r, v) for g, r in (("", "endpoints"), ("discovery.k8s.io", "endpointslices")) for v in read}


def test_the_node_agents_run_on_every_node_and_the_gateway_spreads(rendered):
    for name in ("obsbox-bridge", "otel-agent"):
        assert workload(rendered, name)["kind"] == "DaemonSet"
        assert {"operator": "Exists"} in workload(rendered, name)["spec"]["template"]["spec"]["tolerations"]
    gateway = workload(rendered, "otel-gateway")
    assert gateway["kind"] == "Deployment" and gateway["spec"]["replicas"] >= 2
    assert by_kind(rendered, "Service")["otel-gateway"]["spec"]["clusterIP"] == "None"  # headless


def test_every_container_has_requests_limits_probes_and_a_locked_down_security_context(rendered):
    for name in WORKLOADS:
        ctr = container(rendered, name)
        pod = workload(rendered, name)["spec"]["template"]["spec"]
        assert set(ctr["resources"]["requests"]) == {"cpu", "memory"}, name
        assert set(ctr["resources"]["limits"]) == {"cpu", "memory"}, name
        assert ctr["livenessProbe"] and ctr["readinessProbe"], name
        security = ctr["securityContext"]
        assert security["capabilities"] == {"drop": ["ALL"]}, name
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name


def test_only_the_bridge_runs_as_root_and_it_gets_no_capability_back(rendered):
    """Pod logs are root:root 0640; root reads them as their owner, without CAP_DAC_OVERRIDE."""
    for name in ("otel-agent", "otel-gateway"):
        assert workload(rendered, name)["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    bridge = container(rendered, "obsbox-bridge")
    assert workload(rendered, "obsbox-bridge")["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 0
    assert "add" not in bridge["securityContext"]["capabilities"]
    assert bridge["securityContext"]["privileged"] is False


def test_prometheus_annotations_name_each_pods_metrics_port(rendered):
    for name in WORKLOADS:
        annotations = workload(rendered, name)["spec"]["template"]["metadata"]["annotations"]
        ports = {p["containerPort"] for p in container(rendered, name)["ports"]}
        assert annotations["prometheus.io/scrape"] == "true", name
        assert int(annotations["prometheus.io/port"]) in ports, name
        assert annotations["prometheus.io/path"] == "/metrics", name


def test_the_collectors_load_the_file_their_configmap_holds(rendered):
    configmaps = by_kind(rendered, "ConfigMap")
    for name, file in (("otel-agent", "agent.yaml"), ("otel-gateway", "gateway.yaml")):
        ctr = container(rendered, name)
        (mount,) = ctr["volumeMounts"]
        (arg,) = ctr["args"]
        assert arg == f"--config={mount['mountPath']}/{file}"
        (volume,) = workload(rendered, name)["spec"]["template"]["spec"]["volumes"]
        assert configmaps[volume["configMap"]["name"]]["data"][file] == (COLLECTOR_DIR / file).read_text()


def test_the_agent_points_its_exporters_at_the_gateway_service_in_its_own_namespace(rendered):
    env = env_of(container(rendered, "otel-agent"))
    service = by_kind(rendered, "Service")["otel-gateway"]
    grpc = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "otlp-grpc")
    assert env["GATEWAY_SERVICE"] == "otel-gateway.$(POD_NAMESPACE)"
    assert env["GATEWAY_OTLP_ENDPOINT"] == f"dns:///otel-gateway.$(POD_NAMESPACE).svc.cluster.local:{grpc}"
    downward = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container(rendered, "otel-agent")["env"]
        if "valueFrom" in e
    }
    assert downward == {"K8S_NODE_NAME": "spec.nodeName", "POD_NAMESPACE": "metadata.namespace"}
