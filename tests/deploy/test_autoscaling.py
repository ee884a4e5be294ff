"""deploy/kubernetes/autoscaling: KEDA's ScaledObjects, the HPAs and prometheus-adapter's rules, checked
against each project's own definitions, against each other and against the autoscaling rules.

- The HPAs: kubernetes-validate, strict. The ScaledObjects: KEDA's CRD schema (v2.20.2, copied under
  ``schemas/``) made strict as the API server's strict field validation is (an unknown field is an
  error), their metadata as Kubernetes' ObjectMeta, and the CRD's CEL rule by hand.
- The prometheus trigger's metadata keys: KEDA's ``prometheusMetadata`` (v2.20.2,
  ``pkg/scalers/prometheus_scaler.go``). The adapter's rules: its config structs' keys (v0.12.0,
  ``pkg/config/config.go``), its metric naming (Go's ``Regexp.ExpandString``) and its query template
  filled as ``pkg/naming/metrics_query.go`` fills it for an External metric.
- Every query parses with Prometheus' own parser (``promtool check rules``), and each one answers one
  series (KEDA refuses more) with the same value as its counterpart in the other variant, under
  ``promtool test rules`` fed vLLM's and DCGM's expositions through the LLM and autoscaling rules.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from obsbox import conventions
from obsbox.llm import autoscaling
from obsbox.llm.autoscaling import SCALING_SIGNALS
from tests.deploy.conftest import HELM_DIR, KUBERNETES_VERSION, KUSTOMIZE_DIR, load_all
from tests.deploy.test_helm_values import service_url, values
from tests.llm.test_autoscaling import SERVED, both_rule_files, vllm_served_as
from tests.llm.test_rules import case, text
from tests.slo.scenarios import promtool, run_rule_tests

AUTOSCALING_DIR = KUSTOMIZE_DIR / "autoscaling"
KEDA_SCHEMA = Path(__file__).parent / "schemas" / "keda-v2.20.2-scaledobject.yaml"
# KEDA v2.20.2, pkg/scalers/prometheus_scaler.go: prometheusMetadata's `keda:"name=..."` tags read from
# the trigger's metadata, and the ones without `optional` or a default.
KEDA_PROMETHEUS_KEYS = {
    "serverAddress",
    "query",
    "queryParameters",
    "threshold",
    "activationThreshold",
    "namespace",
    "customHeaders",
    "ignoreNullValues",
    "unsafeSsl",
    "awsRegion",
    "timeout",
    "identityOwner",
}
KEDA_PROMETHEUS_REQUIRED = {"serverAddress", "query", "threshold"}
# prometheus-adapter v0.12.0, pkg/config/config.go: the yaml keys of DiscoveryRule and the structs in it.
ADAPTER_RULE_KEYS = {"seriesQuery", "seriesFilters", "resources", "name", "metricsQuery"}
ADAPTER_NESTED_KEYS = {
    "resources": {"template", "overrides", "namespaced"},  # ResourceMapping
    "name": {"matches", "as"},  # NameMapping
}
ADAPTER_FILTER_KEYS = {"is", "isNot"}  # RegexFilter
# A Kubernetes label value (apimachinery's validation.IsValidLabelValue).
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
KEDA_QUERY = re.compile(r'(sum|max)\((obsbox:[a-z0-9_:]+)\{model="([^"]+)"\}\)')
POOLS = ("decode", "prefill")


def manifests(name: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in load_all(AUTOSCALING_DIR / name)}


@pytest.fixture(scope="module")
def scaled_objects() -> dict[str, dict[str, Any]]:
    return manifests("keda.yaml")


@pytest.fixture(scope="module")
def hpas() -> dict[str, dict[str, Any]]:
    return manifests("hpa.yaml")


@pytest.fixture(scope="module")
def adapter() -> dict[str, Any]:
    return yaml.safe_load((HELM_DIR / "prometheus-adapter-values.yaml").read_text(encoding="utf-8"))


def strict(schema: Any) -> Any:
    """The schema with every object that lists its properties refusing any other key."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def keda_validator() -> jsonschema.protocols.Validator:
    schema = strict(yaml.safe_load(KEDA_SCHEMA.read_text(encoding="utf-8")))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def keda_errors(validator: jsonschema.protocols.Validator, doc: dict[str, Any]) -> list[str]:
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    spec = doc["spec"]
    if spec.get("minReplicaCount", 0) > spec.get("maxReplicaCount", 100):  # the CRD's x-kubernetes-validations
        errors.append("spec: minReplicaCount must be less than or equal to maxReplicaCount")
    return errors


def test_the_scaled_objects_are_valid_against_kedas_crd_schema(scaled_objects, keda_validator):
    assert set(scaled_objects) == {f"llm-{pool}" for pool in POOLS}
    for name, doc in scaled_objects.items():
        assert (doc["apiVersion"], doc["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
        assert keda_errors(keda_validator, doc) == [], name
        meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}
        kubernetes_validate.validate(meta, KUBERNETES_VERSION, strict=True)


def test_kedas_schema_made_strict_rejects_an_unknown_field_a_wrong_type_and_min_above_max(
    scaled_objects, keda_validator
):
    doc = copy.deepcopy(scaled_objects["llm-decode"])
    doc["spec"]["maxReplicas"] = 8  # the HPA's name, not KEDA's
    assert any("maxReplicas" in e for e in keda_errors(keda_validator, doc))
    doc = copy.deepcopy(scaled_objects["llm-decode"])
    doc["spec"]["triggers"][0]["metadata"]["threshold"] = 0.8  # metadata values are strings
    assert keda_errors(keda_validator, doc)
    doc = copy.deepcopy(scaled_objects["llm-decode"])
    doc["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]["stabilisationWindowSeconds"] = 1
    assert keda_errors(keda_validator, doc)
    doc = copy.deepcopy(scaled_objects["llm-decode"])
    doc["spec"]["minReplicaCount"] = 9
    assert keda_errors(keda_validator, doc) == ["spec: minReplicaCount must be less than or equal to maxReplicaCount"]


def test_the_prometheus_triggers_use_kedas_keys_and_read_one_autoscaling_series_of_their_pool(scaled_objects):
    records = {s.record: s for s in SCALING_SIGNALS}
    for name, doc in scaled_objects.items():
        for trigger in doc["spec"]["triggers"]:
            meta = trigger["metadata"]
            assert trigger["type"] == "prometheus", name
            assert KEDA_PROMETHEUS_REQUIRED <= set(meta) <= KEDA_PROMETHEUS_KEYS, (name, set(meta))
            assert trigger["metricType"] in ("Value", "AverageValue"), name  # Utilization is for CPU and memory
            float(meta["threshold"])
            match = KEDA_QUERY.fullmatch(meta["query"])
            assert match, (name, meta["query"])
            assert records[match[2]].pool == name.removeprefix("llm-"), (name, match[2])


def test_the_hpas_are_valid_against_the_kubernetes_schemas_and_select_with_label_values(hpas):
    assert set(hpas) == {f"llm-{pool}" for pool in POOLS}
    for name, hpa in hpas.items():
        kubernetes_validate.validate(hpa, KUBERNETES_VERSION, strict=True)
        for metric in hpa["spec"]["metrics"]:
            assert metric["type"] == "External", name
            for value in metric["external"]["metric"]["selector"]["matchLabels"].values():
                assert len(value) <= 63 and LABEL_VALUE.fullmatch(value), (name, value)
    broken = copy.deepcopy(hpas["llm-decode"])
    broken["spec"]["metrics"][0]["external"]["target"]["averageUtilisation"] = 80
    with pytest.raises(kubernetes_validate.ValidationError, match="averageUtilisation"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_adapter_rules_use_its_config_keys(adapter):
    assert adapter["rules"]["default"] is False and adapter["rules"]["custom"] == []
    assert adapter["rules"]["external"]
    for rule in adapter["rules"]["external"]:
        assert set(rule) <= ADAPTER_RULE_KEYS, set(rule) - ADAPTER_RULE_KEYS
        for key, allowed in ADAPTER_NESTED_KEYS.items():
            assert set(rule.get(key, {})) <= allowed, (key, set(rule[key]) - allowed)
        for regex_filter in rule.get("seriesFilters", []):
            assert len(set(regex_filter) & ADAPTER_FILTER_KEYS) == 1 == len(regex_filter), regex_filter
        # The series are per model, without a namespace label: the HPA's namespace must not be added.
        assert rule["resources"]["namespaced"] is False


def adapter_name(rule: dict[str, Any], series: str) -> str | None:
    """The External metric's name for a series, as the adapter's metricNamer makes it (None: no match).

    Go's ExpandString reads "$1_" as the group named "1_"; only the "${1}" form is unambiguous.
    """
    template = rule["name"]["as"]
    assert not re.search(r"\$(?!\{\d+\})", template), f"use ${{N}} in {template!r}"
    match = re.search(rule["name"]["matches"], series)
    return None if match is None else re.sub(r"\$\{(\d+)\}", lambda g: match[int(g[1])], template)


def series_selected(rule: dict[str, Any], names: list[str] | None = None) -> list[str]:
    """The names (default: the autoscaling series') that the rule's seriesQuery selects (an anchored regex)."""
    (pattern,) = re.findall(r'__name__=~"([^"]+)"', rule["seriesQuery"])
    return [name for name in names or [s.record for s in SCALING_SIGNALS] if re.fullmatch(pattern, name)]


def metric_queries(hpas, adapter) -> dict[str, str]:
    """Each HPA metric's name and the PromQL the adapter sends for it, per its metrics_query.go."""
    (rule,) = adapter["rules"]["external"]
    by_name = {adapter_name(rule, series): series for series in series_selected(rule)}
    out = {}
    for hpa in hpas.values():
        for metric in hpa["spec"]["metrics"]:
            name = metric["external"]["metric"]["name"]
            labels = metric["external"]["metric"]["selector"]["matchLabels"]
            matchers = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
            template = rule["metricsQuery"].replace("<<.Series>>", by_name[name])
            out[name] = template.replace("<<.LabelMatchers>>", matchers)
    return out


def test_every_autoscaling_series_has_an_adapter_name_that_the_hpas_use(hpas, adapter):
    (rule,) = adapter["rules"]["external"]
    assert series_selected(rule) == [s.record for s in SCALING_SIGNALS]
    names = {adapter_name(rule, s.record) for s in SCALING_SIGNALS}
    assert "obsbox_llm_decode_kv_cache_usage_max" in names and len(names) == len(SCALING_SIGNALS)
    used = {m["external"]["metric"]["name"] for hpa in hpas.values() for m in hpa["spec"]["metrics"]}
    assert used == names
    others = ["obsbox:llm_kv_cache_usage:ratio", "obsbox:llm_requests_waiting:sum", "slo:sli_error:ratio_rate5m"]
    assert series_selected(rule, others) == []  # the LLM rules' own series are not served


def targets(hpas, scaled_objects, adapter) -> dict[str, list[tuple[str, str, float]]]:
    """Per variant and pool: (series, target type, target) of each metric, to compare the two variants."""
    (rule,) = adapter["rules"]["external"]
    by_name = {adapter_name(rule, series): series for series in series_selected(rule)}
    out: dict[str, list[tuple[str, str, float]]] = {}
    for name, doc in scaled_objects.items():
        out[f"keda {name}"] = sorted(
            (KEDA_QUERY.fullmatch(t["metadata"]["query"])[2], t["metricType"], float(t["metadata"]["threshold"]))
            for t in doc["spec"]["triggers"]
        )
    for name, hpa in hpas.items():
        rows = []
        for metric in hpa["spec"]["metrics"]:
            target = metric["external"]["target"]
            value = target["value"] if target["type"] == "Value" else target["averageValue"]
            rows.append((by_name[metric["external"]["metric"]["name"]], target["type"], float(value)))
        out[f"hpa {name}"] = sorted(rows)
    return out


def test_keda_and_the_hpas_scale_the_same_deployments_on_the_same_targets(hpas, scaled_objects, adapter):
    rows = targets(hpas, scaled_objects, adapter)
    for pool in POOLS:
        name = f"llm-{pool}"
        keda, hpa = scaled_objects[name]["spec"], hpas[name]["spec"]
        assert (
            keda["scaleTargetRef"]
            == hpa["scaleTargetRef"]
            == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        )
        assert (keda["minReplicaCount"], keda["maxReplicaCount"]) == (hpa["minReplicas"], hpa["maxReplicas"])
        assert keda["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["behavior"]
        assert rows[f"keda {name}"] == rows[f"hpa {name}"]
    assert rows["keda llm-decode"] == sorted(
        [
            (autoscaling.KV_CACHE.record, "Value", autoscaling.KV_CACHE_LIMIT),
            (autoscaling.WAITING.record, "AverageValue", autoscaling.WAITING_PER_REPLICA),
            (autoscaling.GPU_MEMORY.record, "Value", autoscaling.GPU_MEMORY_LIMIT),
        ]
    )
    assert rows["keda llm-prefill"] == [
        (autoscaling.PREFILL_WAITING.record, "AverageValue", autoscaling.WAITING_PER_REPLICA)
    ]


def test_prefill_is_damped_and_decode_is_not(hpas):
    decode, prefill = (hpas[f"llm-{pool}"]["spec"]["behavior"] for pool in POOLS)
    assert decode["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert prefill["scaleUp"]["stabilizationWindowSeconds"] >= 300
    assert prefill["scaleDown"]["stabilizationWindowSeconds"] > decode["scaleDown"]["stabilizationWindowSeconds"]


def test_both_variants_read_the_prometheus_that_kube_prometheus_stack_installs(scaled_objects, adapter):
    kps = f"http://{service_url(values('kube-prometheus-stack'), 'prometheus', 'obsbox')}"
    port = conventions.PORTS["prometheus"]
    for doc in scaled_objects.values():
        for trigger in doc["spec"]["triggers"]:
            assert trigger["metadata"]["serverAddress"] == f"{kps}:{port}"
    assert (adapter["prometheus"]["url"], adapter["prometheus"]["port"]) == (kps, port)


def test_every_query_parses_with_prometheus_parser(scaled_objects, hpas, adapter, tmp_path):
    (rule,) = adapter["rules"]["external"]
    queries = [t["metadata"]["query"] for doc in scaled_objects.values() for t in doc["spec"]["triggers"]]
    queries += [rule["seriesQuery"], *metric_queries(hpas, adapter).values()]
    rules = [{"record": f"query_{i}", "expr": query} for i, query in enumerate(queries)]
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]}))
    result = promtool("check", "rules", "queries.yml", cwd=tmp_path)
    assert result.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in result.stdout, (
        result.stdout + result.stderr
    )
    (tmp_path / "broken.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "q", "rules": [{"record": "x", "expr": "max(a{model=})"}]}]})
    )
    assert promtool("check", "rules", "broken.yml", cwd=tmp_path).returncode == 1


def test_each_query_answers_one_series_and_both_variants_read_the_same_values(scaled_objects, hpas, adapter, tmp_path):
    """vLLM (KV cache 0.4375, 3 waiting) and DCGM through the rules: KEDA's queries and the adapter's."""
    keda = {
        KEDA_QUERY.fullmatch(t["metadata"]["query"])[2]: t["metadata"]["query"]
        for doc in scaled_objects.values()
        for t in doc["spec"]["triggers"]
    }
    (rule,) = adapter["rules"]["external"]
    by_name = {adapter_name(rule, series): series for series in series_selected(rule)}
    checks = []
    for name, query in metric_queries(hpas, adapter).items():
        series = by_name[name]
        assert KEDA_QUERY.fullmatch(keda[series])[3] == SERVED
        checks += [
            {"expr": f"count({expr})", "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 1}]}
            for expr in (query, keda[series])
        ]
        checks.append(
            {
                "expr": f"({query}) == bool ({keda[series]})",
                "eval_time": "10m",
                "exp_samples": [{"labels": "{}", "value": 1}],
            }
        )
    exposition = vllm_served_as(SERVED) + text("dcgm.prom")
    run_rule_tests(tmp_path, both_rule_files(), [case("vllm+dcgm", exposition, checks)])


def test_the_autoscalers_are_not_in_the_kustomization(kustomization):
    """kubectl apply -k must work where KEDA's CRDs and the adapter are not installed."""
    assert not [name for name in kustomization["resources"] if name.startswith("autoscaling")]
