"""Claim as the store decides it: which jobs, in what order, when, and the lease it writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from clocks import MovableClock
from store_support import A_LEASE, LEASE_S, TENANT, claim, complete, one, submit, worker

from jobwire.db.queue_limits import Budget
from jobwire.db.store import Claim, JobStore
from jobwire.db.wire import MySQLWire, SQLiteWire
from jobwire.domain.flow import Held, QueueLimits
from jobwire.domain.states import Status
from jobwire.domain.timeouts import Timeouts


async def test_a_claim_leases_for_the_store_time_and_writes_what_it_answers(
    store: JobStore, clock: MovableClock, row: Callable[[str], dict[str, Any]]
) -> None:
    job = await submit(store, timeouts=Timeouts(attempt_s=600))
    clock.advance(timedelta(minutes=5))
    [lease] = await claim(store)
    stored = row(job.job_no)
    assert stored["status"] == Status.RUNNING.value and stored["attempt"] == 1 and stored["worker_id"] == "w1"
    assert lease.worker_token == stored["worker_token"] and lease.worker_token.startswith("1.")
    assert lease.lease_expires_at == stored["lease_expires_at"] == stored["heartbeat_at"] + A_LEASE
    assert lease.attempt_deadline == stored["attempt_deadline"] == stored["heartbeat_at"] + timedelta(seconds=600)
    assert (
        stored["started_at"] == stored["updated_at"] == stored["heartbeat_at"] >= job.created_at + timedelta(minutes=5)
    )
    assert (lease.lease_seconds, lease.attempt, lease.payload) == (LEASE_S, 1, b"{}")


async def test_a_claim_sends_its_updates_with_its_commit(
    store: JobStore, row: Callable[[str], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its candidates were read locked: their guarded UPDATEs cannot miss, so they need no
    round trip of their own (a claim: the read, then the writes with the COMMIT)."""
    jobs = [await submit(store) for _ in range(3)]
    sent: list[str] = []
    for wire in (MySQLWire, SQLiteWire):
        run, commit = wire.run, wire.commit

        async def counted_run(self: Any, batch: Any, run: Any = run) -> Any:
            if batch and sent[-1:] != ["committing"]:
                sent.append(f"run {len(batch)}")
            return await run(self, batch)

        async def counted_commit(self: Any, batch: Any = (), commit: Any = commit) -> Any:
            sent.append("committing")
            await commit(self, batch)
            sent[-1] = f"commit {len(batch)}"

        monkeypatch.setattr(wire, "run", counted_run)
        monkeypatch.setattr(wire, "commit", counted_commit)
    leases = await claim(store, max_jobs=3)
    assert sent == ["commit 5"]  # 3 UPDATEs, one INSERT of 3 events, the worker's last seen; nothing before
    assert sorted(x.job_no for x in leases) == sorted(j.job_no for j in jobs)
    assert all(row(x.job_no)["worker_token"] == x.worker_token for x in leases)
    assert all(row(x.job_no)["version"] == x.version for x in leases)


async def test_best_priority_first_then_oldest(store: JobStore) -> None:
    low = await submit(store, priority=0)
    high = await submit(store, priority=9)
    older_mid = await submit(store, priority=5)
    newer_mid = await submit(store, priority=5)
    leases = await claim(store, max_jobs=4)
    assert [lease.job_no for lease in leases] == [high.job_no, older_mid.job_no, newer_mid.job_no, low.job_no]


async def test_only_the_queues_and_job_types_a_worker_serves(store: JobStore) -> None:
    await submit(store, "other")
    await submit(store, queue="elsewhere")
    await submit(store, tenant="globex")
    assert await claim(store, max_jobs=3) == []
    [lease] = await claim(store, worker("w2", "other"))
    assert lease.job_type == "other"


async def test_a_job_waits_for_its_run_after(store: JobStore, clock: MovableClock) -> None:
    job = await submit(store, run_after=clock.now() + timedelta(hours=1))
    assert await claim(store) == []
    clock.advance(timedelta(minutes=59))
    assert await claim(store) == []
    clock.advance(timedelta(minutes=1, seconds=1))
    [lease] = await claim(store)
    assert lease.job_no == job.job_no


async def test_a_job_waits_for_its_dependencies(store: JobStore) -> None:
    first = await submit(store, "first")
    then = await submit(store, depends_on=(first.job_no,))
    assert then.waiting_for == (first.job_no,)
    assert await claim(store) == []  # frames: only `then`, which waits
    [lease] = await claim(store, worker("w1", "first"))
    await one(store, complete(lease))
    [after] = await claim(store)
    assert after.job_no == then.job_no


async def test_a_paused_queue_leases_nothing_and_says_why(store: JobStore) -> None:
    await submit(store)
    store.change_queue_limits(TENANT, "default", lambda limits: replace(limits, paused=True))
    held = Claim(worker(), 1)
    assert (await store.apply([held]))[0] == []
    assert [(queue, budget.held) for queue, budget in held.held.items()] == [("default", Held.PAUSED)]
    store.change_queue_limits(TENANT, "default", lambda limits: replace(limits, paused=False))
    assert len(await claim(store)) == 1


async def test_max_running_bounds_the_leases_of_a_queue(store: JobStore) -> None:
    store.change_queue_limits(TENANT, "default", lambda _: QueueLimits(max_running=2))
    for _ in range(4):
        await submit(store)
    assert len(await claim(store, max_jobs=4)) == 2
    assert await claim(store, worker("w2")) == []
    held = Claim(worker("w3"), 1)
    await store.apply([held])
    assert isinstance(held.held["default"], Budget) and held.held["default"].held is Held.AT_LIMIT


async def test_a_rate_limit_refills_with_moved_time(store: JobStore, clock: MovableClock) -> None:
    store.change_queue_limits(TENANT, "default", lambda _: QueueLimits(rate_per_second=0.1, burst=1))
    for _ in range(3):
        await submit(store)
    assert len(await claim(store, max_jobs=3)) == 1  # the one token of the burst
    assert await claim(store) == []
    clock.advance(timedelta(seconds=10))  # one token more, by the store's clock
    assert len(await claim(store, max_jobs=3)) == 1
    assert await claim(store) == []
