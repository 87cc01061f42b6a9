"""Two server processes on one MariaDB: a change made through one reaches a watcher on the other."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from watch_processes import ServerProcess, start_server

from jobwire.jobapi.app import add_jobapi
from jobwire.runtime.parts import Runtime, open_runtime
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc
from jobwire.worker.server.app import add_worker_service

pytestmark = pytest.mark.mysql
STEP_S = 10.0


@pytest.fixture
async def replicas(mysql_url: str) -> AsyncIterator[tuple[Runtime, ServerProcess]]:
    """One server in this process (migrates first), one as a child process."""
    rt = open_runtime(Settings(database_url=mysql_url, listen="127.0.0.1:0"))
    add_jobapi(rt)
    add_worker_service(rt)
    await rt.host.start()
    other = await asyncio.to_thread(start_server, mysql_url)
    try:
        yield rt, other
    finally:
        await asyncio.to_thread(other.terminate)
        await rt.stop(grace=1.0)


def stubs(target: str) -> tuple[grpc.aio.Channel, job_pb2_grpc.JobServiceStub, worker_pb2_grpc.WorkerServiceStub]:
    channel = grpc.aio.insecure_channel(target)
    return channel, job_pb2_grpc.JobServiceStub(channel), worker_pb2_grpc.WorkerServiceStub(channel)


async def next_job(call: grpc.aio.UnaryStreamCall) -> job_pb2.Job:
    update = await asyncio.wait_for(call.read(), STEP_S)
    assert update is not grpc.aio.EOF
    return update.job  # type: ignore[no-any-return]


async def test_changes_through_either_replica_reach_watchers_on_the_other(replicas) -> None:  # type: ignore[no-untyped-def]
    here, there = replicas
    here_ch, here_jobs, here_workers = stubs(f"127.0.0.1:{here.host.port}")
    there_ch, there_jobs, there_workers = stubs(there.target)
    try:
        # Submitted and watched on this process; driven through the other one.
        job = (await here_jobs.Submit(job_pb2.SubmitRequest(job_type="frames", owner="alice"))).job
        watching_here = here_jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=job.job_no))
        owner_there = there_jobs.WatchJobs(job_pb2.WatchJobsRequest(owner="alice"))
        assert (await next_job(watching_here)).status == job_pb2.Job.QUEUED
        assert (await next_job(owner_there)).job_no == job.job_no

        claim = worker_pb2.ClaimRequest(worker_id="w", job_types=[worker_pb2.JobTypeSpec(name="frames")], max_jobs=1)
        (lease,) = (await there_workers.Claim(claim)).leases
        assert (await next_job(watching_here)).status == job_pb2.Job.RUNNING
        assert (await next_job(owner_there)).status == job_pb2.Job.RUNNING

        # A job submitted through this process appears on the other's owner stream.
        later = (await here_jobs.Submit(job_pb2.SubmitRequest(job_type="frames", owner="alice"))).job
        assert (await next_job(owner_there)).job_no == later.job_no

        result = job_pb2.Artifact(uri="file:///results/out.bin", size_bytes=1, sha256="ab" * 32)
        done = await here_workers.Complete(
            worker_pb2.CompleteRequest(job_no=job.job_no, worker_token=lease.worker_token, result=result)
        )
        assert (await next_job(watching_here)).version == done.version
        assert await asyncio.wait_for(watching_here.read(), STEP_S) is grpc.aio.EOF
        ready_there = await next_job(owner_there)
        assert (ready_there.job_no, ready_there.status) == (job.job_no, job_pb2.Job.READY)
        owner_there.cancel()
    finally:
        await here_ch.close()
        await there_ch.close()
