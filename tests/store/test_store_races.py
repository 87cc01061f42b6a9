"""The races that matter, run through two stores over one database (two server processes):
their own connections, their own row caches."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from clocks import MovableClock
from store_support import A_LEASE, cancel, claim, complete, get, leased, outcome, report, requeue, submit, worker

from jobwire.db.store import Claim, JobStore
from jobwire.domain.errors import JobNotCancellable, WorkerLeaseLost
from jobwire.domain.job import JobRecord
from jobwire.domain.states import Status


async def test_two_claimers_never_get_one_job(store: JobStore, replica: JobStore) -> None:
    jobs = {(await submit(store)).job_no for _ in range(6)}
    replies = await asyncio.gather(
        *(claimer.apply([Claim(worker(f"w{i}"), 2)]) for i, claimer in enumerate((store, replica) * 4))
    )
    leased_now = [lease.job_no for [leases] in replies for lease in leases]
    assert sorted(leased_now) == sorted(jobs)  # each job leased once, and only once
    assert await claim(store, worker("late"), 6) == []


async def test_a_report_after_a_revoke_elsewhere_is_refused(
    store: JobStore, replica: JobStore, clock: MovableClock
) -> None:
    job, lease = await leased(store)  # `store` keeps the row it wrote: its guess for the holder's next call
    clock.advance(A_LEASE + timedelta(seconds=1))
    assert isinstance(await outcome(replica, requeue(job.job_no)), JobRecord)  # revoked through the other process
    refused = await outcome(store, report(lease, "PROCESSING", 1))
    assert isinstance(refused, WorkerLeaseLost)
    now = get(store, job.job_no)
    assert now.status is Status.QUEUED and now.stage is None  # the guess wrote nothing


async def test_a_report_racing_a_revoke_lands_before_it_or_not_at_all(
    store: JobStore, replica: JobStore, clock: MovableClock
) -> None:
    job, lease = await leased(store)
    clock.advance(A_LEASE + timedelta(seconds=1))
    reported, requeued = await asyncio.gather(
        outcome(store, report(lease, "PROCESSING", 1)), outcome(replica, requeue(job.job_no))
    )
    now = get(store, job.job_no)
    if isinstance(reported, WorkerLeaseLost):  # the revoke came first
        assert isinstance(requeued, JobRecord) and now.status is Status.QUEUED
    else:  # the report came first and renewed the lease: a live lease is not requeued
        assert not isinstance(requeued, JobRecord) and now.status is Status.RUNNING and now.stage == "PROCESSING"


async def test_a_cancel_racing_a_complete_ends_ready_either_way(store: JobStore, replica: JobStore) -> None:
    job, lease = await leased(store)
    cancelled, completed = await asyncio.gather(outcome(replica, cancel(job.job_no)), outcome(store, complete(lease)))
    assert isinstance(completed, JobRecord) and completed.status is Status.READY
    if isinstance(cancelled, JobRecord):  # asked first: the worker finished anyway, its result stands
        assert cancelled.status is Status.CANCEL_REQUESTED and cancelled.version < completed.version
    else:
        assert isinstance(cancelled, JobNotCancellable)
    assert get(store, job.job_no).status is Status.READY
