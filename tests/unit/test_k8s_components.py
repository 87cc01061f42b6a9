"""deploy/k8s's optional components (monitoring/, ingress/, keda/), read without a cluster.

The custom resources are checked against models generated from their CRDs' published
schemas (cloudcoil's prometheus-operator and keda models, offline): required fields, types,
and no field the CRD does not know (the models drop unknown ones, so a round trip that loses
a key means the CRD would refuse it). Then what the schemas cannot see: the ServiceMonitor
selects the Services with a metrics port and names that port, every alert and the scaler's
query name only series the server registers (a fresh `Metrics` registry, as the dashboard's
test reads it) and `up` for jobs that exist, and each alert's runbook section exists.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pydantic
import pytest
import yaml
from test_dashboard import metric_names, registered
from test_deploy_files import ROOT, assert_known_settings
from test_k8s_manifests import COMPONENTS, CUSTOM_KINDS, GATEWAY, K8S, SERVERS, container, manifests, of

RUNBOOK = (ROOT / "docs/runbook.md").read_text()
# Alerts every deployment needs, by the series each must watch.
WATCHED = {
    "jobwire_queue_oldest_runnable_seconds", "jobwire_jobs_lease_expired_total", "jobwire_queue_no_worker",
    "jobwire_jobs_failed_total", "jobwire_jobs_completed_total", "jobwire_database_up", "up",
}  # fmt: skip


@functools.cache
def _models() -> dict[str, type[pydantic.BaseModel]]:
    """The CRD models, imported when a test needs them: cloudcoil's take ~3 s of CPU to import,
    paid otherwise by every pytest process that merely collects this module."""
    from cloudcoil.models.keda.v1alpha1 import ScaledObject
    from cloudcoil.models.prometheus_operator.v1 import PrometheusRule, ServiceMonitor

    return {"ServiceMonitor": ServiceMonitor, "PrometheusRule": PrometheusRule, "ScaledObject": ScaledObject}


def _component(name: str) -> list[tuple[str, dict[str, Any]]]:
    return manifests(K8S / name)


def _kustomization(name: str) -> dict[str, Any]:
    return yaml.safe_load((K8S / name / "kustomization.yaml").read_text())  # type: ignore[no-any-return]


def _rules() -> list[dict[str, Any]]:
    (rule,) = of("PrometheusRule", _component("monitoring")).values()
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the `## ` headings: lower case, spaces to dashes, punctuation dropped."""
    headings = re.findall(r"^## (.+)$", markdown, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


def test_each_component_is_a_component_of_every_file_in_its_folder_and_off_by_default() -> None:
    for name in COMPONENTS:
        kustomization = _kustomization(name)
        assert (kustomization["apiVersion"], kustomization["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
        files = {p.name for p in (K8S / name).glob("*.yaml")} - {"kustomization.yaml"}
        assert set(kustomization["resources"]) == files, name
    base = (K8S / "kustomization.yaml").read_text()
    assert "components" not in yaml.safe_load(base)  # a cluster without their CRDs would refuse the apply
    offered = re.findall(r"^#\s+- (\w+)", base.split("# components:", 1)[1], flags=re.M)
    assert offered == list(COMPONENTS)  # and the base says how to turn each on


@pytest.mark.parametrize("name", COMPONENTS)
def test_custom_resources_fit_their_crds_schemas(name: str) -> None:
    models = _models()
    assert models.keys() == CUSTOM_KINDS
    custom = [(file, doc) for file, doc in _component(name) if doc["kind"] in models]
    assert custom or name == "ingress"
    for file, doc in custom:
        model = models[doc["kind"]]
        try:
            parsed = model.model_validate(doc)
        except pydantic.ValidationError as exc:
            raise AssertionError(f"{name}/{file}: {exc}") from None
        assert parsed.model_dump(by_alias=True, exclude_unset=True) == doc, f"{name}/{file}: a field its CRD lacks"


def test_the_service_monitor_scrapes_each_server_and_the_gateway_once_on_its_metrics_port() -> None:
    (monitor,) = of("ServiceMonitor", _component("monitoring")).values()
    wanted = monitor["spec"]["selector"]["matchLabels"]
    selected = {name for name, s in of("Service").items() if wanted.items() <= s["metadata"].get("labels", {}).items()}
    assert selected == {*SERVERS, GATEWAY}  # not the headless ones: each pod once
    (endpoint,) = monitor["spec"]["endpoints"]
    for name in selected:
        assert endpoint["port"] in [p["name"] for p in of("Service")[name]["spec"]["ports"]]
    assert endpoint["path"] == "/metrics"


def test_every_alert_names_registered_series_a_summary_and_its_runbook_section() -> None:
    rules = _rules()
    used: set[str] = set()
    for rule in rules:
        names = metric_names(rule["expr"])
        assert names and names <= registered() | {"up"}, f"{rule['alert']}: not registered: {names - registered()}"
        used |= names
        assert rule["annotations"]["summary"], rule["alert"]
        section = rule["annotations"]["runbook_url"].partition("docs/runbook.md#")[2]
        assert section in _anchors(RUNBOOK), f"{rule['alert']}: no section #{section} in docs/runbook.md"
    assert used >= WATCHED, f"no alert watches {WATCHED - used}"


def test_the_scrape_alerts_name_the_jobs_the_service_monitor_makes() -> None:
    """Prometheus names a ServiceMonitor's job after the Service it found the target through."""
    jobs: set[str] = set()
    for rule in _rules():
        for matcher in re.findall(r'\bup\{job=~?"([^"]+)"\}', rule["expr"]):
            jobs |= set(matcher.split("|"))
    assert jobs == {*SERVERS, GATEWAY}


def test_the_ingress_routes_its_tls_host_to_the_gateway_which_trusts_it() -> None:
    (ingress,) = of("Ingress", _component("ingress")).values()
    (rule,) = ingress["spec"]["rules"]
    (tls,) = ingress["spec"]["tls"]
    assert tls["hosts"] == [rule["host"]] and tls["secretName"]
    (path,) = rule["http"]["paths"]
    backend = path["backend"]["service"]
    assert backend["name"] == GATEWAY
    assert backend["port"]["name"] in [p["name"] for p in of("Service")[GATEWAY]["spec"]["ports"]]
    (patch,) = _kustomization("ingress")["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": GATEWAY}
    added = {op["value"]["name"]: op["value"]["value"] for op in yaml.safe_load(patch["patch"])}
    assert added == {"JOBWIRE_GATEWAY_ORIGIN": f"https://{rule['host']}", "FORWARDED_ALLOW_IPS": "*"}
    assert_known_settings("ingress", added)
    assert not added.keys() & {e["name"] for e in container(GATEWAY)["env"]}  # added, not set twice


def test_keda_scales_the_example_worker_on_registered_series() -> None:
    (scaled,) = of("ScaledObject", _component("keda")).values()
    target = scaled["spec"]["scaleTargetRef"]["name"]
    assert target == "jobwire-example-worker" and target in of("Deployment")
    assert 1 <= scaled["spec"]["minReplicaCount"] < scaled["spec"]["maxReplicaCount"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    names = metric_names(trigger["metadata"]["query"])
    assert "jobwire_queue_depth" in names and names <= registered(), names
    worker = container(target)["command"]
    assert "--queues" not in worker and 'queue="default"' in trigger["metadata"]["query"]  # the worker's queue
    (patch,) = _kustomization("keda")["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": target}
    assert yaml.safe_load(patch["patch"]) == [{"op": "remove", "path": "/spec/replicas"}]  # KEDA owns the count
