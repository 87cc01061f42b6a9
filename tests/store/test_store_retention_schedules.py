"""Retention purging by the store's clock, and schedules: due by that clock, advanced once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from clocks import MovableClock
from store_support import SCOPE, TENANT, cancel, complete, fail, get, leased, one, submit

from jobwire.db.retention import ExpiredArtifact, Purged, Retention
from jobwire.db.store import JobStore
from jobwire.domain.errors import InvalidTransition, JobNotFound, ScheduleExists
from jobwire.domain.schedules import Advance, CatchUp, Overlap, ScheduleRecord, Timing
from jobwire.domain.states import Status

KEEP = Retention.days(ready=30, cancelled=30, failed=90)


async def test_a_finished_job_goes_once_past_its_retention(store: JobStore, clock: MovableClock) -> None:
    ready, lease = await leased(store)
    await one(store, complete(lease))
    cancelled = await submit(store)
    await one(store, cancel(cancelled.job_no))
    failed, lease = await leased(store)
    await one(store, fail(lease, retryable=False))
    queued = await submit(store)
    clock.advance(timedelta(days=30) - timedelta(minutes=1))
    assert store.purge_expired(KEEP) == Purged(batches=0)
    clock.advance(timedelta(minutes=2))
    purged = store.purge_expired(KEEP)
    assert (purged.jobs, purged.artifacts) == (2, 1) and purged.events >= 5
    for gone in (ready, cancelled):
        with pytest.raises(JobNotFound):
            get(store, gone.job_no)
    assert get(store, failed.job_no).status is Status.FAILED  # FAILED is kept 90 days
    clock.advance(timedelta(days=60))
    assert store.purge_expired(KEEP).jobs == 1
    assert get(store, queued.job_no).status is Status.QUEUED  # an unfinished job is never purged


async def test_a_result_that_would_not_go_keeps_its_rows(store: JobStore, clock: MovableClock) -> None:
    job, lease = await leased(store)
    await one(store, complete(lease))
    clock.advance(timedelta(days=31))
    asked: list[ExpiredArtifact] = []

    def refuse(found: ExpiredArtifact) -> None:
        asked.append(found)
        raise OSError("the bucket is read-only")

    assert store.purge_expired(KEEP, refuse) == Purged(kept=1, batches=0)
    assert [a.job_no for a in asked] == [job.job_no] and get(store, job.job_no).status is Status.READY
    assert store.purge_expired(KEEP, asked.append).jobs == 1  # the deleter works again: gone


async def test_delete_finished_removes_a_terminal_job_now(store: JobStore) -> None:
    job, lease = await leased(store)
    with pytest.raises(InvalidTransition):
        store.delete_finished(SCOPE, job.job_no)
    await one(store, complete(lease))
    store.delete_finished(SCOPE, job.job_no)
    with pytest.raises(JobNotFound):
        store.delete_finished(SCOPE, job.job_no)


LIMIT = 10  # schedules a tenant may keep (JOBWIRE_MAX_SCHEDULES_PER_TENANT)


def schedule(store: JobStore, schedule_id: str = "tick", every: timedelta = timedelta(minutes=5)) -> ScheduleRecord:
    now = store.now().replace(microsecond=0)
    timing = Timing(cron=None, every=every, time_zone="UTC", anchor=now)
    return ScheduleRecord(
        tenant=TENANT, schedule_id=schedule_id, queue="default", timing=timing, template=b"",
        overlap=Overlap.ALLOW, catch_up=CatchUp.NONE, next_fire_at=timing.next_after(now),
    )  # fmt: skip


async def test_a_schedule_is_due_by_the_store_clock_and_advanced_once(
    store: JobStore, clock: MovableClock, replica: JobStore
) -> None:
    made = store.create_schedule(schedule(store), LIMIT)
    with pytest.raises(ScheduleExists):
        store.create_schedule(schedule(store), LIMIT)
    assert made.next_fire_at is not None
    assert store.due_schedules(store.now(), 10).due == []
    clock.advance(timedelta(minutes=5))
    [due] = store.due_schedules(store.now(), 10).due
    assert due.schedule.next_fire_at == made.next_fire_at and not due.previous_unfinished
    following = made.timing.next_after(made.next_fire_at)
    job = await submit(store)
    fired = (made.next_fire_at, job.job_no)
    # Two replicas found it due: one advances it, the other's guard matches nothing.
    move = Advance(schedule=due.schedule, due_at=made.next_fire_at, next_fire_at=following, fired=fired)
    assert await store.advance_schedules([move]) == [True]
    assert await replica.advance_schedules([move]) == [False]
    after = store.get_schedule(SCOPE, "tick")
    assert (after.next_fire_at, after.last_job_no, after.last_fire_at) == (following, job.job_no, made.next_fire_at)
    assert store.due_schedules(store.now(), 10).due == []


async def test_a_paused_schedule_is_never_due(store: JobStore, clock: MovableClock) -> None:
    store.create_schedule(schedule(store), LIMIT)
    paused = store.set_schedule_paused(SCOPE, "tick", None)
    assert paused.paused and paused.next_fire_at is None
    clock.advance(timedelta(hours=1))
    assert store.due_schedules(store.now(), 10).due == []
    resumed = store.set_schedule_paused(SCOPE, "tick", paused.timing.next_after(store.now()))
    assert not resumed.paused and resumed.next_fire_at is not None and resumed.next_fire_at > store.now()
