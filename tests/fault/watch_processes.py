"""Real server processes for the watch fault tests: start, find the port, stop or kill."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import grpc

from jobwire.v1 import job_pb2, worker_pb2

READY_TIMEOUT_S = 30.0
BANNER = "jobwire serving on port "


@dataclass
class ServerProcess:
    """`python -m jobwire serve` as a child process, its output kept for a failing test."""

    proc: subprocess.Popen[str]
    port: int
    output: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM: the graceful stop (streams end UNAVAILABLE)."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing ends cleanly."""
        self.proc.kill()
        self.proc.wait(10)


def start_server(database_url: str, listen: str = "127.0.0.1:0") -> ServerProcess:
    env = {**os.environ, "JOBWIRE_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        # One process: these tests crash and restart "the server"; a family's children
        # would outlive a SIGKILLed parent for their drain (tests/e2e/test_family.py).
        [sys.executable, "-m", "jobwire", "serve", "--listen", listen, "--processes", "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def pump() -> None:  # keeps the pipe drained for the life of the process
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        if line.startswith(BANNER):
            return ServerProcess(proc, int(line.removeprefix(BANNER)), output)
    proc.kill()
    raise AssertionError("the server did not start:\n" + "".join(output))


@dataclass
class Stubs:
    """Blocking stubs on one channel, for driving a job from a test."""

    channel: grpc.Channel
    jobs: object
    workers: object

    @classmethod
    def to(cls, target: str) -> Stubs:
        from jobwire.v1 import job_pb2_grpc, worker_pb2_grpc

        channel = grpc.insecure_channel(target)
        return cls(channel, job_pb2_grpc.JobServiceStub(channel), worker_pb2_grpc.WorkerServiceStub(channel))

    def submit(self, **fields: object) -> job_pb2.Job:
        reply = self.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", **fields), timeout=10)  # type: ignore[attr-defined]
        return reply.job  # type: ignore[no-any-return]

    def claim(self) -> worker_pb2.Lease:
        request = worker_pb2.ClaimRequest(worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name="frames")], max_jobs=1)
        (lease,) = self.workers.Claim(request, timeout=10).leases  # type: ignore[attr-defined]
        return lease  # type: ignore[no-any-return]

    def report(self, lease: worker_pb2.Lease, stage: str, units: int) -> None:
        self.workers.ReportStage(worker_pb2.ReportStageRequest(  # type: ignore[attr-defined]
            job_no=lease.job_no, worker_token=lease.worker_token, stage=stage, processed_units=units, total_units=100,
        ), timeout=10)  # fmt: skip

    def complete(self, lease: worker_pb2.Lease) -> job_pb2.Job:
        result = job_pb2.Artifact(uri="file:///results/out.bin", size_bytes=12, sha256="ab" * 32)
        request = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=result)
        return self.workers.Complete(request, timeout=10)  # type: ignore[attr-defined,no-any-return]

    def close(self) -> None:
        self.channel.close()
