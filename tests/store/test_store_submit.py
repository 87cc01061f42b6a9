"""Submit as the store decides it: the row it makes, idempotency keys that replay or refuse."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from clocks import MovableClock
from store_support import SCOPE, TENANT, new_job, submit, submitted

from jobwire.db.store import JobStore, Submit
from jobwire.domain.errors import IdempotencyKeyReused
from jobwire.domain.states import Status
from jobwire.domain.timeouts import Timeouts


async def test_a_job_is_made_queued_at_the_store_time(
    store: JobStore, clock: MovableClock, row: Callable[[str], dict[str, Any]]
) -> None:
    before = clock.advance(timedelta(days=3))  # every time a submit writes comes from the one clock
    job = await submit(store, priority=5, labels={"team": "a"}, timeouts=Timeouts(job_s=60))
    assert job.status is Status.QUEUED and job.version == 1 and job.attempt == 0
    assert (job.tenant, job.queue, job.priority, dict(job.labels)) == (TENANT, "default", 5, {"team": "a"})
    assert before <= job.created_at <= clock.now()
    assert job.created_at == job.updated_at == job.run_after
    stored = row(job.job_no)
    assert stored["job_deadline"] == job.created_at + timedelta(seconds=60)
    assert stored["worker_token"] is None and stored["lease_epoch"] == 0
    read = store.get(SCOPE, job.job_no, no_worker_after=timedelta(minutes=5))
    assert (read.version, read.created_at, read.run_after) == (job.version, job.created_at, job.run_after)
    assert read.no_worker and read.queue_position == 0  # nobody serves it: nothing claimable ahead of it


async def test_a_run_after_in_the_past_is_now(store: JobStore, clock: MovableClock) -> None:
    now = clock.now()
    later = await submit(store, run_after=now + timedelta(hours=1))
    earlier = await submit(store, run_after=now - timedelta(hours=1))
    assert later.run_after == now + timedelta(hours=1)
    assert earlier.run_after is not None and earlier.run_after >= now


async def test_a_key_replays_the_job_it_made(store: JobStore) -> None:
    first = await submitted(store, new_job(idempotency_key="k1"))
    again = await submitted(store, new_job(idempotency_key="k1"))
    assert not isinstance(first, Exception) and not isinstance(again, Exception)
    assert first[1] is True and again[1] is False
    assert again[0].job_no == first[0].job_no and again[0].version == first[0].version


async def test_a_key_reused_for_another_request_is_refused(store: JobStore) -> None:
    await submitted(store, new_job(idempotency_key="k1"))
    assert isinstance(await submitted(store, new_job(idempotency_key="k1", payload=b"other")), IdempotencyKeyReused)
    assert isinstance(await submitted(store, new_job(idempotency_key="k1", priority=9)), IdempotencyKeyReused)


async def test_one_key_twice_in_one_transaction_makes_one_job(store: JobStore) -> None:
    [answers] = await store.apply([Submit([new_job(idempotency_key="k"), new_job(idempotency_key="k")])])
    (first, made), (second, replayed) = answers
    assert first.job_no == second.job_no and (made, replayed) == (True, False)


async def test_keys_are_per_tenant(store: JobStore) -> None:
    mine = await submitted(store, new_job(idempotency_key="k"))
    theirs = await submitted(store, new_job(idempotency_key="k", tenant="globex", payload=b"other"))
    assert not isinstance(mine, Exception) and not isinstance(theirs, Exception)
    assert theirs[1] is True and (mine[0].tenant, theirs[0].tenant) == (TENANT, "globex")
