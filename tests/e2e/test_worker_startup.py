"""A `jobwire-worker` process that cannot work says why and exits at once.

A real server process with an auth file; the worker is the console script, run as a pod
would run it. A token the server refuses ends it with exit 3 and one line naming the setting
to fix, instead of retrying for ever; a handler that enters a stage its plan lacks ends it
with exit 2 before it claims anything. The right token keeps it working.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from processes import ServerProcess, start_server_process

from jobwire.v1 import job_pb2, job_pb2_grpc

pytestmark = pytest.mark.timeout(120)

WORKER_BIN = Path(sys.executable).parent / "jobwire-worker"
CLIENT = Token("startup-e2e-client")
WORKER = Token("startup-e2e-worker", role="worker", queues=("default",))
EXIT_S = 10.0  # "at once": a pod must crash-loop with a reason, not sit Running

UNDECLARED = """
from jobwire.worker.sdk import Handlers, JobContext, Result

handlers = Handlers()


@handlers.job("fetch")  # no stages=: the default plan
def fetch(ctx: JobContext) -> Result:
    ctx.stage("DOWNLOADING")
    return Result.from_bytes(b"x")
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {
        "JOBWIRE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobwire.db'}",
        "JOBWIRE_LISTEN": "127.0.0.1:0",
        "JOBWIRE_AUTH_FILE": str(write_auth_file(tmp_path / "auth.toml", [CLIENT, WORKER])),
    }
    process = start_server_process(["jobwire", "serve"], env)
    try:
        yield process
    finally:
        process.kill()
        print(f"----- server\n{process.tail()}")  # shown when a test fails


def worker_args(target: str, *more: str, handlers: str = "examples:handlers") -> list[str]:
    return [str(WORKER_BIN), "--target", target, "--handlers", handlers, "--claim-wait", "1", *more]


def environment(**settings: str) -> dict[str, str]:
    """This process's environment without any JOBWIRE_* setting of its own, plus `settings`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("JOBWIRE_")}, **settings}


def run_worker(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the worker to its end; TimeoutExpired fails the test if it does not end within EXIT_S."""
    return subprocess.run(args, env=environment(**env), cwd=cwd, capture_output=True, text=True, timeout=EXIT_S)


def one_line(run: subprocess.CompletedProcess[str]) -> str:
    said = [line for line in run.stderr.splitlines() if line.startswith("jobwire-worker: ")]
    assert len(said) == 1, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    return said[0]


def test_a_wrong_token_exits_3_naming_the_token_settings(server: ServerProcess) -> None:
    run = run_worker(worker_args(server.target), {"JOBWIRE_TOKEN": "nobody-issued-this"})
    assert run.returncode == 3, run
    line = one_line(run)
    assert "UNAUTHENTICATED" in line and "JOBWIRE_TOKEN, or --token-file / JOBWIRE_TOKEN_FILE" in line


def test_a_missing_token_file_setting_says_none_was_given(server: ServerProcess, tmp_path: Path) -> None:
    run = run_worker(worker_args(server.target), {})
    assert run.returncode == 3, run
    assert "none was given" in one_line(run)


def test_a_token_without_the_worker_role_or_the_queue_names_them(server: ServerProcess, tmp_path: Path) -> None:
    token_file = tmp_path / "client.token"
    token_file.write_text(CLIENT.secret)
    as_client = run_worker(worker_args(server.target, "--token-file", str(token_file)), {})
    assert as_client.returncode == 3, as_client
    assert "PERMISSION_DENIED" in one_line(as_client) and 'role "worker"' in one_line(as_client)
    other_queue = run_worker(worker_args(server.target, "--queue", "video"), {"JOBWIRE_TOKEN": WORKER.secret})
    assert other_queue.returncode == 3, other_queue
    assert "may not use queue 'video'" in one_line(other_queue) and "--queue" in one_line(other_queue)


def test_a_handler_entering_an_undeclared_stage_exits_2_before_claiming(server: ServerProcess, tmp_path: Path) -> None:
    (tmp_path / "fetcher.py").write_text(UNDECLARED)
    args = worker_args(server.target, handlers="fetcher:handlers")
    run = run_worker(args, {"JOBWIRE_TOKEN": WORKER.secret}, cwd=tmp_path)
    assert run.returncode == 2, run
    line = one_line(run)
    assert "handler fetcher.fetch (fetcher.py:9) calls ctx.stage('DOWNLOADING')" in line
    assert "its stages are PREPARING, PROCESSING, VERIFYING, DELIVERING" in line
    assert "@handlers.job('fetch', stages=[..., 'DOWNLOADING', ...])" in line


def test_the_right_token_works_and_stops_cleanly(server: ServerProcess, tmp_path: Path) -> None:
    log = (tmp_path / "worker.log").open("wb")
    env = environment(JOBWIRE_TOKEN=WORKER.secret)
    worker = subprocess.Popen(worker_args(server.target), env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        with grpc.insecure_channel(server.target) as channel:
            jobs = job_pb2_grpc.JobServiceStub(channel)
            payload = json.dumps({"frames": 3, "frame_ms": 1}).encode()
            request = job_pb2.SubmitRequest(job_type="frames", payload=payload)
            job_no = jobs.Submit(request, metadata=CLIENT.metadata, timeout=10).job.job_no
            deadline = time.monotonic() + 60
            while (job := jobs.Get(job_pb2.GetRequest(job_no=job_no), metadata=CLIENT.metadata, timeout=10)).status in (
                job_pb2.Job.QUEUED,
                job_pb2.Job.RUNNING,
            ):
                assert time.monotonic() < deadline, job
                time.sleep(0.05)
        assert job.status == job_pb2.Job.READY, job
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait(timeout=30)
        log.close()
        print(f"----- worker\n{(tmp_path / 'worker.log').read_text(errors='replace')[-4000:]}")
