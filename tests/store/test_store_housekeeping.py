"""What housekeeping decides by the store's clock: the reaper (stalled, then the lease-lost
policy) and the timeout sweeps. Time is moved past each lease and deadline, never waited for."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from clocks import MovableClock
from store_support import (
    A_LEASE,
    cancel,
    claim,
    complete,
    get,
    leased,
    one,
    reap,
    refusal,
    renew,
    report,
    retrying,
    submit,
    sweep,
    worker,
)

from jobwire.db.reaper import Reaped
from jobwire.db.store import JobStore
from jobwire.db.timeouts import Swept
from jobwire.domain.errors import WorkerLeaseLost
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import ErrorCategory
from jobwire.domain.lease import LeaseState
from jobwire.domain.retry import RetryPolicy
from jobwire.domain.states import Status
from jobwire.domain.timeouts import OnNoProgress, Timeouts

Rows = Callable[[str], list[dict[str, Any]]]
GRACE = timedelta(seconds=30)
PAST_THE_LEASE = A_LEASE + timedelta(seconds=1)


async def test_a_live_lease_is_left_alone(store: JobStore, clock: MovableClock) -> None:
    job, _ = await leased(store, retry=retrying())
    clock.advance(A_LEASE - timedelta(seconds=1))
    assert await reap(store) == Reaped()
    assert not get(store, job.job_no).stalled


async def test_an_expired_lease_is_marked_stalled_with_its_evidence(
    store: JobStore, clock: MovableClock, trail: Rows
) -> None:
    job, lease = await leased(store)
    await one(store, report(lease, "PROCESSING", 3, total=10, checkpoint=b"cp"))
    clock.advance(PAST_THE_LEASE)
    assert await reap(store, GRACE) == Reaped(stalled=1)
    stalled = get(store, job.job_no)
    assert stalled.stalled and stalled.status is Status.RUNNING
    [expired] = [e for e in trail(job.job_no) if e["kind"] == EventKind.LEASE_EXPIRED]
    facts = ("worker w1", "stage PROCESSING 2/4", "units 3/10", "checkpoint present", "attempt 1", "test-reaper")
    assert all(fact in expired["detail"] for fact in facts), expired["detail"]
    assert await reap(store, GRACE) == Reaped()  # marked once


async def test_inspect_leaves_a_stalled_job_for_an_operator(store: JobStore, clock: MovableClock) -> None:
    job, lease = await leased(store)  # INSPECT by default
    clock.advance(PAST_THE_LEASE + GRACE * 10)
    assert await reap(store, GRACE) == Reaped(stalled=1)
    assert await reap(store, GRACE) == Reaped()  # never re-run by itself
    assert get(store, job.job_no).status is Status.RUNNING
    assert await claim(store, worker("w2")) == []
    assert (await one(store, complete(lease))).status is Status.READY  # expiry alone revoked nothing


async def test_retry_waits_for_the_grace_then_requeues(store: JobStore, clock: MovableClock) -> None:
    job, lease = await leased(store, retry=retrying())
    clock.advance(PAST_THE_LEASE)
    assert await reap(store, GRACE) == Reaped(stalled=1)
    clock.advance(GRACE - timedelta(seconds=2))
    assert await reap(store, GRACE) == Reaped()  # within the grace: the holder may still speak
    clock.advance(timedelta(seconds=2))
    assert await reap(store, GRACE) == Reaped(requeued=1)
    queued = get(store, job.job_no)
    assert queued.status is Status.QUEUED and queued.attempt == 1 and not queued.stalled
    assert isinstance(await refusal(store, renew(lease)), WorkerLeaseLost)
    [second] = await claim(store, worker("w2"))
    assert second.attempt == 2 and int(second.worker_token.split(".")[0]) > int(lease.worker_token.split(".")[0])


async def test_retry_fails_worker_lost_when_attempts_run_out(store: JobStore, clock: MovableClock) -> None:
    job, _ = await leased(store, retry=retrying(max_attempts=1))
    clock.advance(PAST_THE_LEASE)
    assert await reap(store) == Reaped(stalled=1, failed=1)  # no grace: both steps in one run
    failed = get(store, job.job_no)
    assert failed.status is Status.FAILED and failed.error is not None
    assert failed.error.category is ErrorCategory.WORKER_LOST and failed.error.retryable
    assert "w1" not in failed.error.message  # users see a plain message, never a worker's name


async def test_a_pending_cancel_with_a_dead_worker_ends_cancelled(store: JobStore, clock: MovableClock) -> None:
    job, lease = await leased(store)  # INSPECT: a pending cancel ends CANCELLED whatever the policy
    await one(store, cancel(job.job_no))
    clock.advance(PAST_THE_LEASE + GRACE)
    assert await reap(store, GRACE) == Reaped(stalled=1, cancelled=1)
    assert get(store, job.job_no).status is Status.CANCELLED
    assert isinstance(await refusal(store, complete(lease)), WorkerLeaseLost)


async def test_a_heartbeat_within_the_grace_keeps_the_job(store: JobStore, clock: MovableClock) -> None:
    job, lease = await leased(store, retry=retrying())
    clock.advance(PAST_THE_LEASE)
    await reap(store, GRACE)
    assert (await one(store, renew(lease))).state is LeaseState.OK
    clock.advance(A_LEASE - timedelta(seconds=1))  # past the grace of the expiry it came back from
    assert await reap(store, GRACE) == Reaped()  # renewed: a lease again, not stalled
    assert get(store, job.job_no).status is Status.RUNNING


# -- the timeout sweeps -----------------------------------------------------------------------


async def test_a_job_past_its_job_timeout_fails_whatever_its_status(store: JobStore, clock: MovableClock) -> None:
    queued = await submit(store, "never-claimed", timeouts=Timeouts(job_s=60))
    running, lease = await leased(store, timeouts=Timeouts(job_s=60))
    clock.advance(timedelta(seconds=59))
    assert await sweep(store) == Swept()
    clock.advance(timedelta(seconds=2))
    assert await sweep(store) == Swept(jobs=2)
    for job_no in (queued.job_no, running.job_no):
        ended = get(store, job_no)
        assert ended.status is Status.FAILED and ended.error is not None
        assert ended.error.category is ErrorCategory.TIMEOUT and not ended.error.retryable
    refused = await refusal(store, complete(lease))
    assert isinstance(refused, WorkerLeaseLost) and refused.timed_out  # told TIMED_OUT, not LOST


async def test_an_attempt_past_its_timeout_is_retried_after_the_backoff(store: JobStore, clock: MovableClock) -> None:
    policy = RetryPolicy(max_attempts=2, initial_backoff_s=10)
    job, lease = await leased(store, retry=policy, timeouts=Timeouts(attempt_s=120))
    clock.advance(timedelta(seconds=121))
    await one(store, renew(lease))  # the lease alone is not the attempt: renewed, the attempt still ends
    assert await sweep(store) == Swept(attempts=1)
    queued = get(store, job.job_no)
    assert queued.status is Status.QUEUED and queued.run_after == queued.updated_at + timedelta(seconds=10)
    lost = await refusal(store, renew(lease))
    assert isinstance(lost, WorkerLeaseLost) and lost.timed_out
    clock.advance(timedelta(seconds=11))
    [second] = await claim(store)
    clock.advance(timedelta(seconds=121))
    assert await sweep(store) == Swept(attempts=1)
    failed = get(store, job.job_no)
    assert failed.status is Status.FAILED and failed.error is not None
    assert failed.error.category is ErrorCategory.TIMEOUT and second.attempt == 2


async def test_no_progress_is_marked_or_ends_the_attempt(store: JobStore, clock: MovableClock, trail: Rows) -> None:
    marked, lease = await leased(store, timeouts=Timeouts(stage_s=60))
    ended, _ = await leased(
        store, retry=RetryPolicy(max_attempts=1), timeouts=Timeouts(stage_s=60, on_no_progress=OnNoProgress.FAIL)
    )
    clock.advance(timedelta(seconds=45))
    await one(store, report(lease, "PREPARING", 1))  # progress: its stage_timeout starts again
    clock.advance(timedelta(seconds=30))
    assert await sweep(store) == Swept(no_progress=1)  # the other one
    assert get(store, ended.job_no).status is Status.FAILED
    clock.advance(timedelta(seconds=31))
    assert await sweep(store) == Swept(no_progress=1)
    now = get(store, marked.job_no)
    assert now.status is Status.RUNNING and now.no_progress_for is not None
    assert now.no_progress_for >= timedelta(seconds=60)
    assert EventKind.NO_PROGRESS in [e["kind"] for e in trail(marked.job_no)]
    await one(store, report(lease, "PREPARING", 2))
    assert get(store, marked.job_no).no_progress_for is None  # progress clears the mark
