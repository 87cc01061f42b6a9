"""A handler's bugs against a real server: an unexpected exception is retried under the job's
policy (on SQLite and MariaDB: the retry is the store's state change), and a stage the handler
never declared fails the attempt with words that say which stages exist and how to declare
them, in the worker's log and the trail (on SQLite: its subject is the worker's words)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from served import Served
from service_support import duration, events, run_worker_until, submit

from jobwire.v1 import job_pb2
from jobwire.worker.sdk import Handlers, JobContext, Result, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(90)

handlers = Handlers()
attempts: list[int] = []


@handlers.job("flaky-parser")
def flaky_parser(ctx: JobContext) -> Result:
    attempts.append(ctx.attempt)
    if ctx.attempt == 1:
        raise KeyError("header")  # a bug; fixed (here: gone) by the next attempt
    return Result.from_json({"attempt": ctx.attempt})


@handlers.job("downloader")
def downloader(ctx: JobContext) -> Result:
    ctx.stage(ctx.json()["stage"])  # named at run time: only the call can judge it
    return Result.from_bytes(b"never")


def worker(s: Served, tmp_path: Path) -> Worker:
    config = WorkerConfig(
        target=s.target, worker_id="w-bugs", concurrency=1, lease_duration=30, claim_wait=0.2, grace_period=2,
        tmp_root=tmp_path / "tmp",
    )  # fmt: skip
    return Worker(config, handlers)


def retries(max_attempts: int) -> job_pb2.RetryPolicy:
    return job_pb2.RetryPolicy(max_attempts=max_attempts, initial_backoff=duration(0), max_backoff=duration(0))


@pytest.mark.both_databases  # RUNNING -> QUEUED (RETRY_SCHEDULED) -> RUNNING -> READY in the store
async def test_an_unexpected_exception_is_retried_and_the_next_attempt_completes(
    served: Served, tmp_path: Path
) -> None:
    attempts.clear()
    job = await submit(served, "flaky-parser", retry_policy=retries(2))
    ready = await run_worker_until(served, worker(served, tmp_path), job.job_no, job_pb2.Job.READY)
    assert (ready.attempt, attempts) == (2, [1, 2])
    trail = await events(served, job.job_no)
    (retry,) = [e for e in trail if e.kind == "RETRY_SCHEDULED"]
    assert "\nKeyError: 'header'\nTraceback" in retry.detail  # the operator sees the bug
    assert [e.kind for e in trail if e.kind in ("CLAIMED", "RETRY_SCHEDULED", "COMPLETED")] == [
        "CLAIMED", "RETRY_SCHEDULED", "CLAIMED", "COMPLETED",
    ]  # fmt: skip


async def test_an_undeclared_stage_fails_retryable_with_the_stages_and_the_fix(
    served: Served, tmp_path: Path, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.worker")
    job = await submit(served, "downloader", payload=b'{"stage": "DOWNLOADING"}', retry_policy=retries(1))
    failed = await run_worker_until(served, worker(served, tmp_path), job.job_no, job_pb2.Job.FAILED)
    assert (failed.error.category, failed.error.retryable) == (job_pb2.JobError.PROCESSING_ERROR, True)
    assert failed.error.message == "The job failed while processing."  # users read no code
    assert list(failed.display.actions) == [job_pb2.Display.VIEW, job_pb2.Display.RETRY]  # fixed? retry it
    words = (
        "ctx.stage('DOWNLOADING'): job type 'downloader' has no stage 'DOWNLOADING'; its stages are"
        " PREPARING, PROCESSING, VERIFYING, DELIVERING (the default plan"
    )
    fix = "@handlers.job('downloader', stages=[..., 'DOWNLOADING', ...])"
    (ended,) = [e for e in await events(served, job.job_no) if e.kind == "FAILED"]
    assert f"\nUndeclaredStage: {words}" in ended.detail and fix in ended.detail
    assert words in caplog.text and fix in caplog.text  # the worker's log says it too
