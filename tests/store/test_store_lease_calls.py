"""A worker's calls on its lease as the store decides them: report, heartbeat, the endings,
and the guards that keep a stale or forged token from writing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from clocks import MovableClock
from store_support import (
    A_LEASE,
    cancel,
    claim,
    complete,
    confirm_cancel,
    fail,
    get,
    leased,
    one,
    reap,
    refusal,
    release,
    renew,
    report,
    retrying,
    submit,
    worker,
)

from jobwire.db import leases
from jobwire.db.store import JobStore
from jobwire.domain.errors import (
    CancelNotRequested,
    InvalidArgument,
    ProgressRegression,
    TotalChanged,
    WorkerLeaseLost,
)
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import ErrorCategory
from jobwire.domain.lease import LeaseState
from jobwire.domain.retry import RetryPolicy
from jobwire.domain.review import ReviewRequest
from jobwire.domain.states import Status
from jobwire.process_state.evidence_limit import PER_WINDOW

Rows = Callable[[str], list[dict[str, Any]]]


async def test_a_report_moves_progress_and_renews_the_lease(
    store: JobStore, clock: MovableClock, row: Callable[[str], dict[str, Any]]
) -> None:
    job, lease = await leased(store)
    later = clock.advance(timedelta(seconds=20))
    status = await one(store, report(lease, "PROCESSING", 3, total=10, checkpoint=b"cp-3"))
    assert status.state is LeaseState.OK and status.lease_expires_at is not None
    assert later <= status.lease_expires_at - A_LEASE <= clock.now()
    now = get(store, job.job_no)
    assert (now.stage, now.progress.processed_units, now.progress.total_units) == ("PROCESSING", 3, 10)
    assert now.progress.percent == 30 and now.version == 3
    stored = row(job.job_no)
    assert stored["checkpoint"] == b"cp-3" and stored["lease_expires_at"] == status.lease_expires_at


@pytest.mark.parametrize(
    ("stage", "processed", "total", "refused"),
    [
        ("PROCESSING", 4, 10, ProgressRegression),  # units went back
        ("PROCESSING", 6, 20, TotalChanged),  # the stage's total is known
        ("PROCESSING", 11, None, InvalidArgument),  # past the total
        ("NOT_A_STAGE", 1, None, InvalidArgument),
    ],
)
async def test_progress_never_goes_back_and_a_total_stays(
    store: JobStore, stage: str, processed: int, total: int | None, refused: type[Exception]
) -> None:
    job, lease = await leased(store)
    await one(store, report(lease, "PROCESSING", 5, total=10))
    before = get(store, job.job_no)
    assert isinstance(await refusal(store, report(lease, stage, processed, total=total)), refused)
    assert get(store, job.job_no).version == before.version  # a refused report writes nothing


async def test_a_stage_behind_the_current_one_is_refused(store: JobStore) -> None:
    _, lease = await leased(store)
    await one(store, report(lease, "VERIFYING", 0))
    assert isinstance(await refusal(store, report(lease, "PROCESSING", 9)), ProgressRegression)


async def test_a_heartbeat_renews_without_a_version(
    store: JobStore, clock: MovableClock, row: Callable[[str], dict[str, Any]]
) -> None:
    job, lease = await leased(store)
    clock.advance(timedelta(seconds=25))
    status = await one(store, renew(lease))
    assert status.lease_expires_at is not None and status.lease_expires_at > lease.lease_expires_at
    assert row(job.job_no)["lease_expires_at"] == status.lease_expires_at
    assert get(store, job.job_no).version == 2  # nobody sees a renewal


async def test_a_heartbeat_revives_a_stalled_lease(store: JobStore, clock: MovableClock, trail: Rows) -> None:
    job, lease = await leased(store)
    clock.advance(A_LEASE + timedelta(seconds=1))
    assert (await reap(store)).stalled == 1
    assert get(store, job.job_no).stalled
    assert (await one(store, renew(lease))).state is LeaseState.OK
    revived = get(store, job.job_no)
    assert not revived.stalled and revived.status is Status.RUNNING
    assert [e["kind"] for e in trail(job.job_no)][-2:] == [EventKind.LEASE_EXPIRED, EventKind.LEASE_REVIVED]


async def test_complete_ends_ready_with_the_result(store: JobStore, clock: MovableClock) -> None:
    job, lease = await leased(store)
    clock.advance(timedelta(seconds=5))
    done = await one(store, complete(lease))
    assert done.status is Status.READY and done.result is not None and done.result.sha256 == "ab" * 32
    assert done.finished_at == done.updated_at and done.finished_at is not None
    assert done.finished_at >= job.created_at + timedelta(seconds=5)


async def test_a_replayed_ending_answers_the_job_as_it_is(store: JobStore) -> None:
    _job, lease = await leased(store)
    done = await one(store, complete(lease))
    again = await one(store, complete(lease))
    assert again == done  # the same version: nothing written twice
    assert isinstance(await refusal(store, fail(lease)), WorkerLeaseLost)  # another ending with that token


async def test_a_retryable_failure_waits_its_backoff(
    store: JobStore, clock: MovableClock, row: Callable[[str], dict[str, Any]]
) -> None:
    job, lease = await leased(store, retry=RetryPolicy(max_attempts=2, initial_backoff_s=60))
    failed = await one(store, fail(lease))
    assert failed.status is Status.QUEUED and row(job.job_no)["error_category"] == "PROCESSING_ERROR"
    assert failed.run_after == failed.updated_at + timedelta(seconds=60)
    assert await claim(store) == []
    clock.advance(timedelta(seconds=61))
    [second] = await claim(store)
    assert second.attempt == 2
    last = await one(store, fail(second))
    assert last.status is Status.FAILED and last.error is not None
    assert last.error.category is ErrorCategory.PROCESSING_ERROR and last.finished_at is not None


async def test_a_failure_that_is_not_retryable_ends_failed(store: JobStore) -> None:
    _, lease = await leased(store)
    failed = await one(store, fail(lease, retryable=False, category=ErrorCategory.INPUT_INVALID))
    assert failed.status is Status.FAILED and failed.attempt == 1


async def test_confirm_cancel_needs_a_cancel_requested(store: JobStore) -> None:
    job, lease = await leased(store)
    assert isinstance(await refusal(store, confirm_cancel(lease)), CancelNotRequested)
    assert (await one(store, cancel(job.job_no))).status is Status.CANCEL_REQUESTED
    status = await one(store, renew(lease))
    assert status.state is LeaseState.CANCEL_REQUESTED  # the worker hears it on its next call
    done = await one(store, confirm_cancel(lease))
    assert done.status is Status.CANCELLED and done.finished_at is not None


async def test_a_failure_after_a_cancel_request_ends_cancelled(store: JobStore) -> None:
    job, lease = await leased(store, retry=retrying())
    await one(store, cancel(job.job_no))
    assert (await one(store, fail(lease))).status is Status.CANCELLED


async def test_release_queues_again_with_the_checkpoint_and_charges_nothing(
    store: JobStore, row: Callable[[str], dict[str, Any]]
) -> None:
    job, lease = await leased(store, retry=RetryPolicy(max_attempts=1))
    released = await one(store, release(lease, checkpoint=b"cp"))
    assert released.status is Status.QUEUED and released.stage is None
    [again] = await claim(store, worker("w2"))
    assert again.checkpoint == b"cp" and again.attempt == 2
    assert row(job.job_no)["attempt_base"] == 1  # one attempt allowed, and still one left


async def test_await_review_leaves_the_lease_and_the_attempt_clock(
    store: JobStore, row: Callable[[str], dict[str, Any]]
) -> None:
    job, lease = await leased(store)
    op = leases.AwaitReview(
        tenant=lease.tenant, job_no=lease.job_no, token=lease.worker_token,
        request=ReviewRequest(assignee="ana", items=("page 3",)),
    )  # fmt: skip
    waiting = await one(store, op)
    assert waiting.status is Status.WAITING and waiting.review_assignee == "ana"
    stored = row(job.job_no)
    assert stored["worker_token"] is None and stored["attempt_deadline"] is None
    assert isinstance(await refusal(store, report(lease, "PROCESSING", 1)), WorkerLeaseLost)


async def test_a_stale_token_writes_nothing_and_is_kept_as_evidence(
    store: JobStore, clock: MovableClock, trail: Rows
) -> None:
    job, first = await leased(store, retry=retrying())
    clock.advance(A_LEASE + timedelta(seconds=1))
    await reap(store)  # stalled, then requeued by its RETRY policy
    [second] = await claim(store, worker("w2"))
    before = get(store, job.job_no)
    for call in (report(first, "PROCESSING", 1), complete(first), fail(first), release(first)):
        assert isinstance(await refusal(store, call), WorkerLeaseLost)
    after = get(store, job.job_no)
    assert after.version == before.version and after.status is Status.RUNNING
    late = [e for e in trail(job.job_no) if e["kind"] == EventKind.LATE_CALL_REJECTED]
    assert len(late) == PER_WINDOW == 3 and not any(e["visible"] for e in late)  # a fourth is refused, unrecorded
    assert "epoch 1" in late[0]["detail"]
    assert (await one(store, complete(second))).status is Status.READY


async def test_a_forged_token_is_refused_and_leaves_no_evidence(store: JobStore, trail: Rows) -> None:
    job, lease = await leased(store)
    forged = leases.Complete(
        tenant=lease.tenant, job_no=lease.job_no, token="1.AAAAAAAAAAAAAAAAAAAAAAAA", result=complete(lease).result
    )
    events = len(trail(job.job_no))
    assert isinstance(await refusal(store, forged), WorkerLeaseLost)
    assert len(trail(job.job_no)) == events
    other_tenant = leases.Complete(tenant="globex", job_no=lease.job_no, token=lease.worker_token, result=forged.result)
    assert isinstance(await refusal(store, other_tenant), WorkerLeaseLost)
    assert get(store, job.job_no).status is Status.RUNNING


async def test_a_submitted_job_is_not_leased(store: JobStore) -> None:
    job = await submit(store)
    made_up = leases.Renew(tenant=job.tenant, job_no=job.job_no, token="1.x")
    assert isinstance(await refusal(store, made_up), WorkerLeaseLost)


async def test_await_review_after_a_cancel_request_ends_cancelled(store: JobStore) -> None:
    job, lease = await leased(store)
    await one(store, cancel(job.job_no))
    request = ReviewRequest(assignee="ana")
    op = leases.AwaitReview(tenant=lease.tenant, job_no=job.job_no, token=lease.worker_token, request=request)
    assert (await one(store, op)).status is Status.CANCELLED  # nobody needs to review a job that is ending
