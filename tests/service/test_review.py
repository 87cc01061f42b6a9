"""Waiting for a person over real gRPC on SQLite: AwaitReview, Resolve, and what
neither the reaper nor the timeout sweeps may do to a WAITING job.

Where something must *not* happen, a canary job that the same sweep must act on is awaited
first: once the canary is handled, the sweep has run past the WAITING job too.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from auth_files import Token, write_auth_file
from served import Served, eventually, housekeeping_round, start_server
from service_support import (
    LEASE_LOST,
    claim,
    duration,
    events,
    get,
    heartbeat,
    rpc_error,
    running,
    stop_server,
    submit,
    when,
)

from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(90)

WAITING = job_pb2.Job.WAITING
APPROVE, REJECT = job_pb2.Review.APPROVE, job_pb2.Review.REJECT
ONE_ATTEMPT = job_pb2.RetryPolicy(max_attempts=1, initial_backoff=duration(0))


def await_review(
    s: Served, lease: worker_pb2.Lease, assignee: str = "alice", items: tuple[str, ...] = (), **fields: Any
) -> Any:
    request = worker_pb2.AwaitReviewRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, assignee=assignee, items=list(items), **fields
    )
    return s.workers.AwaitReview(request)


def resolve(s: Served, job_no: str, decision: int, note: str = "", **call: Any) -> Any:
    return s.jobs.Resolve(job_pb2.ResolveRequest(job_no=job_no, decision=decision, note=note), **call)  # type: ignore[arg-type]


async def leased(s: Served, job_type: str, lease_s: float, **fields: Any) -> worker_pb2.Lease:
    job = await submit(s, job_type, **fields)
    (lease,) = await claim(s, job_type, lease=lease_s)
    assert lease.job_no == job.job_no
    return lease


async def waiting_job(s: Served, lease_s: float = 30.0, **fields: Any) -> tuple[job_pb2.Job, worker_pb2.Lease]:
    """A job that asked alice to review two items, with a checkpoint: (the job WAITING, the ended lease)."""
    lease = await leased(s, "frames", lease_s, **fields)
    job = await await_review(s, lease, items=("Totals match the ledger", "No duplicate rows"), checkpoint=b"row-500")
    return job, lease


async def test_await_review_waits_with_no_lease_and_approve_runs_it_again_uncharged(serve: Any) -> None:
    s: Served = await serve(reaper_interval_seconds=0.1, stall_grace_seconds=0.1)
    limits = job_pb2.Timeouts(attempt_timeout=duration(1))
    job, old = await waiting_job(s, lease_s=1.0, retry_policy=ONE_ATTEMPT, timeouts=limits)
    assert (job.status, job.review_assignee, list(job.review_items)) == (
        WAITING, "alice", ["Totals match the ledger", "No duplicate rows"],
    )  # fmt: skip
    assert job.display.detail == "Waiting for review by alice · Totals match the ledger · No duplicate rows"
    assert (job.cancellable, job.stage) == (True, "")
    zh = await get(s, job.job_no, "zh-CN")
    assert zh.display.status_label == "等待审核" and zh.display.detail.startswith("等待 alice 审核")
    # The lease ended: its holder is told so, and nothing it sends is taken.
    assert (await heartbeat(s, old)).state == worker_pb2.LeaseState.LOST
    report = worker_pb2.ReportStageRequest(job_no=job.job_no, worker_token=old.worker_token, stage="PREPARING")
    assert await rpc_error(s.workers.ReportStage(report)) == LEASE_LOST
    assert (await await_review(s, old)).status == WAITING  # a repeat of the same call replays

    # Canaries: a 1 s lease nobody renews, and an attempt past the same 1 s limit. Once the
    # reaper and the sweep have acted on them, they have looked past the WAITING job too.
    lapsed = await leased(s, "lapsed", 1.0)
    late = await leased(s, "late", 30.0, retry_policy=ONE_ATTEMPT, timeouts=limits)
    await eventually(when(s, lapsed.job_no, lambda j: j.stalled), timeout=30, what="the reaper marks the canary")
    await eventually(when(s, late.job_no, lambda j: j.status == job_pb2.Job.FAILED), timeout=30, what="sweep")
    still = await get(s, job.job_no)
    assert (still.status, still.version, still.stalled) == (WAITING, job.version, False)
    changes = [e.kind for e in await events(s, job.job_no) if e.kind != "LATE_CALL_REJECTED"]
    assert changes == ["SUBMITTED", "CLAIMED", "AWAITING_REVIEW", "CHECKPOINT_SAVED"]  # the checkpoint it handed over

    approved = await resolve(s, job.job_no, APPROVE, "Checked with finance")
    assert (approved.status, approved.max_attempts) == (job_pb2.Job.QUEUED, 2)  # the attempt was given back
    (lease,) = await claim(s)
    assert (lease.job_no, lease.attempt, lease.checkpoint, lease.has_checkpoint) == (job.job_no, 2, b"row-500", True)
    assert (lease.review.decision, lease.review.note, lease.review.resolved_by) == (
        APPROVE, "Checked with finance", "default",
    )  # fmt: skip
    trail = await events(s, job.job_no)
    approval = next(e for e in trail if e.kind == "REVIEW_APPROVED")
    assert (approval.from_status, approval.to_status) == (WAITING, job_pb2.Job.QUEUED)
    assert approval.detail == "APPROVE by default: Checked with finance"


async def test_reject_fails_it_rejected_with_the_note_made_plain(served: Served) -> None:
    job, _ = await waiting_job(served)
    note = "Totals are off; see /srv/finance/ledger.csv"
    failed = await resolve(served, job.job_no, REJECT, note)
    assert failed.status == job_pb2.Job.FAILED
    assert (failed.error.category, failed.error.retryable) == (job_pb2.JobError.REJECTED, False)
    assert failed.error.message == "Totals are off; see [path]"  # a user never sees a path
    assert failed.display.actions == [job_pb2.Display.VIEW]  # not retryable
    rejection = [e for e in await events(served, job.job_no) if e.kind == "REVIEW_REJECTED"]
    assert [(e.to_status, e.detail) for e in rejection] == [(job_pb2.Job.FAILED, f"REJECT by default: {note}")]
    # Decided once: a second decision finds nothing waiting.
    code, reason = await rpc_error(resolve(served, job.job_no, APPROVE))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "JOB_NOT_WAITING")


async def test_cancel_ends_a_waiting_job_at_once(served: Served) -> None:
    job, _ = await waiting_job(served)
    cancelled = await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
    assert cancelled.status == job_pb2.Job.CANCELLED
    assert await rpc_error(resolve(served, job.job_no, APPROVE)) == (
        grpc.StatusCode.FAILED_PRECONDITION, "JOB_NOT_WAITING",
    )  # fmt: skip


async def test_resolve_refuses_a_job_that_is_not_waiting(served: Served) -> None:
    queued = await submit(served)
    _, lease = await running(served, job_type="busy")
    for job_no in (queued.job_no, lease.job_no):
        code, reason = await rpc_error(resolve(served, job_no, APPROVE))
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "JOB_NOT_WAITING")
    assert (await get(served, queued.job_no)).status == job_pb2.Job.QUEUED
    assert (await get(served, lease.job_no)).status == job_pb2.Job.RUNNING


async def test_the_job_timeout_still_ends_a_waiting_job(serve: Any) -> None:
    s: Served = await serve(reaper_interval_seconds=0)
    job, _ = await waiting_job(s, timeouts=job_pb2.Timeouts(job_timeout=duration(60)))
    s.clock.advance(timedelta(seconds=61))
    await housekeeping_round(s)
    failed = await get(s, job.job_no)
    assert failed.status == job_pb2.Job.FAILED
    assert (failed.error.category, failed.error.retryable) == (job_pb2.JobError.TIMEOUT, False)
    assert [e.kind for e in await events(s, job.job_no)][-1] == "JOB_TIMED_OUT"


async def test_list_jobs_by_waiting_and_assignee(served: Served) -> None:
    for_alice, _ = await waiting_job(served)
    _, lease = await running(served, job_type="other")
    for_bob = await await_review(served, lease, assignee="bob")
    await submit(served)  # QUEUED, nobody's review

    async def listed(**fields: Any) -> list[str]:
        reply = await served.jobs.ListJobs(job_pb2.ListJobsRequest(**fields))
        return [j.job_no for j in reply.jobs]

    assert await listed(statuses=[WAITING]) == [for_bob.job_no, for_alice.job_no]
    assert await listed(statuses=[WAITING], assignee="alice") == [for_alice.job_no]
    assert await listed(assignee="bob") == [for_bob.job_no]
    assert await listed(assignee="carol") == []


TOKENS = {
    "client": Token("secret-review-client", "acme", "client"),
    "worker": Token("secret-review-worker", "acme", "worker"),
    "admin": Token("secret-review-admin", "acme", "admin"),
}


async def test_only_clients_and_admins_resolve_and_only_workers_await_review(database_url: str, tmp_path: Path) -> None:
    s = await start_server(database_url, auth_file=write_auth_file(tmp_path / "auth.toml", TOKENS.values()))
    try:
        as_client, as_worker, as_admin = (TOKENS[r].metadata for r in ("client", "worker", "admin"))
        job = (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=as_client)).job
        request = worker_pb2.ClaimRequest(worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name="frames")])
        (lease,) = (await s.workers.Claim(request, metadata=as_worker)).leases
        review = worker_pb2.AwaitReviewRequest(job_no=job.job_no, worker_token=lease.worker_token, assignee="alice")
        denied = (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
        assert await rpc_error(s.workers.AwaitReview(review, metadata=as_client)) == denied
        assert (await s.workers.AwaitReview(review, metadata=as_worker)).status == WAITING
        assert await rpc_error(resolve(s, job.job_no, APPROVE, metadata=as_worker)) == denied
        assert (await resolve(s, job.job_no, APPROVE, "ok", metadata=as_admin)).status == job_pb2.Job.QUEUED
        approval = [e for e in await _events(s, job.job_no, as_admin) if e.kind == "REVIEW_APPROVED"]
        assert [e.detail for e in approval] == ["APPROVE by acme: ok"]  # the caller's tenant resolved it
    finally:
        await stop_server(s)


async def _events(s: Served, job_no: str, metadata: Any) -> list[admin_pb2.JobEvent]:
    reply = await s.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job_no), metadata=metadata)
    return list(reply.events)
