"""The worker SDK against a real server on SQLite: a handler that never ends is stopped
at its attempt's deadline, and the server retries the job, then fails it TIMEOUT."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from served import Served, eventually
from service_support import LEASE_LOST, artifact, duration, events, heartbeat, rpc_error, submit, when

from jobwire.v1 import job_pb2, worker_pb2, worker_pb2_grpc
from jobwire.worker.sdk import Handlers, JobContext, Result, TimedOut, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(90)

handlers = Handlers()
stopped_by: list[str] = []


@handlers.job("endless")
def endless(ctx: JobContext) -> Result:
    ctx.stage("PROCESSING")
    try:
        while True:
            ctx.sleep(0.05)  # a safe point; no progress, ever
    except TimedOut:
        stopped_by.append("TimedOut")
        raise


class RecordingStub:
    """The real WorkerService stub, keeping every lease it was granted."""

    def __init__(self, stub: worker_pb2_grpc.WorkerServiceStub) -> None:
        self._stub = stub
        self.leases: list[worker_pb2.Lease] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    async def Claim(self, request: worker_pb2.ClaimRequest, *, timeout: float | None = None) -> Any:
        reply = await self._stub.Claim(request, timeout=timeout)
        self.leases += reply.leases
        return reply


async def test_a_handler_that_never_ends_is_stopped_retried_then_failed_timeout(
    serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.worker")
    stopped_by.clear()
    s: Served = await serve(reaper_interval_seconds=0.1)
    policy = job_pb2.RetryPolicy(max_attempts=2, initial_backoff=duration(0))
    job = await submit(s, "endless", retry_policy=policy, timeouts=job_pb2.Timeouts(attempt_timeout=duration(0.5)))
    stub = RecordingStub(worker_pb2_grpc.WorkerServiceStub(s.channel))
    config = WorkerConfig(
        target=s.target, worker_id="w-sdk", concurrency=1, lease_duration=30, claim_wait=0.2, grace_period=2,
        results_dir=tmp_path / "results", tmp_root=tmp_path / "tmp",
    )  # fmt: skip
    worker = Worker(config, handlers, stub=stub)
    running = asyncio.create_task(worker.run())
    try:
        failed = await eventually(
            when(s, job.job_no, lambda j: j.status == job_pb2.Job.FAILED), timeout=30, what="FAILED after two attempts"
        )
    finally:
        worker.shutdown()
        assert await asyncio.wait_for(running, 10) == 0  # every attempt ended cleanly
    assert (failed.error.category, failed.error.retryable, failed.attempt) == (job_pb2.JobError.TIMEOUT, True, 2)
    assert stopped_by == ["TimedOut", "TimedOut"]  # the SDK stopped the handler at a safe point, twice
    assert caplog.text.count(f"{job.job_no} attempt 1: timed out") == 1
    assert caplog.text.count(f"{job.job_no} attempt 2: timed out") == 1
    trail = [e.kind for e in await events(s, job.job_no)]
    assert trail.count("ATTEMPT_TIMED_OUT") == 2 and "COMPLETED" not in trail and "FAILED" not in trail

    first, last = stub.leases
    assert first.HasField("attempt_deadline") and last.attempt == 2
    # The worker sent no ending; a late one from the timed-out lease is refused.
    complete = worker_pb2.CompleteRequest(job_no=last.job_no, worker_token=last.worker_token, result=artifact())
    assert await rpc_error(s.workers.Complete(complete)) == LEASE_LOST
    assert (await heartbeat(s, last, "w-sdk")).state == worker_pb2.LeaseState.TIMED_OUT
    assert list((tmp_path / "tmp").iterdir()) == []
