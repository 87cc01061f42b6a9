"""The worker runtime end to end, in real processes.

The embedded server (`python -m jobwire serve`) on a fresh SQLite file, and `jobwire-worker`
processes running `jobwire.examples:handlers`, killed and stopped the way deployments do it. Each
worker runs in a folder of its own and keeps no results: by default the server keeps them
(jobwire://results/<job_no>) and a client reads them back with GetResult.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from processes import ServerProcess, start_server_process

from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc

BIN = Path(sys.executable).parent
LEASE_S = 3  # short leases so a killed worker's job comes back within seconds
READY, CANCELLED = job_pb2.Job.READY, job_pb2.Job.CANCELLED


@dataclass
class Stack:
    """A running server, the workers started against it, and the folders they share."""

    target: str
    root: Path
    jobs: job_pb2_grpc.JobServiceStub
    admin: admin_pb2_grpc.AdminServiceStub
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def tmp(self) -> Path:
        return self.root / "worker-tmp"

    @property
    def result_store(self) -> Path:
        return self.root / "results"  # the server's default: beside its SQLite file

    def worker(self) -> subprocess.Popen[bytes]:
        n = len(self.workers) + 1
        log = (self.root / f"worker-{n}.log").open("wb")
        host = self.root / f"host-{n}"  # its own empty working folder, as on another machine
        host.mkdir()
        args = [str(BIN / "jobwire-worker"), "--target", self.target, "--handlers", "jobwire.examples:handlers",
                "--tmp-dir", str(self.tmp), "--lease-seconds", str(LEASE_S),
                "--claim-wait", "1", "--grace-seconds", "15"]  # fmt: skip
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=host)
        self.workers.append(proc)
        return proc

    def submit(self, job_type: str, payload: dict[str, object], *, retry_on_lease_lost: bool = False) -> str:
        policy = job_pb2.RetryPolicy(max_attempts=3)
        if retry_on_lease_lost:
            policy.on_lease_lost = job_pb2.RetryPolicy.RETRY
        request = job_pb2.SubmitRequest(job_type=job_type, payload=json.dumps(payload).encode(), retry_policy=policy)
        return str(self.jobs.Submit(request, timeout=10).job.job_no)

    def get(self, job_no: str) -> job_pb2.Job:
        return self.jobs.Get(job_pb2.GetRequest(job_no=job_no), timeout=10)

    def wait(self, job_no: str, done: Callable[[job_pb2.Job], bool], timeout: float = 60) -> job_pb2.Job:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.get(job_no)
            if done(job):
                return job
            time.sleep(0.05)
        raise AssertionError(f"{job_no} never got there; last seen {self.get(job_no)}")

    def events(self, job_no: str) -> list[admin_pb2.JobEvent]:
        reply = self.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job_no, page_size=500), timeout=10)
        return list(reply.events)


def _start_server(root: Path) -> ServerProcess:
    env = {
        "JOBWIRE_DATABASE_URL": f"sqlite:///{root / 'jobwire.db'}",
        "JOBWIRE_LISTEN": "127.0.0.1:0",
        "JOBWIRE_REAPER_INTERVAL_SECONDS": "0.5",
        "JOBWIRE_STALL_GRACE_SECONDS": "1",
    }
    return start_server_process(["jobwire", "serve"], env)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    server = _start_server(tmp_path)
    channel = grpc.insecure_channel(server.target)
    s = Stack(server.target, tmp_path, job_pb2_grpc.JobServiceStub(channel),
              admin_pb2_grpc.AdminServiceStub(channel))  # fmt: skip
    s.tmp.mkdir()
    try:
        yield s
    finally:
        for proc in s.workers:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        server.kill()
        channel.close()
        print(f"----- server\n{server.tail()}")  # shown when a test fails
        for log in sorted(tmp_path.glob("*.log")):
            print(f"----- {log.name}\n{log.read_text(errors='replace')[-4000:]}")


def result_bytes(stack: Stack, job: job_pb2.Job) -> bytes:
    assert job.result.uri == f"jobwire://results/{job.job_no}"
    stream = stack.jobs.GetResult(job_pb2.GetResultRequest(job_no=job.job_no), timeout=30)
    return b"".join(chunk.data for chunk in stream)


def assert_verified(stack: Stack, job: job_pb2.Job) -> None:
    data = result_bytes(stack, job)
    assert hashlib.sha256(data).hexdigest() == job.result.sha256
    assert len(data) == job.result.size_bytes
    for host in stack.root.glob("host-*"):
        assert list(host.rglob("*")) == []  # nothing kept on the worker's machine


def imported(db: Path) -> tuple[int, int, dict[int, int]]:
    with sqlite3.connect(db) as conn:
        total, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM imported_rows").fetchone()
        by_attempt = dict(conn.execute("SELECT attempt, COUNT(*) FROM imported_rows GROUP BY attempt").fetchall())
    return total, distinct, by_attempt


def at_least(stage: str, units: int) -> Callable[[job_pb2.Job], bool]:
    return lambda job: job.stage == stage and job.progress.processed_units >= units


def test_each_example_ends_ready_with_a_verified_artifact(stack: Stack) -> None:
    worker = stack.worker()
    frames = stack.submit("frames", {"frames": 900, "frame_ms": 1, "pause_at": 450, "pause_ms": 1500})
    csv_job = stack.submit("csv_import", {"rows": 5000, "target_db": str(stack.root / "import.db")})
    report = stack.submit("report", {"seconds": 1.5})

    half = stack.wait(frames, at_least("PROCESSING", 450))
    assert (half.progress.processed_units, half.progress.total_units, half.progress.percent) == (450, 900, 50)
    assert "450/900 (50%)" in half.display.detail

    for job_no in (frames, csv_job, report):
        job = stack.wait(job_no, lambda j: j.status == READY)
        assert_verified(stack, job)
    assert imported(stack.root / "import.db")[:2] == (5000, 5000)
    report_events = stack.events(report)
    assert {e.stage for e in report_events} >= {"QUERYING", "RENDERING"}
    assert not any(e.HasField("total_units") for e in report_events)  # never a percent
    assert list(stack.tmp.iterdir()) == []
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0


def test_cancel_during_frames_removes_temp_output_and_delivers_nothing(stack: Stack) -> None:
    stack.worker()
    job_no = stack.submit("frames", {"frames": 900, "frame_ms": 1, "pause_at": 300, "pause_ms": 20000})
    stack.wait(job_no, at_least("PROCESSING", 300))
    assert any(stack.tmp.iterdir())  # the attempt's temporary folder exists while it runs
    stack.jobs.Cancel(job_pb2.CancelRequest(job_no=job_no), timeout=10)
    job = stack.wait(job_no, lambda j: j.status == CANCELLED, timeout=20)
    assert not job.HasField("result")
    assert list(stack.tmp.iterdir()) == []
    with pytest.raises(grpc.RpcError) as refused:
        list(stack.jobs.GetResult(job_pb2.GetResultRequest(job_no=job_no), timeout=30))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert [p for p in stack.result_store.rglob("*") if p.is_file()] == []


def test_kill_9_mid_import_resumes_from_the_checkpoint_and_imports_each_row_once(stack: Stack) -> None:
    db, rows = stack.root / "import.db", 20_000
    first = stack.worker()
    job_no = stack.submit("csv_import", {"rows": rows, "target_db": str(db), "batch_ms": 100}, retry_on_lease_lost=True)
    seen = stack.wait(job_no, at_least("IMPORTING", 5000)).progress.processed_units
    first.kill()  # SIGKILL: no goodbye, the lease just runs out
    first.wait(timeout=10)
    stack.worker()
    job = stack.wait(job_no, lambda j: j.status == READY, timeout=90)
    assert job.attempt == 2
    assert_verified(stack, job)
    summary = json.loads(result_bytes(stack, job))
    assert summary["resumed_at_row"] >= seen  # the checkpoint is written before progress shows it
    assert summary["inserted_by_this_attempt"] == rows - imported(db)[2][1]
    total, distinct, by_attempt = imported(db)
    assert total == distinct == rows
    assert by_attempt[1] >= summary["resumed_at_row"]
    second_attempt = [e.processed_units for e in stack.events(job_no) if e.attempt == 2 and e.stage == "IMPORTING"]
    assert min(p for p in second_attempt if p) >= summary["resumed_at_row"]


def test_sigterm_mid_import_releases_with_a_checkpoint_and_another_worker_finishes(stack: Stack) -> None:
    db, rows = stack.root / "import.db", 20_000
    first = stack.worker()
    job_no = stack.submit("csv_import", {"rows": rows, "target_db": str(db), "batch_ms": 100})
    seen = stack.wait(job_no, at_least("IMPORTING", 3000)).progress.processed_units
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    released = [e for e in stack.events(job_no) if e.kind == "RELEASED"]
    assert released and released[0].attempt == 1
    assert list(stack.tmp.iterdir()) == []
    stack.worker()
    job = stack.wait(job_no, lambda j: j.status == READY, timeout=60)
    summary = json.loads(result_bytes(stack, job))
    assert summary["resumed_at_row"] >= seen
    total, distinct, _ = imported(db)
    assert total == distinct == rows
