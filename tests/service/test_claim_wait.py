"""Claim long-polls: a waiting claim takes a job submitted meanwhile, an empty wait lasts its
full length, and a gRPC deadline shorter than the wait is answered OK (empty) before it expires.

A test knows a claim is waiting from the server's own gauge (`jobwire_claims_waiting`), not
from a sleep: a wake-up test whose claim had not begun to wait would pass without testing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc
from served import eventually
from service_support import LONG_WAIT_S, WOKEN_WITHIN_S, Stubs, claim, duration, get, submit, until_waiting, woken

from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.server.leasing import POLL_INTERVAL_S


async def test_a_waiting_claim_takes_a_job_submitted_from_another_channel(served) -> None:  # type: ignore[no-untyped-def]
    submitter = Stubs(served.target)
    try:
        await submitter.channel.channel_ready()
        waiting = asyncio.create_task(claim(served, "frames", wait=LONG_WAIT_S))
        await until_waiting(served, waiting)
        job = (await submitter.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))).job
        leases = await woken(waiting)
    finally:
        await submitter.close()
    assert [lease.job_no for lease in leases] == [job.job_no]
    assert (await get(served, job.job_no)).status == job_pb2.Job.RUNNING
    assert served.runtime.host.metrics.claims_waiting() == 0


async def test_a_waiting_claim_ignores_other_queues_and_job_types(served) -> None:  # type: ignore[no-untyped-def]
    waiting = asyncio.create_task(claim(served, "frames", wait=LONG_WAIT_S))
    await until_waiting(served, waiting)
    elsewhere = await submit(served, "frames", queue="elsewhere")
    report = await submit(served, "report")
    # A negative can only be watched for a while: until the event tail has delivered both
    # events (the Submits' own wake-ups came before their replies), so every wake-up they
    # cause has been given; the claim must still be waiting.
    await asyncio.wait_for(served.runtime.tail.sync(), 10)
    await until_waiting(served, waiting)
    mine = await submit(served, "frames")
    leases = await woken(waiting)
    assert [lease.job_no for lease in leases] == [mine.job_no]
    for other in (elsewhere, report):
        assert (await get(served, other.job_no)).status == job_pb2.Job.QUEUED


async def test_an_empty_wait_lasts_its_length_and_returns_no_leases(served) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    leases = await asyncio.wait_for(claim(served, "frames", wait=0.5), WOKEN_WITHIN_S)
    elapsed = time.monotonic() - started
    assert leases == []
    # Time passing is what is tested here: the wait is not cut short (a lower bound only,
    # which no load can break).
    assert elapsed >= 0.45, elapsed
    assert served.runtime.host.metrics.claims_waiting() == 0


async def test_no_wait_answers_at_once(served) -> None:  # type: ignore[no-untyped-def]
    call = asyncio.create_task(claim(served, "frames", wait=0))

    async def answered_without_waiting() -> bool:
        assert served.runtime.host.metrics.claims_waiting() == 0, "a Claim without a wait waited for work"
        return call.done()

    await eventually(answered_without_waiting, what="the Claim without a wait answered")
    assert await call == []
    job = await submit(served, "frames")
    assert (await get(served, job.job_no)).status == job_pb2.Job.QUEUED  # nobody is still claiming
    assert served.runtime.host.metrics.claims_waiting() == 0


async def test_a_deadline_shorter_than_the_wait_is_answered_ok_before_it(served) -> None:  # type: ignore[no-untyped-def]
    request = worker_pb2.ClaimRequest(
        worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name="frames")], wait=duration(10)
    )
    # An answer after the deadline would be DEADLINE_EXCEEDED here: the code is the proof.
    # (4 s leaves the server a 1 s margin: its answer_margin.)
    try:
        reply = await served.workers.Claim(request, timeout=4.0)
    except grpc.aio.AioRpcError as exc:
        raise AssertionError(f"{exc.code()} instead of an empty OK answer") from exc
    assert list(reply.leases) == []

    # A deadline inside the server's safety margin: it looks once and never waits. (Whether
    # that one look beats 0.3 s is the machine's speed, not the rule: it is not asserted.)
    looking = asyncio.ensure_future(served.workers.Claim(request, timeout=0.3))
    waited = 0.0
    while not looking.done():
        waited = max(waited, served.runtime.host.metrics.claims_waiting())
        await asyncio.sleep(0.005)
    with contextlib.suppress(grpc.aio.AioRpcError):
        await looking
    assert waited == 0

    # and a job that arrives within the shortened wait (the deadline's, not the request's) is still handed over
    request.wait.CopyFrom(duration(LONG_WAIT_S))

    async def call() -> worker_pb2.ClaimResponse:
        return await served.workers.Claim(request, timeout=POLL_INTERVAL_S)  # type: ignore[no-any-return]

    waiting = asyncio.create_task(call())
    await until_waiting(served, waiting)
    job = await submit(served, "frames")
    reply = await woken(waiting)
    assert [lease.job_no for lease in reply.leases] == [job.job_no]
