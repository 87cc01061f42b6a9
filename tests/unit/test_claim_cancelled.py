"""A Claim whose caller leaves while the database claims hands the leases back."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from jobwire.db.leases import Claimant
from jobwire.domain.stages import DEFAULT_PLAN
from jobwire.rpc.blocking import Blocking
from jobwire.rpc.wakeup import Wakeup
from jobwire.worker.server.leasing import Leasing


class SlowStore:
    """A fake store whose claim blocks until released, then leases one job."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.proceed = threading.Event()
        self.released: list[tuple[Any, ...]] = []

    def claim(self, who: Claimant, max_jobs: int, record_seen: bool) -> list[dict[str, Any]]:
        self.entered.set()
        self.proceed.wait(5)
        return [{"tenant": who.tenant, "job_no": "PT-20261129-001", "worker_token": "1.secret"}]

    def release(self, *args: Any) -> None:
        self.released.append(args)


WHO = Claimant(tenant="t", worker_id="w1", queues=["default"], plans={"frames": DEFAULT_PLAN}, lease_seconds=30)


async def test_a_cancelled_claim_releases_what_it_leased() -> None:
    store = SlowStore()
    blocking = Blocking(2)
    leasing = Leasing(store, blocking, Wakeup())  # type: ignore[arg-type]
    call = asyncio.create_task(leasing.claim(WHO, 1, 0))
    await asyncio.to_thread(store.entered.wait, 5)
    call.cancel()
    store.proceed.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(200):
        if store.released:
            break
        await asyncio.sleep(0.01)
    assert store.released == [("t", "PT-20261129-001", "1.secret", None, "claim not delivered: the caller left")]
    blocking.shutdown()


async def test_a_delivered_claim_releases_nothing() -> None:
    store = SlowStore()
    store.proceed.set()
    blocking = Blocking(2)
    leasing = Leasing(store, blocking, Wakeup())  # type: ignore[arg-type]
    rows = await leasing.claim(WHO, 1, 0)
    assert [r["job_no"] for r in rows] == ["PT-20261129-001"] and store.released == []
    blocking.shutdown()
