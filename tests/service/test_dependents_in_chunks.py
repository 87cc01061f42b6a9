"""Dependents settled a chunk per transaction, on SQLite and MariaDB: a root's ending commits
with at most one chunk of them, the process's settler does the rest at once, and after a
crash (its work lost) one housekeeping round settles everything to the end.

The store's chunk is made small here (`store.chunk`) so a few hundred dependents show it.
Transactions are counted where the store reports each committed one (`store.observe`, the
hook the metrics use), never by the clock. Rounds of housekeeping are driven directly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import timedelta

import pytest
import sqlalchemy as sa
from served import Served, eventually
from service_support import artifact, claim, db_query, events, get

from jobwire.db import dependencies
from jobwire.db.retention import keep_files
from jobwire.db.store import JobStore
from jobwire.db.tables import job, job_event
from jobwire.domain.transitions import Move, Transition
from jobwire.runtime import settling
from jobwire.runtime.housekeeping import Housekeeping
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(300)]  # chunked updates in housekeeping rounds

Serve = Callable[..., Awaitable[Served]]
CHUNK = 20
MANY = 10 * CHUNK  # dependents of one root: ten chunks' worth
NO_SWEEP = {"reaper_interval_seconds": 3600}  # the sweep would run once an hour: only what a test drives runs


async def fan_out(served: Served, on: Sequence[str], n: int) -> list[str]:
    """`n` jobs that depend on each of `on`, submitted in batches of 1,000; their numbers."""
    made: list[str] = []
    for start in range(0, n, 1000):
        one = job_pb2.SubmitRequest(job_type="frames", depends_on=list(on))
        reply = await served.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=[one] * min(1000, n - start)))
        made += [j.job_no for j in reply.jobs]
    return made


async def chain(served: Served, length: int) -> list[str]:
    """`length` jobs, each depending on the one before."""
    made = [await submitted(served)]
    while len(made) < length:
        request = job_pb2.SubmitRequest(job_type="frames", depends_on=[made[-1]])
        made.append((await served.jobs.Submit(request)).job.job_no)
    return made


async def counts(served: Served, job_nos: Sequence[str]) -> dict[tuple[str, int], int]:
    """How many of `job_nos` are in each (status, waiting_on), read from the table."""
    query = (
        sa.select(job.c.status, job.c.waiting_on, sa.func.count().label("n"))
        .where(job.c.job_no.in_(job_nos))
        .group_by(job.c.status, job.c.waiting_on)
    )
    return {(r["status"], r["waiting_on"]): r["n"] for r in await db_query(served, query)}  # type: ignore[index]


async def failed_events(served: Served, cause: str) -> int:
    """DEPENDENCY_FAILED events that name `cause`."""
    query = sa.select(sa.func.count().label("n")).where(
        job_event.c.kind == "DEPENDENCY_FAILED", job_event.c.detail.like(f"dependency {cause} ended %")
    )
    return int((await db_query(served, query))[0]["n"])  # type: ignore[call-overload]


def cancels_per_transaction(store: JobStore) -> list[int]:
    """From now on, per committed transaction that cancelled any job: how many it cancelled."""
    seen: list[int] = []
    observe = store.observe

    def counting(moved: Sequence[Transition]) -> None:
        cancelled = sum(m.move is Move.CANCELLED for m in moved)
        if cancelled:
            seen.append(cancelled)
        observe(moved)

    store.observe = counting
    return seen


def lose_the_settlers_work(store: JobStore) -> list[dependencies.Pending]:
    """What endings leave of their dependents is kept here and never settled: a crash right after."""
    kept: list[dependencies.Pending] = []
    store.unsettled = kept.extend
    return kept


def housekeeping(served: Served, interval: float = 0.0) -> Housekeeping:
    """This server's housekeeping, its rounds driven by the test; `interval` is also how long
    settling must have been quiet for its sweep to take the work over (0: long after a crash)."""
    rt = served.runtime
    settings = replace(rt.settings, reaper_interval_seconds=interval)
    return Housekeeping(rt.store, rt.blocking, settings, deleter=keep_files, metrics=rt.host.metrics.jobs)


async def submitted(served: Served) -> str:
    return (await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))).job.job_no


async def complete(served: Served, job_no: str) -> None:
    (lease,) = await claim(served)
    assert lease.job_no == job_no
    await served.workers.Complete(
        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
    )


def only(served: Served, job_nos: Sequence[str], state: tuple[str, int]) -> Callable[[], Awaitable[bool]]:
    """A probe: every one of `job_nos` is in `state` (status, waiting_on)."""

    async def probe() -> bool:
        return await counts(served, job_nos) == {state: len(job_nos)}

    return probe


def cancelled_with(cause: str) -> tuple[str, str]:
    return "DEPENDENCY_FAILED", f"dependency {cause} ended CANCELLED; cancelled with it"


async def test_a_root_with_many_dependents_is_cancelled_at_once_and_they_follow_a_chunk_at_a_time(
    serve: Serve,
) -> None:
    served = await serve(**NO_SWEEP)
    served.runtime.store.chunk = CHUNK
    root = await submitted(served)
    waiting = await fan_out(served, [root], MANY)
    transactions = cancels_per_transaction(served.runtime.store)
    assert (await served.jobs.Cancel(job_pb2.CancelRequest(job_no=root))).status == job_pb2.Job.CANCELLED
    await eventually(only(served, waiting, ("CANCELLED", 0)), timeout=120, what="every dependent cancelled")
    # The root's own transaction committed it with a chunk at most; every later one, a chunk at most.
    assert transactions[0] <= 1 + CHUNK and max(transactions[1:]) <= CHUNK
    assert sum(transactions) == MANY + 1 and len(transactions) >= MANY // CHUNK
    assert await failed_events(served, root) == MANY
    last = (await events(served, waiting[-1]))[-1]
    assert (last.kind, last.detail) == cancelled_with(root)
    assert await claim(served, max_jobs=10) == []


async def test_a_chain_many_chunks_deep_is_cancelled_to_its_end_in_one_housekeeping_round(serve: Serve) -> None:
    served = await serve(reaper_interval_seconds=0)
    served.runtime.store.chunk = CHUNK
    jobs = await chain(served, 5 * CHUNK)
    lose_the_settlers_work(served.runtime.store)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=jobs[0]))
    assert (await get(served, jobs[-1])).status == job_pb2.Job.QUEUED  # the Cancel's transaction ended a chunk in
    await housekeeping(served).tick()
    assert await counts(served, jobs) == {("CANCELLED", 0): 5 * CHUNK}
    last = (await events(served, jobs[-1]))[-1]
    assert (last.kind, last.detail) == cancelled_with(jobs[-2])


async def test_a_crash_between_chunks_loses_nothing_the_sweep_finishes_a_cancel(serve: Serve) -> None:
    served = await serve(reaper_interval_seconds=0)
    store = served.runtime.store
    store.chunk = CHUNK
    root = await submitted(served)
    waiting = await fan_out(served, [root], 300)
    left = lose_the_settlers_work(store)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=root))
    (pending,) = left
    changed, _ = await store.settle_dependents(pending)  # one chunk, and then the process is gone
    assert changed == CHUNK
    crashed = {("CANCELLED", 0): 2 * CHUNK, ("QUEUED", 1): 300 - 2 * CHUNK}
    assert await counts(served, waiting) == crashed
    assert await claim(served, max_jobs=10) == []  # waiting for a dependency that ended: never claimable
    # A round whose interval has not passed since that chunk leaves the work to its settler.
    await housekeeping(served, interval=3600).tick()
    assert await counts(served, waiting) == crashed
    await housekeeping(served).tick()
    assert await counts(served, waiting) == {("CANCELLED", 0): 300}
    assert await failed_events(served, root) == 300


async def test_a_crash_between_chunks_loses_nothing_the_sweep_finishes_a_completion(serve: Serve) -> None:
    # Each dependent waits for two jobs: after the first completes and the sweep settles what
    # the crash left, every count is exactly one, and the second's completion frees them all.
    served = await serve(reaper_interval_seconds=0)
    store = served.runtime.store
    store.chunk = CHUNK
    first, second = await submitted(served), await submitted(served)
    waiting = await fan_out(served, [first, second], 300)
    left = lose_the_settlers_work(store)
    await complete(served, first)
    assert len(left) == 1
    assert await counts(served, waiting) == {("QUEUED", 1): CHUNK, ("QUEUED", 2): 300 - CHUNK}
    await housekeeping(served).tick()
    assert await counts(served, waiting) == {("QUEUED", 1): 300}
    read = lambda query: served.runtime.blocking(store.db.read, query)  # noqa: E731
    assert await settling.sweep(store, read, quiet=timedelta(0)) == 0  # no count is stale
    # The second's settler is lost too: the sweep frees its dependents.
    await complete(served, second)
    await housekeeping(served).tick()
    assert await counts(served, waiting) == {("QUEUED", 0): 300}
    trail = [e.kind for e in await events(served, waiting[-1])]
    assert trail == ["SUBMITTED", "DEPENDENCY_READY", "DEPENDENCY_READY"]


async def test_dependents_past_the_first_chunk_become_runnable_right_after_a_completion(serve: Serve) -> None:
    served = await serve(**NO_SWEEP)
    served.runtime.store.chunk = CHUNK
    first = await submitted(served)
    waiting = await fan_out(served, [first], 3 * CHUNK + 7)
    await complete(served, first)
    await eventually(only(served, waiting, ("QUEUED", 0)), timeout=60, what="every dependent runnable")
    leased = [lease.job_no for lease in await claim(served, max_jobs=100)]
    leased += [lease.job_no for lease in await claim(served, max_jobs=100)]
    assert sorted(leased) == sorted(waiting)
