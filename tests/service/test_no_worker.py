"""Jobs no worker can run, over real gRPC on SQLite: a QUEUED job whose queue and
job type no worker has claimed for lately is an Inspect finding (NO_WORKER), and its user is
told so instead of a place in line. Claims through any replica count."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from served import Served, eventually
from service_support import claim, get, heartbeat, submit

from jobwire.rpc.convert import timestamp
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2
from jobwire.worker.server import leasing

NO_WORKER = admin_pb2.Finding.NO_WORKER
UNSERVED = "Queued · No worker is serving this kind of job yet"


async def unserved(s: Served) -> dict[str, admin_pb2.Finding]:
    reply = await s.admin.Inspect(admin_pb2.InspectRequest(kinds=[NO_WORKER]))
    return {f.job_no: f for f in reply.findings}


async def test_a_kind_nobody_serves_is_a_finding_until_a_worker_claims_for_it(serve: Any) -> None:
    s: Served = await serve()
    first = await submit(s, "orphan")
    second = await submit(s, "orphan")
    await claim(s, "frames", worker_id="w-frames")  # a worker, but for another kind
    found = await unserved(s)
    assert set(found) == {first.job_no, second.job_no}
    f = found[first.job_no]
    assert (f.status, f.queue, f.job_type, f.HasField("worker_claimed_at")) == (
        job_pb2.Job.QUEUED, "default", "orphan", False,
    )  # fmt: skip
    assert f.detail == "no worker serves queue default, job type orphan; a worker last asked for it: never"
    assert (await get(s, second.job_no)).display.detail == UNSERVED
    assert (await get(s, second.job_no, "zh-CN")).display.detail == "排队中 · 暂时没有可处理此类任务的处理程序"

    (lease,) = await claim(s, "orphan", worker_id="w-orphan")  # takes the first; the second waits in line
    assert lease.job_no == first.job_no
    assert await unserved(s) == {}
    assert (await get(s, second.job_no)).display.detail == "Queued · next in line"
    assert (await get(s, lease.job_no)).status == job_pb2.Job.RUNNING  # a leased job is never NO_WORKER


async def test_a_worker_that_stopped_claiming_leaves_its_kind_unserved_again(serve: Any) -> None:
    s: Served = await serve(no_worker_after_seconds=1.0)
    job = await submit(s, "nightly", run_after=_later(s))  # not runnable yet, so the claim leaves it
    assert await claim(s, "nightly", worker_id="w-gone") == []
    assert job.job_no not in await unserved(s)  # it asked within the second
    found = await eventually(lambda: _finding(s, job.job_no), timeout=30, what="NO_WORKER a second after the claim")
    assert found.HasField("worker_claimed_at")
    assert "a worker last asked for it: " in found.detail and "s ago)" in found.detail
    assert (await get(s, job.job_no)).display.detail == UNSERVED


async def test_a_busy_worker_keeps_its_kind_served_by_its_heartbeats(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in an operator's first hour: a worker whose every slot runs a long job claims
    nothing, and its kind read as served by nobody ("No worker is serving this kind of job
    yet") while it ran them. Its heartbeats keep the kinds of its last claim served, also
    through a replica that never saw that claim (a new connection lands anywhere)."""
    monkeypatch.setattr(leasing, "SEEN_EVERY_S", 0.2)  # a kind is recorded at most this often
    s: Served = await serve(no_worker_after_seconds=1.0)
    other: Served = await serve(no_worker_after_seconds=1.0)  # a second server on the same database
    await submit(s, "render")
    (lease,) = await claim(s, "render", worker_id="w-busy")  # its only slot: it claims no more
    waiting = await submit(s, "render")
    loop = asyncio.get_running_loop()
    until = loop.time() + 2.5  # past the second NO_WORKER looks back over, more than twice
    while loop.time() < until:
        for server in (s, other):
            assert (await heartbeat(server, lease, worker_id="w-busy")).state == worker_pb2.LeaseState.OK
        await asyncio.sleep(0.2)
    other_alone = loop.time() + 2.5  # then through the other replica only
    while loop.time() < other_alone:
        assert (await heartbeat(other, lease, worker_id="w-busy")).state == worker_pb2.LeaseState.OK
        await asyncio.sleep(0.2)
    assert waiting.job_no not in await unserved(s)
    assert (await get(s, waiting.job_no)).display.detail != UNSERVED
    # its heartbeats stop (the worker is gone): the kind is unserved again within the second
    await eventually(lambda: _finding(s, waiting.job_no), timeout=30, what="NO_WORKER once the heartbeats stop")


async def test_a_claim_through_another_replica_counts(serve: Any) -> None:
    here: Served = await serve()
    there: Served = await serve()  # a second server on the same database
    job = await submit(here, "report")
    await submit(here, "report")
    assert job.job_no in await unserved(here)
    await claim(there, "report", worker_id="w-there")
    assert await unserved(here) == {}
    assert (await get(here, (await submit(here, "report")).job_no)).display.detail != UNSERVED


def _later(s: Served) -> Any:
    return timestamp(s.runtime.store.now() + timedelta(hours=1))


async def _finding(s: Served, job_no: str) -> admin_pb2.Finding | None:
    return (await unserved(s)).get(job_no)


async def test_list_jobs_says_no_worker_too(serve: Any) -> None:
    s: Served = await serve()
    assert await claim(s, "frames", worker_id="w-frames") == []  # a worker asks for frames; none yet
    orphans = [await submit(s, "orphan.list") for _ in range(3)]
    served_kind = await submit(s, "frames")
    reply = await s.jobs.ListJobs(job_pb2.ListJobsRequest(statuses=[job_pb2.Job.QUEUED]))
    details = {j.job_no: j.display.detail for j in reply.jobs}
    assert [details[o.job_no] for o in orphans] == [UNSERVED] * 3
    assert details[served_kind.job_no] != UNSERVED
    assert "No worker" not in details[served_kind.job_no]
