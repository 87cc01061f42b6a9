"""docker-compose.yml, the Dockerfile and deploy/k8s must agree with the code, read without
Docker or a cluster (the Kubernetes manifests are checked against the schemas that
kubernetes-validate ships)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

import yaml

from jobwire.rpc.auth import load_tokens

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _console_scripts() -> set[str]:
    scripts: set[str] = set()
    for project in ROOT.glob("**/pyproject.toml"):
        if ".venv" in project.parts:
            continue
        scripts |= set(tomllib.loads(project.read_text()).get("project", {}).get("scripts", {}))
    return scripts


def assert_runs(where: str, command: list[str]) -> None:
    """`command` names a real module (`python -m M`) or console script, and its --handlers resolve."""
    if command[:2] == ["python", "-m"]:
        assert importlib.util.find_spec(command[2]) is not None, f"{where}: no module {command[2]}"
    else:
        assert command[0] in _console_scripts(), f"{where}: no console script {command[0]}"
    if "--handlers" in command:
        module, _, attr = command[command.index("--handlers") + 1].partition(":")
        assert hasattr(importlib.import_module(module), attr), f"{where}: no handlers {module}:{attr}"


def assert_known_settings(where: str, names: Iterable[str]) -> None:
    """Every JOBWIRE_* variable among `names` is read by the servers' settings, the worker SDK,
    the gateway's settings or, for the gateway, jobwire.client (the job service's address)."""
    readers = [
        (ROOT / "shared/jobwire/runtime/settings.py").read_text(),
        "\n".join(p.read_text() for p in (ROOT / "services/worker/jobwire/worker/sdk").glob("*.py")),
        (ROOT / "services/gateway/jobwire/gateway/settings.py").read_text(),
        (ROOT / "shared/jobwire/client/channel.py").read_text(),
    ]
    for var in names:
        if var.startswith("JOBWIRE_"):
            assert any(f'"{var}"' in text for text in readers), f"{where}: {var} is read nowhere"


def test_every_command_names_a_real_module_or_script() -> None:
    for name, service in COMPOSE["services"].items():
        if name != "mysql":
            assert_runs(name, service["command"])


def test_environment_uses_only_known_settings() -> None:
    for name, service in COMPOSE["services"].items():
        assert_known_settings(name, service.get("environment", {}))


def test_the_gateway_serves_beyond_its_container_and_reaches_jobapi() -> None:
    gateway = COMPOSE["services"]["gateway"]
    assert gateway["command"] == ["python", "-m", "jobwire.gateway"]
    env = gateway["environment"]
    assert env["JOBWIRE_GATEWAY_LISTEN"].startswith("0.0.0.0:")
    host, _, port = env["JOBWIRE_TARGET"].partition(":")
    assert host == "jobapi" and COMPOSE["services"]["jobapi"]["environment"]["JOBWIRE_LISTEN"].endswith(f":{port}")
    assert not any(var in env for var in ("JOBWIRE_DATABASE_URL", "JOBWIRE_TOKEN", "JOBWIRE_AUTH_FILE"))


def test_servers_beyond_loopback_have_an_auth_file_that_loads() -> None:
    for name in ("jobapi", "worker-service"):
        env = COMPOSE["services"][name]["environment"]
        assert env["JOBWIRE_LISTEN"].startswith("0.0.0.0:")
        assert env["JOBWIRE_AUTH_FILE"]
    tokens = load_tokens(ROOT / "deploy/auth.dev.toml")
    roles = {name: tokens[hashlib.sha256(name.encode()).hexdigest()].roles for name in
             ("dev-client-token", "dev-worker-token", "dev-admin-token")}  # fmt: skip
    assert roles["dev-worker-token"] == {"worker"} and roles["dev-client-token"] == {"client"}
    # an operator's token does what the runbook tells an operator to: jobctl list and cancel too
    assert roles["dev-admin-token"] == {"client", "admin"}


def test_the_image_installs_the_wheels_make_dist_builds() -> None:
    """A build stage runs `make dist`'s script; the image installs only the wheels it built."""
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    build, image = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    stage = re.match(r"python:3\.11\S* AS (\w+)\n", build)
    assert stage, "the first stage must be a named python:3.11 stage"
    copied = {src for line in re.findall(r"^COPY (.+) \S+$", build, re.M) for src in line.split()}
    # the folders and what their links (VERSION, shared/protos) point at
    assert copied >= {"constraints.txt", "VERSION", "protos", "shared", "services", "tools"}
    (build_dists,) = re.findall(r"python (tools/build_dists\.py) (\S+)", build)
    makefile = (ROOT / "Makefile").read_text()
    assert f"$(PY) {build_dists[0]} dist" in makefile  # the same script as `make dist`
    assert re.match(r"python:3\.11", image)
    assert f"COPY --from={stage.group(1)} {build_dists[1]} /tmp/dist" in image
    (install,) = re.findall(r"pip install (.*?)(?:&&|$)", image, re.M)
    parts = ("/tmp/dist/*.whl", "'jobwire-shared[db,otlp]'", "'jobwire-worker[server]'", "-c constraints.txt")
    for part in parts:
        assert part in install
    for absent in ("grpcio-tools", "grpc_tools", "protoc", "COPY shared", "COPY services", "COPY protos"):
        assert absent not in image, f"the image holds {absent}"
    assert COMPOSE["services"]["mysql"]["image"] == "mysql:8.4"


def test_published_ports_are_loopback_only_with_the_dev_tokens() -> None:
    """Security review, finding 12: the dev tokens (admin included) were published on every interface."""
    assert COMPOSE["services"]["jobapi"]["volumes"][0].startswith("./deploy/auth.dev.toml:")
    for name, service in COMPOSE["services"].items():
        for mapping in service.get("ports", []):
            assert mapping.startswith("127.0.0.1:"), f"{name} publishes {mapping} beyond this machine"
