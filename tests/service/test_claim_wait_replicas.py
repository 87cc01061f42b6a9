"""A Claim waiting on one server is woken by a Submit through another (same database)."""

from __future__ import annotations

import asyncio

import pytest
from service_support import LONG_WAIT_S, claim, submit, until_waiting, woken

pytestmark = pytest.mark.both_databases  # replicas waking each other through the database


async def test_a_submit_through_another_replica_wakes_a_waiting_claim(serve) -> None:  # type: ignore[no-untyped-def]
    jobapi_side = await serve()
    worker_side = await serve()
    waiting = asyncio.create_task(claim(worker_side, "replicated", wait=LONG_WAIT_S))
    await until_waiting(worker_side, waiting)  # the worker side's gauge: the claim waits there
    job = await submit(jobapi_side, "replicated")
    # Woken by the other replica's event (through the event tail), not by the slow fallback poll.
    leases = await woken(waiting)
    assert [lease.job_no for lease in leases] == [job.job_no]
