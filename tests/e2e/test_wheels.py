"""The wheels, installed as a fleet machine and a backend install them, away from the checkout.

tools/build_dists.py (what `make dist` runs) builds every sdist and wheel into a temporary
folder, once per session. A fresh virtual environment outside the checkout installs the
jobwire-worker wheel, with jobwire-shared from that folder and everything else from the
package index this machine uses (pinned by the constraints.txt `make dist` puts beside the
wheels, as the README's fleet install does), and runs a handler module
written here against a server started from the checkout. A second one installs only
jobwire-shared, as a backend does, and submits, watches and reads a job with JobClient.
"""

from __future__ import annotations

import email.parser
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest
from processes import ServerProcess, start_server_process

ROOT = Path(__file__).resolve().parents[2]
VERSION = (ROOT / "VERSION").read_text().strip()
BUILD_TIMEOUT_S = 900  # five isolated builds, each fetching its build requirements
INSTALL_TIMEOUT_S = 600
DATABASE_PACKAGES = ("sqlalchemy", "pymysql", "asyncmy", "alembic")
FROM_WHEEL = {"fleet": "jobwire_worker", "backend": "jobwire_shared"}  # each environment installs one wheel

HANDLERS = '''
"""A fleet machine's own handlers: count the words of the payload's text."""

from __future__ import annotations

from jobwire.worker.sdk import Handlers, JobContext, Result, StageDef

handlers = Handlers()
STAGES = [StageDef(code="READING", labels={"en": "Reading"}), StageDef(code="COUNTING", labels={"en": "Counting"})]


@handlers.job("count_words", stages=STAGES)
def count_words(ctx: JobContext) -> Result:
    words = str(ctx.json()["text"]).split()
    ctx.stage("COUNTING")
    for done in range(1, len(words) + 1):
        ctx.progress(done, total=len(words))
    return Result.from_json({"words": len(words)}, summary=f"{len(words)} words")
'''

BACKEND = '''
"""A backend's program: submit a job, watch it to its end, read its result."""

import json
import sys

from jobwire.client import AdminClient, JobClient
from jobwire.v1 import job_pb2

with JobClient.connect(sys.argv[1]) as client, AdminClient.connect(sys.argv[1]) as admin:
    job, _ = client.submit("count_words", {"text": "one two three four"})
    last = list(client.watch(job.job_no))[-1]
    # The trail, not the watch: a worker that ends the job before the watch starts is no failure.
    stages = {event.stage for event in admin.list_events(job.job_no) if event.stage}
    print(json.dumps({
        "status": job_pb2.Job.Status.Name(last.status),
        "stages": sorted(stages),
        "stage_count": last.progress.stage_count,
        "result": json.loads(client.result(job.job_no)),
    }))
'''


def _clean_env(venv: Path) -> dict[str, str]:
    """This environment with `venv` first on PATH, without PYTHONPATH, another virtualenv or
    a PATH entry into the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    kept = [p for p in env.get("PATH", "").split(os.pathsep) if p and not Path(p).resolve().is_relative_to(ROOT)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *kept])
    return env


def _run(venv: Path, program: str, *args: str, cwd: Path | None = None, timeout: float = 60) -> str:
    """`program` of `venv` (python, jobctl, ...) with `args`; its output, or the test fails showing it."""
    command = [str(venv / "bin" / program), *args]
    done = subprocess.run(
        command, env=_clean_env(venv), cwd=cwd or venv, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
    )
    return done.stdout.strip()


def _missing(venv: Path, modules: tuple[str, ...]) -> list[str]:
    """Which of `modules` the environment's Python cannot find."""
    code = f"import importlib.util as u; print(','.join(m for m in {modules!r} if u.find_spec(m) is None))"
    return _run(venv, "python", "-c", code).split(",")


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    build = [sys.executable, str(ROOT / "tools/build_dists.py"), str(out)]
    done = subprocess.run(build, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"building the distributions failed:\n{done.stdout[-8000:]}\n{done.stderr[-4000:]}"
    return out


@pytest.fixture(scope="session")
def venvs(dists: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Fresh virtual environments outside the checkout: "fleet" installs the jobwire-worker
    wheel, "backend" the jobwire-shared wheel alone; jobwire's own packages come from `dists`
    only. Both install at once: each mostly waits on the package index. This environment's
    pip installs into each (`--python`), without byte-compiling what it installs: a pip of
    their own and the compiling cost ~11 s of CPU and are no part of what is tested."""
    wheels = {name: dists / f"{dist}-{VERSION}-py3-none-any.whl" for name, dist in FROM_WHEEL.items()}
    installs = {}
    for name, wheel in wheels.items():
        venv = tmp_path_factory.mktemp(name) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q", "--no-compile",
               "--disable-pip-version-check", "-c", str(dists / "constraints.txt"), "--find-links", str(dists),
               str(wheel)]  # fmt: skip
        output = subprocess.PIPE
        installs[name] = (venv, subprocess.Popen(pip, env=_clean_env(venv), stdout=output, stderr=output, text=True))
    for name, (venv, install) in installs.items():
        out, err = install.communicate(timeout=INSTALL_TIMEOUT_S)
        assert install.returncode == 0, f"installing {wheels[name].name} failed:\n{out[-4000:]}{err[-4000:]}"
        sys_path = json.loads(_run(venv, "python", "-c", "import json, sys; print(json.dumps(sys.path))"))
        assert not [p for p in sys_path if p and Path(p).resolve().is_relative_to(ROOT)], sys_path
    return {name: venv for name, (venv, _) in installs.items()}


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.BytesParser().parsebytes(archive.read(name))


def _check_described_and_pinned(dists: Path) -> None:
    """Each wheel has its README as a Markdown description and needs the jobwire wheels of its own version."""
    wheels = sorted(dists.glob("*.whl"))
    assert len(wheels) == 5, wheels
    for wheel in wheels:
        metadata = _metadata(wheel)
        assert metadata["Version"] == VERSION, wheel.name
        assert metadata["Description-Content-Type"] == "text/markdown", wheel.name
        assert str(metadata.get_payload()).startswith(f"# {metadata['Name']}\n"), wheel.name
        jobwire = [r for r in metadata.get_all("Requires-Dist", []) if r.startswith("jobwire")]
        assert all(f"=={VERSION}" in r for r in jobwire), (wheel.name, jobwire)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """The all-in-one server from the checkout, on port 0 and a fresh SQLite file."""
    env = {"JOBWIRE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobwire.db'}", "JOBWIRE_LISTEN": "127.0.0.1:0"}
    process = start_server_process(["jobwire", "serve"], env)
    try:
        yield process
    finally:
        process.kill()
        print(f"----- server\n{process.tail()}")  # shown when a test fails


# The wheels' metadata is checked here, not in a test of its own: the build is a session
# fixture of each test process, and xdist may run a third test of this module in another
# process, which would build every distribution again (~20 s of CPU).
@pytest.mark.timeout(BUILD_TIMEOUT_S + INSTALL_TIMEOUT_S)
def test_each_wheel_is_described_and_pinned_and_the_worker_wheel_installs_without_database_code(
    dists: Path, venvs: dict[str, Path]
) -> None:
    _check_described_and_pinned(dists)
    fleet = venvs["fleet"]
    assert _run(fleet, "jobwire-worker", "--version") == f"jobwire {VERSION}"
    assert _missing(fleet, DATABASE_PACKAGES) == list(DATABASE_PACKAGES)
    code = "import jobwire.v1.job_pb2 as m, jobwire.worker.sdk, jobwire.examples; print(m.__file__)"
    assert Path(_run(fleet, "python", "-c", code)).is_relative_to(fleet)  # in the jobwire-shared wheel


@pytest.mark.timeout(BUILD_TIMEOUT_S + INSTALL_TIMEOUT_S)
def test_a_backend_with_only_jobwire_shared_gets_a_job_done_by_a_wheel_installed_worker(
    venvs: dict[str, Path], server: ServerProcess, tmp_path: Path
) -> None:
    fleet, backend = venvs["fleet"], venvs["backend"]
    assert _missing(backend, ("jobwire.worker", *DATABASE_PACKAGES)) == ["jobwire.worker", *DATABASE_PACKAGES]
    assert _run(backend, "jobctl", "--version") == f"jobwire {VERSION}"
    host = tmp_path / "fleet-host"  # the handler module's folder and the worker's working folder
    host.mkdir()
    (host / "word_handlers.py").write_text(HANDLERS)
    (tmp_path / "backend.py").write_text(BACKEND)
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen(
            [str(fleet / "bin/jobwire-worker"), "--target", server.target, "--handlers", "word_handlers:handlers",
             "--claim-wait", "1", "--grace-seconds", "5"],
            env=_clean_env(fleet), cwd=host, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            report = json.loads(_run(backend, "python", "backend.py", server.target, cwd=tmp_path, timeout=120))
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            print(f"----- worker\n{(tmp_path / 'worker.log').read_text()[-4000:]}")  # shown when a test fails
    assert report["status"] == "READY"
    assert report["stage_count"] == 2  # the plan the handler declared reached the server
    assert "COUNTING" in report["stages"]
    assert report["result"] == {"words": 4}
