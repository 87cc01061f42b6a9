"""A person's decisions as the store decides them: cancel in every status, retry, resolve, requeue."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from clocks import MovableClock
from store_support import (
    A_LEASE,
    SCOPE,
    cancel,
    claim,
    complete,
    fail,
    get,
    leased,
    one,
    reap,
    refusal,
    requeue,
    retry,
    submit,
    worker,
)

from jobwire.db import leases, user_actions
from jobwire.db.store import JobStore
from jobwire.domain.commands import Scope
from jobwire.domain.errors import (
    InvalidTransition,
    JobNotCancellable,
    JobNotFound,
    NotRetryable,
    NotWaiting,
    WorkerLeaseLost,
)
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import ErrorCategory, JobRecord
from jobwire.domain.retry import RetryPolicy
from jobwire.domain.review import Decision, Review, ReviewRequest
from jobwire.domain.stages import StageDef
from jobwire.domain.states import Status

Rows = Callable[[str], list[dict[str, Any]]]


async def waiting(store: JobStore) -> JobRecord:
    """A job its worker handed to a person (WAITING)."""
    job, lease = await leased(store)
    request = ReviewRequest(assignee="ana")
    await one(
        store, leases.AwaitReview(tenant=lease.tenant, job_no=job.job_no, token=lease.worker_token, request=request)
    )
    return get(store, job.job_no)


def resolve(job_no: str, decision: Decision) -> user_actions.Resolve:
    return user_actions.Resolve(
        scope=SCOPE, job_no=job_no, review=Review(decision=decision, note="looks right", resolved_by="ana")
    )


async def test_cancel_ends_a_queued_or_waiting_job_at_once(store: JobStore) -> None:
    queued = await submit(store)
    done = await one(store, cancel(queued.job_no))
    assert done.status is Status.CANCELLED and done.finished_at is not None
    held = await waiting(store)
    assert (await one(store, cancel(held.job_no))).status is Status.CANCELLED


async def test_cancel_asks_a_running_job_to_stop_and_is_idempotent(store: JobStore) -> None:
    job, lease = await leased(store)
    asked = await one(store, cancel(job.job_no))
    assert asked.status is Status.CANCEL_REQUESTED
    assert await one(store, cancel(job.job_no)) == asked  # again: nothing new
    assert (await one(store, complete(lease))).status is Status.READY  # it finished anyway: its result stands


async def test_cancel_refuses_a_stage_that_cannot_be_cancelled(store: JobStore) -> None:
    await submit(store)
    plan = (StageDef(code="COMMITTING", cancellable=False),)
    [lease] = await claim(store, worker(plans={"frames": plan}))
    refused = await refusal(store, cancel(lease.job_no))
    assert isinstance(refused, JobNotCancellable)
    assert get(store, lease.job_no).status is Status.RUNNING


async def test_cancel_refuses_a_finished_job(store: JobStore) -> None:
    job, lease = await leased(store)
    await one(store, complete(lease))
    assert isinstance(await refusal(store, cancel(job.job_no)), JobNotCancellable)
    cancelled = await submit(store)
    await one(store, cancel(cancelled.job_no))
    assert (await one(store, cancel(cancelled.job_no))).status is Status.CANCELLED  # idempotent


async def test_another_tenants_job_or_queue_is_not_found(store: JobStore) -> None:
    job = await submit(store)
    for scope in (Scope(tenant="globex"), Scope(tenant=job.tenant, queues=frozenset({"other"}))):
        assert isinstance(await refusal(store, user_actions.Cancel(scope=scope, job_no=job.job_no)), JobNotFound)
    assert isinstance(await refusal(store, cancel("PT-19990101-001")), JobNotFound)


async def test_retry_queues_a_retryable_failure_with_fresh_attempts(
    store: JobStore, row: Callable[[str], dict[str, Any]]
) -> None:
    job, lease = await leased(store, retry=RetryPolicy(max_attempts=1))
    assert (await one(store, fail(lease))).status is Status.FAILED
    again = await one(store, retry(job.job_no))
    assert again.status is Status.QUEUED and again.finished_at is None
    assert row(job.job_no)["attempt_base"] == 1  # the failed attempt no longer counts
    [second] = await claim(store)
    assert second.attempt == 2


async def test_retry_refuses_what_is_not_a_retryable_failure(store: JobStore) -> None:
    job, lease = await leased(store)
    assert isinstance(await refusal(store, retry(job.job_no)), InvalidTransition)  # RUNNING
    await one(store, fail(lease, retryable=False, category=ErrorCategory.INPUT_INVALID))
    refused = await refusal(store, retry(job.job_no))
    assert isinstance(refused, NotRetryable) and "force" in refused.message


async def test_a_forced_retry_queues_any_failure_and_says_who(store: JobStore, trail: Rows) -> None:
    job, lease = await leased(store)
    await one(store, fail(lease, retryable=False, category=ErrorCategory.INPUT_INVALID))
    assert (await one(store, retry(job.job_no, forced_by="root"))).status is Status.QUEUED
    [retried] = [e for e in trail(job.job_no) if e["kind"] == EventKind.RETRIED]
    assert retried["detail"] == "forced by admin root: error was INPUT_INVALID"


async def test_resolve_approve_queues_and_reject_fails(store: JobStore) -> None:
    approved = await waiting(store)
    queued = await one(store, resolve(approved.job_no, Decision.APPROVE))
    assert queued.status is Status.QUEUED
    [again] = await claim(store)
    assert again.review is not None and again.review.note == "looks right" and again.attempt == 2
    rejected = await waiting(store)
    failed = await one(store, resolve(rejected.job_no, Decision.REJECT))
    assert failed.status is Status.FAILED and failed.error is not None
    assert failed.error.category is ErrorCategory.REJECTED
    assert isinstance(await refusal(store, resolve(rejected.job_no, Decision.APPROVE)), NotWaiting)


async def test_requeue_refuses_a_live_lease(store: JobStore, clock: MovableClock) -> None:
    job, _lease = await leased(store)
    refused = await refusal(store, requeue(job.job_no))
    assert isinstance(refused, InvalidTransition) and refused.reason == "LEASE_ACTIVE"
    clock.advance(A_LEASE - timedelta(seconds=1))
    assert isinstance(await refusal(store, requeue(job.job_no)), InvalidTransition)  # a second left


async def test_requeue_takes_an_expired_lease_back(store: JobStore, clock: MovableClock, trail: Rows) -> None:
    job, lease = await leased(store)
    clock.advance(A_LEASE + timedelta(seconds=1))  # expired, not yet marked stalled by any reaper
    queued = await one(store, requeue(job.job_no))
    assert queued.status is Status.QUEUED and not queued.stalled
    assert isinstance(await refusal(store, complete(lease)), WorkerLeaseLost)
    [second] = await claim(store, worker("w2"))
    assert second.attempt == 2 and second.worker_token != lease.worker_token
    assert EventKind.REQUEUED in [e["kind"] for e in trail(job.job_no)]


async def test_requeue_takes_a_stalled_lease_back(store: JobStore, clock: MovableClock) -> None:
    job, _ = await leased(store)
    clock.advance(A_LEASE + timedelta(seconds=1))
    await reap(store)
    assert get(store, job.job_no).stalled
    assert (await one(store, requeue(job.job_no))).status is Status.QUEUED
    assert isinstance(await refusal(store, requeue(job.job_no)), InvalidTransition)  # QUEUED now
