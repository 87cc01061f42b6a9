"""A shared fleet in real processes: one `jobwire-worker` with a `tenant = "*"` token serves two
tenants of a `jobwire serve`, taking turns, and its handler knows whose job it runs."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import grpc
from auth_files import Token, write_auth_file
from processes import start_server_process

from jobwire.v1 import job_pb2, job_pb2_grpc

BIN = Path(sys.executable).parent
CLIENTS = {tenant: Token(f"{tenant}-client", tenant=tenant, role="client") for tenant in ("a", "b")}
FLEET = Token("fleet-worker", tenant="*", role="worker")
HANDLERS = """
from jobwire.worker.sdk import Handlers, JobContext

handlers = Handlers()


@handlers.job("whose")
def whose(ctx: JobContext) -> dict[str, str]:
    return {"tenant": ctx.tenant, "job_no": ctx.job_no}
"""


def test_one_fleet_worker_serves_two_tenants_in_turns(tmp_path: Path) -> None:
    database = tmp_path / "jobwire.db"
    auth = write_auth_file(tmp_path / "auth.toml", [*CLIENTS.values(), FLEET])
    (tmp_path / "fleet_handlers.py").write_text(HANDLERS)
    env = {
        "JOBWIRE_DATABASE_URL": f"sqlite:///{database}",
        "JOBWIRE_LISTEN": "127.0.0.1:0",
        "JOBWIRE_AUTH_FILE": str(auth),
    }
    server = start_server_process(["jobwire", "serve"], env)
    channel = grpc.insecure_channel(server.target)
    jobs = job_pb2_grpc.JobServiceStub(channel)
    worker: subprocess.Popen[bytes] | None = None
    log = tmp_path / "worker.log"
    try:
        backlog = [job_pb2.SubmitRequest(job_type="whose") for _ in range(300)]
        jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=backlog), metadata=CLIENTS["a"].metadata, timeout=30)
        b_job = jobs.Submit(job_pb2.SubmitRequest(job_type="whose"), metadata=CLIENTS["b"].metadata, timeout=10).job
        args = [str(BIN / "jobwire-worker"), "--target", server.target, "--handlers", "fleet_handlers:handlers",
                "--concurrency", "1", "--claim-wait", "1", "--tmp-dir", str(tmp_path / "tmp")]  # fmt: skip
        worker_env = {**os.environ, "JOBWIRE_TOKEN": FLEET.secret, "PYTHONPATH": str(tmp_path)}
        worker = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=tmp_path, env=worker_env)
        done = _until_ready(jobs, b_job.job_no)
        result = b"".join(
            c.data
            for c in jobs.GetResult(
                job_pb2.GetResultRequest(job_no=done.job_no), metadata=CLIENTS["b"].metadata, timeout=30
            )
        )
        assert json.loads(result) == {"tenant": "b", "job_no": b_job.job_no}  # ctx.tenant: whose job it ran
        # B's job was claimed among the fleet's first turns, not after A's 300 (claim order from the events).
        with sqlite3.connect(database) as db:
            claims = [row[0] for row in db.execute("SELECT tenant FROM job_event WHERE kind = 'CLAIMED' ORDER BY id")]
        assert "b" in claims[:3], claims[:10]
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=30)
        server.terminate()
        channel.close()
        worker_log = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        print(f"----- server\n{server.tail()}\n----- worker\n{worker_log}")  # shown when the test fails


def _until_ready(jobs: job_pb2_grpc.JobServiceStub, job_no: str, timeout: float = 60) -> job_pb2.Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = jobs.Get(job_pb2.GetRequest(job_no=job_no), metadata=CLIENTS["b"].metadata, timeout=10)
        if job.status == job_pb2.Job.READY:
            return job
        time.sleep(0.05)
    raise AssertionError(f"{job_no} never READY: {job}")
