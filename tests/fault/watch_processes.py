"""Real server processes for the watch fault tests (tests/processes.py), and blocking stubs to drive a job."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from processes import ServerProcess, start_server_process

from jobwire.v1 import job_pb2, worker_pb2

__all__ = ["ServerProcess", "Stubs", "start_server"]


def start_server(database_url: str, listen: str = "127.0.0.1:0") -> ServerProcess:
    """`python -m jobwire serve` as one process, once it serves.

    One process: these tests crash and restart "the server"; a family's children would
    outlive a SIGKILLed parent for their drain (tests/e2e/test_family.py).
    """
    return start_server_process(
        ["jobwire", "serve", "--listen", listen, "--processes", "1"], {"JOBWIRE_DATABASE_URL": database_url}
    )


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
