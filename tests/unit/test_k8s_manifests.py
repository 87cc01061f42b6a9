"""deploy/k8s: valid against the Kubernetes schemas (offline, kubernetes-validate), and every
command, module, setting, secret and volume it names exists, as docker-compose.yml's do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from test_deploy_files import COMPOSE, ROOT, assert_known_settings, assert_runs

from jobwire.rpc.auth import load_tokens

K8S = ROOT / "deploy/k8s"
KUSTOMIZATION = yaml.safe_load((K8S / "kustomization.yaml").read_text())
DOCS = [(path.name, doc) for path in sorted(K8S.glob("*.yaml")) if path.name != "kustomization.yaml"
        for doc in yaml.safe_load_all(path.read_text()) if doc]  # fmt: skip
SERVERS = {"jobwire-jobapi": "jobapi", "jobwire-worker-service": "worker-service"}  # Deployment: compose service


def _of(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in DOCS if doc["kind"] == kind}


def _containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(workload name, its pod spec, container) of every Deployment and Job."""
    return [
        (name, doc["spec"]["template"]["spec"], container)
        for kind in ("Deployment", "Job")
        for name, doc in _of(kind).items()
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]


@pytest.mark.parametrize("version", ["1.30.0", kubernetes_validate.latest_version()])
def test_every_manifest_is_valid_for_kubernetes(version: str) -> None:
    assert len(DOCS) >= 10
    for file, doc in DOCS:
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
    secrets = {name: set(doc["stringData"]) for name, doc in _of("Secret").items()}
    claims = set(_of("PersistentVolumeClaim"))
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
    deployments = _of("Deployment")
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
    (migrate,) = _of("Job")["jobwire-migrate"]["spec"]["template"]["spec"]["containers"]
    assert migrate["command"] == COMPOSE["services"]["migrate"]["command"]


def test_each_server_has_a_disruption_budget_and_a_service_on_its_port() -> None:
    budgets = {
        doc["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for doc in _of("PodDisruptionBudget").values()
    }
    assert budgets == set(SERVERS)
    services = _of("Service")
    for name in SERVERS:
        assert services[name]["spec"]["selector"] == {"app.kubernetes.io/name": name}


def test_the_example_worker_has_no_database_settings_and_targets_the_worker_service() -> None:
    (container,) = _of("Deployment")["jobwire-example-worker"]["spec"]["template"]["spec"]["containers"]
    names = {e["name"] for e in container["env"]}
    assert not {n for n in names if "DATABASE" in n} and "volumes" not in container
    target = container["command"][container["command"].index("--target") + 1]
    host, _, port = target.partition(":")
    (service,) = _of("Service")[host]["spec"]["ports"]
    assert service["port"] == int(port)


def test_the_shipped_auth_secret_loads_and_lets_nobody_in(tmp_path: Path) -> None:
    auth = tmp_path / "auth.toml"
    auth.write_text(_of("Secret")["jobwire-auth"]["stringData"]["auth.toml"])
    assert load_tokens(auth) == {}  # every call refused until the operator adds tokens
