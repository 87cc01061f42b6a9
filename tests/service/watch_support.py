"""Helpers the watch tests share: read streams with a deadline, drive a job through stages."""

from __future__ import annotations

import asyncio

import grpc
from service_support import artifact

from jobwire.v1 import job_pb2, worker_pb2

STEP_TIMEOUT_S = 10.0
TERMINAL = frozenset({job_pb2.Job.READY, job_pb2.Job.FAILED, job_pb2.Job.CANCELLED})


def watch(served, job_no: str, after_version: int = 0, locale: str = "") -> grpc.aio.UnaryStreamCall:  # type: ignore[no-untyped-def]
    return served.jobs.WatchStatus(
        job_pb2.WatchStatusRequest(job_no=job_no, after_version=after_version, locale=locale)
    )


async def next_job(call: grpc.aio.UnaryStreamCall, timeout: float = STEP_TIMEOUT_S) -> job_pb2.Job | None:
    """The next update's job, or None when the stream ended."""
    update = await asyncio.wait_for(call.read(), timeout)
    return None if update is grpc.aio.EOF else update.job


async def read_to_end(call: grpc.aio.UnaryStreamCall, timeout: float = STEP_TIMEOUT_S) -> list[job_pb2.Job]:
    """Every update until the stream ends; raises if it ends with an error or stalls."""
    jobs = []
    while (job := await next_job(call, timeout)) is not None:
        jobs.append(job)
    assert await call.code() == grpc.StatusCode.OK
    return jobs


async def read_until(call: grpc.aio.UnaryStreamCall, done, timeout: float = STEP_TIMEOUT_S) -> list[job_pb2.Job]:  # type: ignore[no-untyped-def]
    jobs = []
    while True:
        job = await next_job(call, timeout)
        assert job is not None, f"stream ended early after {[(j.job_no, j.version) for j in jobs]}"
        jobs.append(job)
        if done(job):
            return jobs


async def report(served, lease: worker_pb2.Lease, stage: str, units: int, total: int | None = 100) -> None:  # type: ignore[no-untyped-def]
    await served.workers.ReportStage(worker_pb2.ReportStageRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, stage=stage, processed_units=units, total_units=total,
    ))  # fmt: skip


async def complete(served, lease: worker_pb2.Lease) -> job_pb2.Job:  # type: ignore[no-untyped-def]
    request = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
    job: job_pb2.Job = await served.workers.Complete(request)
    return job


async def fail(served, lease: worker_pb2.Lease, retryable: bool = False) -> job_pb2.Job:  # type: ignore[no-untyped-def]
    request = worker_pb2.FailRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, category=job_pb2.JobError.INPUT_INVALID,
        message="the input is not a video", retryable=retryable,
    )  # fmt: skip
    job: job_pb2.Job = await served.workers.Fail(request)
    return job


def assert_strictly_increasing(jobs: list[job_pb2.Job]) -> None:
    versions = [j.version for j in jobs]
    assert versions == sorted(set(versions)), f"versions not strictly increasing: {versions}"


def phases(jobs: list[job_pb2.Job]) -> list[tuple[str, str]]:
    """(status, stage) per update with consecutive repeats folded: what coalescing keeps."""
    out: list[tuple[str, str]] = []
    for j in jobs:
        phase = (job_pb2.Job.Status.Name(j.status), j.stage)
        if not out or out[-1] != phase:
            out.append(phase)
    return out
