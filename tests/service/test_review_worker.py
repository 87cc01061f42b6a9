"""The worker SDK against a real server on SQLite: a handler hands its job to a
person with ctx.await_review, and after an approval the next attempt reads ctx.review and
resumes from the checkpoint it saved."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from served import Served, eventually
from service_support import events, submit, when

from jobwire.v1 import job_pb2
from jobwire.worker.sdk import Handlers, JobContext, Result, Review, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(90)

handlers = Handlers()
seen: list[tuple[int, Review | None, bytes | None]] = []


@handlers.job("payout")
def payout(ctx: JobContext) -> Result:
    seen.append((ctx.attempt, ctx.review, ctx.last_checkpoint))
    ctx.stage("PROCESSING")
    if ctx.review is None:
        ctx.await_review("alice", ["Payee is new", "Amount over 10,000"], checkpoint=b"checked-payee")
    return Result.from_json({"paid": True, "note": ctx.review.note})


async def test_a_handler_waits_for_review_then_runs_again_after_approval(serve: Any, tmp_path: Path) -> None:
    seen.clear()
    s: Served = await serve()
    job = await submit(s, "payout", retry_policy=job_pb2.RetryPolicy(max_attempts=1))
    config = WorkerConfig(
        target=s.target, worker_id="w-sdk", concurrency=1, lease_duration=30, claim_wait=0.2, grace_period=2,
        results_dir=tmp_path / "results", tmp_root=tmp_path / "tmp",
    )  # fmt: skip
    worker = Worker(config, handlers)
    running = asyncio.create_task(worker.run())
    try:
        waiting = await eventually(when(s, job.job_no, lambda j: j.status == job_pb2.Job.WAITING), what="WAITING")
        assert (waiting.review_assignee, list(waiting.review_items)) == (
            "alice",
            ["Payee is new", "Amount over 10,000"],
        )
        await s.jobs.Resolve(job_pb2.ResolveRequest(job_no=job.job_no, decision=job_pb2.Review.APPROVE, note="ok"))
        ready = await eventually(when(s, job.job_no, lambda j: j.status == job_pb2.Job.READY), what="READY")
    finally:
        worker.shutdown()
        assert await asyncio.wait_for(running, 10) == 0  # every attempt ended cleanly
    assert ready.attempt == 2 and ready.max_attempts == 2  # one attempt allowed, and the review's not charged
    (first, before, none), (second, review, checkpoint) = seen
    assert (first, before, none) == (1, None, None)
    assert review is not None and (second, review.decision, review.note, checkpoint) == (
        2, "APPROVE", "ok", b"checked-payee",
    )  # fmt: skip
    ends = {"CLAIMED", "AWAITING_REVIEW", "REVIEW_APPROVED", "COMPLETED"}  # progress reports may be coalesced
    trail = [e.kind for e in await events(s, job.job_no) if e.kind in ends]
    assert trail == ["CLAIMED", "AWAITING_REVIEW", "REVIEW_APPROVED", "CLAIMED", "COMPLETED"]
    assert list((tmp_path / "tmp").iterdir()) == []
