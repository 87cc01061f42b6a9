"""The five distributions as their folders describe them, without building a wheel: one
version, which each also requires of the others it needs, one source of .proto files, no
owner of the `jobwire` namespace, and build pins that agree with constraints.txt
(tests/e2e/test_wheels.py builds and installs them)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from build.util import project_wheel_metadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from jobwire.__main__ import main as server_main
from jobwire.client.cli import build_parser
from jobwire.gateway.__main__ import main as gateway_main
from jobwire.worker.sdk.cli import parse_args

ROOT = Path(__file__).resolve().parents[2]
VERSION = (ROOT / "VERSION").read_text().strip()


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD_DISTS = _load(ROOT / "tools/build_dists.py")
FOLDERS: tuple[str, ...] = BUILD_DISTS.DISTRIBUTIONS
PROJECTS = {folder: tomllib.loads((ROOT / folder / "pyproject.toml").read_text()) for folder in FOLDERS}


def test_make_dist_builds_every_distribution() -> None:
    found = {
        str(p.parent.relative_to(ROOT))
        for p in ROOT.glob("**/pyproject.toml")
        if ".venv" not in p.parts and "project" in tomllib.loads(p.read_text())
    }
    assert found == set(FOLDERS)


def test_every_distribution_takes_its_version_from_the_one_version_file() -> None:
    assert str(Version(VERSION)) == VERSION
    for folder, project in PROJECTS.items():
        assert "version" not in project["project"], folder
        assert project["project"]["dynamic"][0] == "version", folder
        assert project["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}, folder
        assert (ROOT / folder / "VERSION").resolve() == ROOT / "VERSION", f"{folder}/VERSION is not a link to VERSION"


def test_each_distribution_requires_the_other_jobwire_ones_at_its_own_version() -> None:
    """With --find-links and an index, pip may take any jobwire-* it finds: each must ask for its
    own release's, as the metadata pip reads says (setup.py reads VERSION; prepared, not built).
    jobwire-shared, which needs none of the others, lists its dependencies in pyproject.toml."""
    shared = [Requirement(r).name for r in PROJECTS["shared"]["project"]["dependencies"]]
    assert not [name for name in shared if name.startswith("jobwire")]
    required = {}
    for folder in (f for f in FOLDERS if f != "shared"):
        metadata = project_wheel_metadata(ROOT / folder, isolated=False)
        assert metadata["Version"] == VERSION, folder
        required[metadata["Name"]] = sorted(
            str(r) for r in map(Requirement, metadata.get_all("Requires-Dist") or []) if r.name.startswith("jobwire")
        )
    pin = f"=={VERSION}"
    assert required == {
        "jobwire-worker": [f"jobwire-shared{pin}", f'jobwire-shared[db]{pin}; extra == "server"'],
        "jobwire-jobapi": [f"jobwire-shared[db]{pin}"],
        "jobwire-server": [f"jobwire-jobapi{pin}", f"jobwire-worker[server]{pin}"],
        "jobwire-gateway": [f"jobwire-shared{pin}"],
    }


def test_every_distribution_has_a_readme_for_its_description() -> None:
    """An sdist without one warns "standard file not found: README", and its wheel has no description."""
    for folder, project in PROJECTS.items():
        assert project["project"]["readme"] == "README.md", folder
        assert (ROOT / folder / "README.md").read_text().startswith(f"# {project['project']['name']}\n"), folder


# A stand-in for `python -m build`: a log of 300 lines, a file in OUTDIR named for the folder,
# and a failure for the folder named in FAIL.
FAKE_BUILD = """
import pathlib, sys
folder, outdir, fail = sys.argv[1:]
print("\\n".join(f"{folder}: log line {n}" for n in range(300)))
(pathlib.Path(outdir) / (pathlib.Path(folder).name + ".whl")).write_text("")
sys.exit(1 if folder == fail else 0)
"""


def _fake_builds(monkeypatch: pytest.MonkeyPatch, fail: str) -> None:
    def command(folder: str, outdir: Path) -> list[str]:
        return [sys.executable, "-c", FAKE_BUILD, folder, str(outdir), fail]

    monkeypatch.setattr(BUILD_DISTS, "_command", command)


def test_make_dist_prints_no_build_log_and_ends_with_the_files_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "old.whl").write_text("")  # already there: not written by this run
    _fake_builds(monkeypatch, fail="")
    assert BUILD_DISTS.build_all(tmp_path) is True
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"built 5 distributions, 6 files in {tmp_path}:",
        "  constraints.txt",  # the pins, for a machine that gets only the folder
        *(f"  {name}.whl" for name in sorted(["shared", "worker", "jobapi", "server", "gateway"])),
    ]
    assert (tmp_path / "constraints.txt").read_text() == (ROOT / "constraints.txt").read_text()


def test_make_dist_prints_a_failed_build_s_log_and_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_builds(monkeypatch, fail="services/jobapi")
    assert BUILD_DISTS.build_all(tmp_path) is False
    said = capsys.readouterr()
    assert "----- services/jobapi: exit 1 from\n" in said.out and f"{tmp_path} services/jobapi" in said.out
    logged = [line for line in said.out.splitlines() if re.match(r"\S+: log line \d+$", line)]
    assert logged == [f"services/jobapi: log line {n}" for n in range(300)]  # the others' logs are not shown
    assert "built" not in said.out
    assert said.err == "build_dists.py: could not build services/jobapi: see above\n"


def test_no_distribution_owns_the_namespace_package() -> None:
    """`jobwire` is spread over five distributions (PEP 420): an __init__.py would hide the other four."""
    for folder in FOLDERS:
        assert not (ROOT / folder / "jobwire/__init__.py").exists(), folder


def test_the_protos_have_one_source() -> None:
    link = ROOT / "shared/protos"
    assert link.is_symlink() and link.resolve() == ROOT / "protos"


def test_shared_builds_with_the_versions_constraints_txt_pins() -> None:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        pins[canonicalize_name(name)] = version.strip()
    exact = [Requirement(r) for r in PROJECTS["shared"]["build-system"]["requires"] if "==" in r]
    assert {canonicalize_name(r.name) for r in exact} >= {"grpcio-tools", "mypy-protobuf", "googleapis-common-protos"}
    for requirement in exact:
        (spec,) = requirement.specifier
        assert pins[canonicalize_name(requirement.name)] == spec.version, requirement


def _floor(name: str) -> Version:
    for text in PROJECTS["shared"]["project"]["dependencies"]:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == name:
            return max(Version(s.version) for s in requirement.specifier if s.operator == ">=")
    raise AssertionError(f"jobwire-shared does not depend on {name}")


def test_build_protos_compiles_every_proto_for_the_runtime_shared_requires(tmp_path: Path) -> None:
    """What the wheel's build and `make proto` run; the generated code refuses a grpcio or a
    protobuf older than the one it was generated for, so jobwire-shared must require them."""
    _load(ROOT / "shared/build_protos.py").compile_protos(tmp_path)
    out = tmp_path / "jobwire/v1"
    for proto in sorted((ROOT / "protos/jobwire/v1").glob("*.proto")):
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi"):
            assert (out / f"{proto.stem}{suffix}").is_file(), f"{proto.stem}{suffix}"
    protobuf = re.search(r"^# Protobuf Python Version: (\S+)$", (out / "job_pb2.py").read_text(), re.M)
    grpcio = re.search(r"^GRPC_GENERATED_VERSION = '(\S+)'$", (out / "job_pb2_grpc.py").read_text(), re.M)
    assert protobuf and grpcio
    assert _floor("protobuf") >= Version(protobuf.group(1))
    assert _floor("grpcio") >= Version(grpcio.group(1))


def _printed_version(run: Callable[[], object]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        run()
    assert stop.value.code == 0
    return out.getvalue().strip()


def test_every_command_prints_the_one_version() -> None:
    commands: dict[str, Callable[[], object]] = {
        "jobctl": lambda: build_parser({}).parse_args(["--version"]),
        "jobwire-worker": lambda: parse_args(["--version"]),
        "python -m jobwire": lambda: server_main(["--version"]),
        "python -m jobwire.gateway": lambda: gateway_main(["--version"]),
    }
    for name, run in commands.items():
        assert _printed_version(run) == f"jobwire {VERSION}", name
