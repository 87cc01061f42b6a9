"""deploy/k8s: valid against the Kubernetes schemas (offline, kubernetes-validate), and every
command, module, setting, secret and volume it names exists, as docker-compose.yml's do; its
Services select the pods they name, on the ports those pods name.

The optional components (monitoring/, ingress/, keda/) are checked in test_k8s_components.py."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from test_deploy_files import COMPOSE, ROOT, assert_known_settings, assert_runs

from jobwire.rpc.auth import load_tokens

K8S = ROOT / "deploy/k8s"
KUSTOMIZATION = yaml.safe_load((K8S / "kustomization.yaml").read_text())
COMPONENTS = ("monitoring", "ingress", "keda")  # folders of deploy/k8s, each a kustomize Component


def manifests(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """(file, document) of every manifest in `folder`, its kustomization.yaml aside."""
    return [(path.name, doc) for path in sorted(folder.glob("*.yaml")) if path.name != "kustomization.yaml"
            for doc in yaml.safe_load_all(path.read_text()) if doc]  # fmt: skip


DOCS = manifests(K8S)
SERVERS = {"jobwire-jobapi": "jobapi", "jobwire-worker-service": "worker-service"}  # Deployment: compose service
GATEWAY = "jobwire-gateway"


def of(kind: str, docs: list[tuple[str, dict[str, Any]]] = DOCS) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in docs if doc["kind"] == kind}


def pod_labels(deployment: str) -> dict[str, str]:
    labels: dict[str, str] = of("Deployment")[deployment]["spec"]["template"]["metadata"]["labels"]
    return labels


def container(deployment: str) -> dict[str, Any]:
    (found,) = of("Deployment")[deployment]["spec"]["template"]["spec"]["containers"]
    return found  # type: ignore[no-any-return]


def container_port(deployment: str, name: str) -> int:
    (port,) = [p["containerPort"] for p in container(deployment)["ports"] if p["name"] == name]
    return port  # type: ignore[no-any-return]


def service_for(target: str) -> tuple[dict[str, Any], int]:
    """The Service a `dns:///NAME:PORT` target names, and its port; it must be headless."""
    assert target.startswith("dns:///"), f"{target}: not a dns:/// target, so no client-side balancing"
    host, _, port = target.removeprefix("dns:///").partition(":")
    service = of("Service")[host]
    assert service["spec"]["clusterIP"] == "None", f"{host} is not headless: one connection would pin one pod"
    assert int(port) in [p["port"] for p in service["spec"]["ports"]]
    return service, int(port)


def _containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(workload name, its pod spec, container) of every Deployment and Job."""
    return [
        (name, doc["spec"]["template"]["spec"], container)
        for kind in ("Deployment", "Job")
        for name, doc in of(kind).items()
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]


CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule", "ScaledObject"}  # no Kubernetes schema: their CRDs'
CORE = DOCS + [(f"{folder}/{file}", doc) for folder in COMPONENTS for file, doc in manifests(K8S / folder)
               if doc["kind"] not in CUSTOM_KINDS]  # fmt: skip


@pytest.mark.parametrize("version", ["1.30.0", kubernetes_validate.latest_version()])
def test_every_manifest_is_valid_for_kubernetes(version: str) -> None:
    """Every core kind, the components' Ingress included (their CRDs: test_k8s_components.py)."""
    assert len(DOCS) >= 15 and "ingress/ingress.yaml" in dict(CORE)
    for file, doc in CORE:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{file}: {doc['kind']} {doc['metadata']['name']}: {exc.message}") from None


def test_the_kustomization_applies_every_file_and_the_compose_image() -> None:
    assert set(KUSTOMIZATION["resources"]) == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    (image,) = KUSTOMIZATION["images"]
    assert f"{image['newName']}:{image['newTag']}" == COMPOSE["services"]["jobapi"]["image"]
    assert {c["image"] for _, _, c in _containers()} == {image["name"]}


def test_commands_settings_secrets_and_volumes_exist() -> None:
    secrets = {name: set(doc["stringData"]) for name, doc in of("Secret").items()}
    claims = set(of("PersistentVolumeClaim"))
    for name, pod, container in _containers():
        assert_runs(name, container["command"])
        assert_known_settings(name, [e["name"] for e in container.get("env", [])])
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["key"] in secrets.get(ref["name"], ()), f"{name}: no secret {ref['name']}/{ref['key']}"
        for volume in pod.get("volumes", []):
            assert volume.get("secret", {}).get("secretName", "jobwire-auth") in secrets, name
            assert volume.get("persistentVolumeClaim", {}).get("claimName", "jobwire-results") in claims, name
        assert pod["securityContext"]["runAsUser"] == 65534  # `USER nobody` in the Dockerfile: not numeric
    assert "USER nobody" in (ROOT / "Dockerfile").read_text()


def test_servers_run_as_in_compose_with_probes_on_their_grpc_health_port() -> None:
    deployments = of("Deployment")
    for name, service in SERVERS.items():
        (container,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        assert container["command"] == COMPOSE["services"][service]["command"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env.keys() >= COMPOSE["services"][service]["environment"].keys()
        port = int(env["JOBWIRE_LISTEN"].rpartition(":")[2])
        assert {"name": "grpc", "containerPort": port} in container["ports"]
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == port, f"{name}: {probe}"
        assert container["resources"]["requests"].keys() >= {"cpu", "memory"}
    (migrate,) = of("Job")["jobwire-migrate"]["spec"]["template"]["spec"]["containers"]
    assert migrate["command"] == COMPOSE["services"]["migrate"]["command"]


def test_each_server_and_the_gateway_have_a_disruption_budget() -> None:
    budgets = of("PodDisruptionBudget")
    assert set(budgets) == {*SERVERS, GATEWAY}
    for name, budget in budgets.items():
        assert budget["spec"]["selector"]["matchLabels"] == pod_labels(name), name


def test_each_server_has_a_service_with_grpc_and_metrics_and_a_headless_one_with_grpc() -> None:
    services = of("Service")
    for name in SERVERS:
        env = {e["name"]: e.get("value") for e in container(name)["env"]}
        grpc_port = int(env["JOBWIRE_LISTEN"].rpartition(":")[2])
        plain, headless = services[name], services[f"{name}-headless"]
        for service in (plain, headless):
            assert service["spec"]["selector"] == pod_labels(name), f"{service['metadata']['name']} selects other pods"
        ports = {p["name"]: (p["port"], p["targetPort"]) for p in plain["spec"]["ports"]}
        assert ports == {"grpc": (grpc_port, "grpc"), "metrics": (metrics_port(name), "metrics")}
        assert headless["spec"]["clusterIP"] == "None" and "labels" not in headless["metadata"]
        # gRPC only: the pods are scraped once, through the plain Service
        assert [(p["name"], p["port"]) for p in headless["spec"]["ports"]] == [("grpc", grpc_port)]


# Where each workload behind a Service serves GET /metrics: the servers' setting, the gateway's.
METRICS_LISTEN = {**dict.fromkeys(SERVERS, "JOBWIRE_METRICS_LISTEN"), GATEWAY: "JOBWIRE_GATEWAY_METRICS_LISTEN"}


def metrics_port(deployment: str) -> int:
    """The port `deployment`'s pods serve GET /metrics on, as their environment sets it."""
    env = {e["name"]: e.get("value") for e in container(deployment)["env"]}
    return int(env[METRICS_LISTEN[deployment]].rpartition(":")[2])


def test_every_service_but_the_headless_ones_has_the_metrics_port_its_pods_serve() -> None:
    """The gateway's pages are scraped as the servers are: a port named `metrics` on the
    Service, the label the ServiceMonitor selects, and the annotations for a Prometheus that
    scrapes pods by them."""
    plain = {name: s for name, s in of("Service").items() if s["spec"].get("clusterIP") != "None"}
    assert set(plain) == set(METRICS_LISTEN)
    for name, service in plain.items():
        port = metrics_port(name)
        assert container_port(name, "metrics") == port, name
        assert {"name": "metrics", "port": port, "targetPort": "metrics"} in service["spec"]["ports"], name
        assert service["metadata"]["labels"] == {"jobwire/metrics": "true"}, name  # what the ServiceMonitor selects
        annotations = of("Deployment")[name]["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                               "prometheus.io/path": "/metrics"}, name  # fmt: skip


def test_the_example_worker_has_no_database_settings_and_balances_over_the_worker_service() -> None:
    worker = container("jobwire-example-worker")
    names = {e["name"] for e in worker["env"]}
    assert not {n for n in names if "DATABASE" in n} and "volumes" not in worker
    service, port = service_for(worker["command"][worker["command"].index("--target") + 1])
    assert service["spec"]["selector"] == pod_labels("jobwire-worker-service")
    assert port == container_port("jobwire-worker-service", "grpc")


def test_the_gateway_serves_on_its_service_and_balances_over_jobapi() -> None:
    gateway = container(GATEWAY)
    assert gateway["command"] == COMPOSE["services"]["gateway"]["command"]
    env = {e["name"]: e["value"] for e in gateway["env"]}
    assert not {n for n in env if "DATABASE" in n or n in ("JOBWIRE_TOKEN", "JOBWIRE_AUTH_FILE")}
    service, port = service_for(env["JOBWIRE_TARGET"])
    assert service["spec"]["selector"] == pod_labels("jobwire-jobapi")
    assert port == container_port("jobwire-jobapi", "grpc")
    host, _, listen = env["JOBWIRE_GATEWAY_LISTEN"].rpartition(":")
    assert host == "0.0.0.0" and int(listen) == container_port(GATEWAY, "http")
    (http,) = [p for p in of("Service")[GATEWAY]["spec"]["ports"] if p["name"] == "http"]
    assert of("Service")[GATEWAY]["spec"]["selector"] == pod_labels(GATEWAY) and http["targetPort"] == "http"
    for probe in ("readinessProbe", "livenessProbe"):
        assert gateway[probe]["httpGet"] == {"path": "/signin", "port": "http"}  # a page that needs no jobapi


def test_the_shipped_auth_secret_loads_and_lets_nobody_in(tmp_path: Path) -> None:
    auth = tmp_path / "auth.toml"
    auth.write_text(of("Secret")["jobwire-auth"]["stringData"]["auth.toml"])
    assert load_tokens(auth) == {}  # every call refused until the operator adds tokens


def test_the_auth_template_filled_in_gives_a_client_a_worker_and_an_operator(tmp_path: Path) -> None:
    """Uncommented with the hashes of the three token secrets, as secrets.yaml says to do."""
    secrets = {name: doc["stringData"] for name, doc in of("Secret").items()}
    tokens = {"client": "a-client-token", "worker": "a-worker-token", "admin": "an-admin-token"}
    text = re.sub(r"^# ?", "", secrets["jobwire-auth"]["auth.toml"], flags=re.M)
    for role, token in tokens.items():
        text = text.replace(f"<sha256 of a{'n' if role == 'admin' else ''} {role} token>", _sha256(token))
    auth = tmp_path / "auth.toml"
    auth.write_text(text)
    loaded = load_tokens(auth)
    assert {role: set(loaded[_sha256(token)].roles) for role, token in tokens.items()} == {
        "client": {"client"}, "worker": {"worker"}, "admin": {"client", "admin"},
    }  # fmt: skip
    assert {"jobwire-worker-token", "jobwire-admin-token"} <= secrets.keys()


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
