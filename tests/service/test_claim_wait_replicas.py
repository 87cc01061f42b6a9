"""A Claim waiting on one server is woken by a Submit through another (same database)."""

from __future__ import annotations

import asyncio
import time

from service_support import claim, submit

from jobwire.worker.server.leasing import POLL_INTERVAL_S


async def test_a_submit_through_another_replica_wakes_a_waiting_claim(serve) -> None:  # type: ignore[no-untyped-def]
    jobapi_side = await serve()
    worker_side = await serve()
    waiting = asyncio.create_task(claim(worker_side, "replicated", wait=POLL_INTERVAL_S * 2))
    await asyncio.sleep(0.3)  # let the claim find the queue empty and start waiting
    assert not waiting.done()
    submitted_at = time.monotonic()
    job = await submit(jobapi_side, "replicated")
    leases = await waiting
    woke_after = time.monotonic() - submitted_at
    assert [lease.job_no for lease in leases] == [job.job_no]
    # Woken by the other replica's event, not by the slow fallback poll.
    assert woke_after < POLL_INTERVAL_S / 2, woke_after
