"""Small helpers the service tests share: submit, claim, read errors."""

from __future__ import annotations

import grpc
from google.protobuf.duration_pb2 import Duration

from jobwire.client.status import error_reason
from jobwire.v1 import job_pb2, worker_pb2

SHA = "ab" * 32


def spec(name: str = "frames", stages: list[worker_pb2.StageDef] | None = None) -> worker_pb2.JobTypeSpec:
    return worker_pb2.JobTypeSpec(name=name, stages=stages or [])


async def submit(served, job_type: str = "frames", **fields) -> job_pb2.Job:  # type: ignore[no-untyped-def]
    reply = await served.jobs.Submit(job_pb2.SubmitRequest(job_type=job_type, **fields))
    return reply.job


async def claim(served, job_type: str = "frames", *, worker_id: str = "w1", max_jobs: int = 1, wait: float = 0,
                stages: list[worker_pb2.StageDef] | None = None, lease: float | None = None, queues=()) -> list[worker_pb2.Lease]:  # type: ignore[no-untyped-def]
    request = worker_pb2.ClaimRequest(
        worker_id=worker_id, job_types=[spec(job_type, stages)], max_jobs=max_jobs, queues=list(queues),
        wait=Duration(seconds=int(wait), nanos=int((wait % 1) * 1e9)),
    )
    if lease is not None:
        request.lease_duration.FromNanoseconds(int(lease * 1e9))
    reply = await served.workers.Claim(request)
    return list(reply.leases)


async def running(served, **fields) -> tuple[job_pb2.Job, worker_pb2.Lease]:  # type: ignore[no-untyped-def]
    """A job submitted and claimed: (job as submitted, its lease)."""
    job = await submit(served, **fields)
    leases = await claim(served, job.job_type)
    assert [lease.job_no for lease in leases] == [job.job_no]
    return job, leases[0]


def artifact(uri: str = "file:///results/out.bin") -> job_pb2.Artifact:
    return job_pb2.Artifact(uri=uri, size_bytes=12, sha256=SHA, content_type="application/octet-stream")


async def rpc_error(call) -> tuple[grpc.StatusCode, str | None]:  # type: ignore[no-untyped-def]
    """(code, ErrorInfo reason) of an awaited call that must fail."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), error_reason(exc)
    raise AssertionError("the call succeeded")
