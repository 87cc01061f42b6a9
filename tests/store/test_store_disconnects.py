"""A Session's end as the store decides it: the lease's end brought near (evidence kept), a
lease renewed since left alone, then the reaper's steps on that lease alone with no grace."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from clocks import MovableClock
from store_support import A_LEASE, complete, get, leased, one, reap, renew, retrying

from jobwire.db.changes import JobOp
from jobwire.db.disconnects import Disconnected, MarkDisconnected, expire
from jobwire.db.store import Call, JobStore
from jobwire.domain.commands import EVERY_TENANT
from jobwire.domain.evidence import EventKind
from jobwire.domain.lease import Lease, LeaseState
from jobwire.domain.states import Status

GRACE = timedelta(seconds=3)


def mark(lease: Lease, heard_at: datetime, tenant: str | None = None) -> MarkDisconnected:
    return MarkDisconnected(
        tenant=tenant or lease.tenant, job_no=lease.job_no, token=lease.worker_token, heard_at=heard_at,
        grace=GRACE, why="the stream broke",
    )  # fmt: skip


async def run(store: JobStore, ops: Sequence[JobOp[Any]]) -> list[Any]:
    return list((await store.apply([Call(ops)]))[0])


async def test_a_disconnected_lease_ends_within_the_grace_with_evidence(
    store: JobStore, clock: MovableClock, trail: Callable[[str], list[dict[str, Any]]]
) -> None:
    job, lease = await leased(store)
    marked = await one(store, mark(lease, clock.now()))
    assert isinstance(marked, Disconnected) and marked.job_no == job.job_no
    assert marked.ends_at <= clock.now() + GRACE < lease.lease_expires_at
    last = trail(job.job_no)[-1]
    assert (last["kind"], last["to_status"], last["worker_id"]) == (EventKind.WORKER_DISCONNECTED, "RUNNING", "w1")
    assert "the stream broke" in last["detail"]
    assert store.lease_state(lease.tenant, lease.job_no, lease.worker_token) is LeaseState.OK  # not revoked yet
    # Named again within the grace (a new session's heartbeat), it runs a whole lease on.
    status = await one(store, renew(lease))
    assert status.state is LeaseState.OK and status.lease_expires_at >= clock.now() + A_LEASE - timedelta(seconds=1)


async def test_a_lease_renewed_since_the_session_last_heard_of_it_is_left_alone(
    store: JobStore, clock: MovableClock
) -> None:
    _, lease = await leased(store)
    heard = clock.now()
    clock.advance(timedelta(seconds=5))
    await one(store, renew(lease))  # another session of the worker named it after
    assert await one(store, mark(lease, heard)) is None
    assert await one(store, mark(lease, clock.now(), tenant=EVERY_TENANT)) is not None  # a shared fleet's: by token


async def test_a_lease_ended_or_revoked_before_is_not_marked(store: JobStore, clock: MovableClock) -> None:
    _, lease = await leased(store)
    await one(store, complete(lease))
    assert await one(store, mark(lease, clock.now())) is None


async def test_at_the_grace_end_retry_requeues_with_no_stall_grace(
    store: JobStore, clock: MovableClock, trail: Callable[[str], list[dict[str, Any]]]
) -> None:
    job, lease = await leased(store, retry=retrying())
    marked = await one(store, mark(lease, clock.now()))
    assert marked is not None
    assert await expire(lambda ops: run(store, ops), [marked], by="test") == []  # the grace has not passed
    clock.advance(GRACE + timedelta(milliseconds=10))
    assert await expire(lambda ops: run(store, ops), [marked], by="test") == [marked]
    again = get(store, job.job_no)
    assert (again.status, again.attempt) == (Status.QUEUED, 1)
    kinds = [e["kind"] for e in trail(job.job_no)][-3:]
    assert kinds == [EventKind.WORKER_DISCONNECTED, EventKind.LEASE_EXPIRED, EventKind.LEASE_REVOKED_REQUEUED]
    assert store.lease_state(lease.tenant, lease.job_no, lease.worker_token) is LeaseState.LOST
    # Whoever comes later (the chore leader's reaper, a second timer) finds nothing left to do.
    assert not await reap(store)
    assert await expire(lambda ops: run(store, ops), [marked], by="test") == []


async def test_ordinary_expiry_keeps_its_stall_grace(store: JobStore, clock: MovableClock) -> None:
    """A lease that only ran out (a worker paused, no session seen ending) waits the stall grace."""
    job, _ = await leased(store, retry=retrying())
    clock.advance(A_LEASE + timedelta(seconds=1))
    reaped = await reap(store, A_LEASE)
    assert (reaped.stalled, reaped.requeued) == (1, 0)
    assert get(store, job.job_no).status is Status.RUNNING
