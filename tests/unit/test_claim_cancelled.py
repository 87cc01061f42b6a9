"""A Claim whose caller leaves while the database claims hands the leases back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import pytest
from served import eventually

from jobwire.db.leases import Release
from jobwire.db.store import Call, Claim, Work
from jobwire.domain.commands import Claimant
from jobwire.domain.lease import Lease
from jobwire.domain.stages import DEFAULT_PLAN
from jobwire.rpc.batching import Batcher
from jobwire.rpc.metrics import Metrics
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.wakeup import Wakeup
from jobwire.worker.server.leasing import Leasing

LEASE = Lease(
    job_no="PT-20261129-001", tenant="default", worker_token="1.secret", job_type="frames", payload=b"", attempt=1,
    checkpoint=None, stages=DEFAULT_PLAN, lease_expires_at=datetime(2026, 11, 29), lease_seconds=30.0,
)  # fmt: skip


class SlowStore:
    """A fake store whose claim waits until released, then leases one job; it records what is applied."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.proceed = asyncio.Event()
        self.applied: list[object] = []

    async def apply(self, work: Sequence[Work]) -> list[object]:
        out: list[object] = []
        for item in work:
            if isinstance(item, Claim):
                self.entered.set()
                await asyncio.wait_for(self.proceed.wait(), 5)
                out.append([LEASE])
            else:
                assert isinstance(item, Call)
                self.applied += item.ops
                out.append([None for _ in item.ops])
        return out


WHO = Claimant(tenant="t", worker_id="w1", queues=["default"], plans={"frames": DEFAULT_PLAN}, lease_seconds=30)


def _applied(store: SlowStore) -> Callable[[], Awaitable[list[object]]]:
    async def probe() -> list[object]:
        return store.applied

    return probe


def _leasing(store: SlowStore) -> tuple[Leasing, Batcher[Work, object]]:
    commits: Batcher[Work, object] = Batcher(store.apply, lanes=2, max_items=10)
    return Leasing(store, commits, Wakeup(), blocking=Blocking(1), metrics=Metrics()), commits  # type: ignore[arg-type]


async def test_a_cancelled_claim_releases_what_it_leased() -> None:
    store = SlowStore()
    leasing, commits = _leasing(store)
    call = asyncio.create_task(leasing.claim(WHO, 1, 0))
    await asyncio.wait_for(store.entered.wait(), 5)
    call.cancel()
    store.proceed.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    await eventually(_applied(store), what="the lease claimed for a caller that left was not released")
    assert store.applied == [
        Release(tenant="t", job_no=LEASE.job_no, token="1.secret", note="claim not delivered: the caller left")
    ]
    await commits.shutdown()


async def test_a_delivered_claim_releases_nothing() -> None:
    store = SlowStore()
    store.proceed.set()
    leasing, commits = _leasing(store)
    leases = await leasing.claim(WHO, 1, 0)
    assert [lease.job_no for lease in leases] == [LEASE.job_no] and store.applied == []
    await commits.shutdown()


class _Ended:
    """What grpc.aio hands a done callback: the context of an RPC that ended."""

    def __init__(self, cancelled: bool) -> None:
        self._cancelled = cancelled

    def cancelled(self) -> bool:
        return self._cancelled


@pytest.mark.parametrize(("cancelled", "released"), [(True, 1), (False, 0)])
async def test_a_reply_cancelled_on_its_way_hands_its_leases_back(cancelled: bool, released: int) -> None:
    """Security review, finding 1: leases whose reply did not reach the worker go back at once."""
    from jobwire.runtime.settings import Settings
    from jobwire.worker.server.servicer import WorkerServicer

    store = SlowStore()
    leasing, commits = _leasing(store)
    WorkerServicer(leasing, Settings(), None, None, Metrics(), None)._check_delivered(_Ended(cancelled), "t", [LEASE])  # type: ignore[arg-type]
    # A release of our own, started after the check: once it and every batch in flight are
    # done, a hand-back the check started (before it) has reached the store too.
    marker = Release(tenant="t", job_no="PT-20261129-999", token="1.marker", note="marker")
    await asyncio.wait_for(asyncio.ensure_future(commits(Call([marker]))), 5)
    await commits.shutdown()
    expected = Release(
        tenant="t", job_no=LEASE.job_no, token="1.secret", note="claim not delivered: the reply was not delivered"
    )
    assert store.applied[:-1] == [expected] * released
    assert store.applied[-1] == marker
