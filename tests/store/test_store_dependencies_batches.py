"""Dependencies settling as their jobs end, and batches made whole or not at all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from store_support import (
    SCOPE,
    TENANT,
    cancel,
    claim,
    complete,
    fail,
    get,
    leased,
    new_job,
    one,
    submit,
    submitted,
    worker,
)

from jobwire.db.store import JobStore, SubmitBatch
from jobwire.domain.batches import NewBatch
from jobwire.domain.commands import NewJob
from jobwire.domain.errors import DependencyEnded, IdempotencyKeyReused, InvalidArgument, JobwireError
from jobwire.domain.evidence import EventKind
from jobwire.domain.retry import RetryPolicy
from jobwire.domain.states import Status

Rows = Callable[[str], list[dict[str, Any]]]


async def test_a_dependent_becomes_runnable_when_its_last_dependency_is_ready(store: JobStore, trail: Rows) -> None:
    a, lease_a = await leased(store, "a")
    b, lease_b = await leased(store, "b")
    then = await submit(store, depends_on=(a.job_no, b.job_no))
    await one(store, complete(lease_a))
    assert get(store, then.job_no).waiting_for == (b.job_no,)
    assert await claim(store) == []
    await one(store, complete(lease_b))
    assert get(store, then.job_no).waiting_for == ()
    [lease] = await claim(store)
    assert lease.job_no == then.job_no
    kinds = [e["kind"] for e in trail(then.job_no)]
    assert kinds.count(EventKind.DEPENDENCY_READY) == 2


async def test_a_failed_dependency_cancels_its_dependents_down_the_chain(store: JobStore) -> None:
    a, lease = await leased(store, "a", retry=RetryPolicy(max_attempts=1))
    b = await submit(store, "b", depends_on=(a.job_no,))
    c = await submit(store, "c", depends_on=(b.job_no,))
    await one(store, fail(lease, retryable=False))
    for job in (b, c):
        assert get(store, job.job_no).status is Status.CANCELLED


async def test_a_cancelled_dependency_cancels_its_dependents(store: JobStore, trail: Rows) -> None:
    a = await submit(store, "a")
    b = await submit(store, "b", depends_on=(a.job_no,))
    await one(store, cancel(a.job_no))
    assert get(store, b.job_no).status is Status.CANCELLED
    [why] = [e["detail"] for e in trail(b.job_no) if e["kind"] == EventKind.DEPENDENCY_FAILED]
    assert why == f"dependency {a.job_no} ended CANCELLED; cancelled with it"


async def test_a_dependency_must_be_a_job_of_the_tenant_that_has_not_ended_badly(store: JobStore) -> None:
    await submit(store, tenant="globex")
    theirs = await submit(store, tenant="globex")  # its number is the other tenant's only: 002
    ended = await submit(store)
    await one(store, cancel(ended.job_no))
    unknown = await submitted(store, new_job(depends_on=(theirs.job_no,)))
    assert isinstance(unknown, InvalidArgument) and "depends_on" in str(unknown)
    assert isinstance(await submitted(store, new_job(depends_on=(ended.job_no,))), DependencyEnded)
    done, lease = await leased(store, "done")
    await one(store, complete(lease))
    ready_already = await submit(store, depends_on=(done.job_no,))
    assert ready_already.waiting_for == () and len(await claim(store)) == 1


def batch(batch_id: str, jobs: list[NewJob], key: str | None = None) -> SubmitBatch:
    return SubmitBatch(
        NewBatch(
            tenant=TENANT, batch_id=batch_id, jobs=[replace(job, batch_id=batch_id) for job in jobs],
            idempotency_key=key,
        )
    )  # fmt: skip


async def test_a_batch_makes_every_job_and_counts_them(store: JobStore) -> None:
    [(batch_id, jobs, created)] = await store.apply([batch("b1", [new_job(), new_job(), new_job("other")])])
    assert created and batch_id == "b1" and len(jobs) == 3 and {j.batch_id for j in jobs} == {"b1"}
    [lease] = await claim(store)
    await one(store, complete(lease))
    record = store.get_batch(SCOPE, "b1")
    assert record.total == 3 and record.counts == {Status.READY: 1, Status.QUEUED: 2}
    assert store.batch_job_nos(SCOPE, "b1", unfinished=True) == [j.job_no for j in jobs if j.job_no != lease.job_no]


async def test_a_batch_key_replays_the_batch_and_refuses_another(store: JobStore) -> None:
    [(_, made, _)] = await store.apply([batch("b1", [new_job(), new_job()], key="k")])
    [(batch_id, replayed, created)] = await store.apply([batch("b2", [new_job(), new_job()], key="k")])
    assert (batch_id, created) == ("b1", False) and [j.job_no for j in replayed] == [j.job_no for j in made]
    [other] = await store.apply([batch("b3", [new_job(payload=b"other")], key="k")])
    assert isinstance(other, IdempotencyKeyReused)


async def test_one_refused_dependency_refuses_the_whole_batch(store: JobStore) -> None:
    ended = await submit(store)
    await one(store, cancel(ended.job_no))
    [refused] = await store.apply([batch("b1", [new_job(), new_job(depends_on=(ended.job_no,))])])
    assert isinstance(refused, JobwireError) and "jobs[1]" in str(refused)
    assert await claim(store, worker(), 5) == []  # nothing of it was made
