"""Claim long-polls: a waiting claim takes a job submitted meanwhile at once, an empty wait lasts its
full length, and a gRPC deadline shorter than the wait is answered OK (empty) before it expires.
"""

from __future__ import annotations

import asyncio
import time

import grpc
from service_support import Stubs, claim, duration, get, submit

from jobwire.v1 import job_pb2, worker_pb2


async def _until_waiting(task: asyncio.Task, settle: float = 0.3) -> None:  # type: ignore[type-arg]
    """Give the claim time to arrive, find nothing and start waiting; it must not have returned."""
    await asyncio.sleep(settle)
    assert not task.done(), f"the claim returned before any job was submitted: {task.result()!r}"


async def test_a_waiting_claim_takes_a_job_submitted_from_another_channel(served) -> None:  # type: ignore[no-untyped-def]
    submitter = Stubs(served.target)
    try:
        await submitter.channel.channel_ready()
        started = time.monotonic()
        waiting = asyncio.create_task(claim(served, "frames", wait=5))
        await _until_waiting(waiting)
        submitted_at = time.monotonic()
        job = (await submitter.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))).job
        leases = await asyncio.wait_for(waiting, timeout=4)
        answered = time.monotonic()
    finally:
        await submitter.close()
    assert [lease.job_no for lease in leases] == [job.job_no]
    assert answered - submitted_at < 2.0, f"the claim answered {answered - submitted_at:.2f}s after the Submit"
    assert answered - started < 4.5  # well before its 5 s wait ran out
    assert (await get(served, job.job_no)).status == job_pb2.Job.RUNNING


async def test_a_waiting_claim_ignores_other_queues_and_job_types(served) -> None:  # type: ignore[no-untyped-def]
    waiting = asyncio.create_task(claim(served, "frames", wait=5))
    await _until_waiting(waiting)
    await submit(served, "frames", queue="elsewhere")
    await submit(served, "report")
    await asyncio.sleep(0.6)  # longer than a wake-up and one poll interval
    assert not waiting.done(), "the claim returned for a job it cannot run"
    mine = await submit(served, "frames")
    leases = await asyncio.wait_for(waiting, timeout=4)
    assert [lease.job_no for lease in leases] == [mine.job_no]


async def test_an_empty_wait_lasts_its_length_and_returns_no_leases(served) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    leases = await claim(served, "frames", wait=0.5)
    elapsed = time.monotonic() - started
    assert leases == []
    assert 0.45 <= elapsed < 2.0, elapsed


async def test_no_wait_answers_at_once(served) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    assert await claim(served, "frames", wait=0) == []
    assert time.monotonic() - started < 0.4


async def test_a_deadline_shorter_than_the_wait_is_answered_ok_before_it(served) -> None:  # type: ignore[no-untyped-def]
    request = worker_pb2.ClaimRequest(
        worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name="frames")], wait=duration(10)
    )
    for timeout in (1.0, 0.3):  # 0.3: shorter than the server's safety margin, so no wait at all
        started = time.monotonic()
        try:
            reply = await served.workers.Claim(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise AssertionError(f"timeout={timeout}: {exc.code()} instead of an empty OK answer") from exc
        elapsed = time.monotonic() - started
        assert list(reply.leases) == [], timeout
        assert elapsed < timeout, (timeout, elapsed)

    # and a job that arrives within the shortened wait is still handed over
    async def call() -> worker_pb2.ClaimResponse:
        return await served.workers.Claim(request, timeout=3.0)  # type: ignore[no-any-return]

    waiting = asyncio.create_task(call())
    await _until_waiting(waiting)
    job = await submit(served, "frames")
    reply = await asyncio.wait_for(waiting, timeout=3)
    assert [lease.job_no for lease in reply.leases] == [job.job_no]
