"""Queue limits (issue 14): max_running, a rate with a burst, and pause hold across processes.

The limits live in the database and are checked in each claim's transaction, so claims
through a second server process (a real child process on the same database) obey them too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from processes import ServerProcess, start_server_process
from served import Served, start_server
from service_support import (
    LONG_WAIT_S,
    Stubs,
    claim,
    complete_request,
    db_query,
    db_rows,
    get,
    open_stubs,
    rpc_error,
    rpc_failure,
    submit,
    until_waiting,
    woken,
)

from jobwire.db.tables import job
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(120)
QUEUE = "exports"


@pytest.fixture
def second_process(database_url: str) -> Iterator[ServerProcess]:
    """Another `jobwire serve` process over the test's database (started after the schema exists)."""
    server = start_server_process(
        ["jobwire", "serve"], {"JOBWIRE_DATABASE_URL": database_url, "JOBWIRE_LISTEN": "127.0.0.1:0"}
    )
    try:
        yield server
    finally:
        server.terminate()


async def set_limits(served: Served | Stubs, queue: str = QUEUE, **limits: float) -> admin_pb2.QueueLimitsResponse:
    request = admin_pb2.SetQueueLimitsRequest(queue=queue, limits=admin_pb2.QueueLimits(**limits))
    return await served.admin.SetQueueLimits(request)


async def running_now(served: Served) -> int:
    rows = await db_query(
        served, sa.select(sa.func.count().label("n")).where(job.c.queue == QUEUE, job.c.status == "RUNNING")
    )
    return int(rows[0]["n"])  # type: ignore[call-overload]


async def work_until_done(workers: list[Stubs], total: int, hold_s: float = 0.0) -> list[str]:
    """Workers claim from `QUEUE` and complete until `total` jobs are done; the job numbers, in claim order."""
    done: list[str] = []

    async def worker(i: int, stubs: Stubs) -> None:
        while len(done) < total:
            leases = await claim(stubs, worker_id=f"w{i}", wait=1.0, queues=[QUEUE])
            for lease in leases:
                done.append(lease.job_no)
                await asyncio.sleep(hold_s)  # the job's work: it holds its place while it runs
                await stubs.workers.Complete(complete_request(lease))

    await asyncio.gather(*(worker(i, s) for i, s in enumerate(workers)))
    return done


@pytest.mark.both_databases  # limits held by the database across processes
async def test_max_running_holds_for_claims_through_two_processes(serve, second_process) -> None:  # type: ignore[no-untyped-def]
    served = await serve()
    await set_limits(served, max_running=2)
    jobs = [await submit(served, queue=QUEUE) for _ in range(20)]
    workers = await open_stubs(served.target, 4) + await open_stubs(second_process.target, 4)
    most = 0

    async def sample() -> None:
        nonlocal most
        while True:
            most = max(most, await running_now(served))
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(sample())
    try:
        done = await work_until_done(workers, len(jobs), hold_s=0.05)
    finally:
        sampler.cancel()
        for stubs in workers:
            await stubs.close()
    assert sorted(done) == sorted(j.job_no for j in jobs)  # each once, every one
    assert 1 <= most <= 2
    finished = await db_query(served, sa.select(job.c.status).where(job.c.queue == QUEUE))
    assert {r["status"] for r in finished} == {"READY"}


@pytest.mark.both_databases  # a rate kept in the database across processes
async def test_a_rate_with_a_burst_of_one_spaces_the_claims(serve, second_process) -> None:  # type: ignore[no-untyped-def]
    served = await serve()
    await set_limits(served, rate_per_second=5, burst=1)
    jobs = [await submit(served, queue=QUEUE) for _ in range(20)]
    workers = await open_stubs(served.target, 2) + await open_stubs(second_process.target, 2)
    try:
        await work_until_done(workers, len(jobs))
    finally:
        for stubs in workers:
            await stubs.close()
    rows = await db_query(served, sa.select(job.c.started_at).where(job.c.queue == QUEUE))
    starts = sorted(_time(r["started_at"]) for r in rows)
    # 20 jobs at 5 a second, one at a time: 19 gaps of 0.2 s; without a limit they take a blink.
    assert starts[-1] - starts[0] >= timedelta(seconds=19 / 5 * 0.85)
    for i in range(len(starts) - 2):  # never three within one token's time
        assert starts[i + 2] - starts[i] >= timedelta(seconds=0.2 * 0.85), starts


@pytest.mark.both_databases  # a pause kept in the database across processes
async def test_a_paused_queue_leases_nothing_and_drains_when_resumed(serve, second_process) -> None:  # type: ignore[no-untyped-def]
    served = await serve()
    paused = await served.admin.PauseQueue(admin_pb2.PauseQueueRequest(queue=QUEUE))
    assert paused.paused
    jobs = [await submit(served, queue=QUEUE) for _ in range(3)]
    (other,) = await open_stubs(second_process.target, 1)
    try:
        assert await claim(served, queues=[QUEUE]) == []
        assert await claim(other, queues=[QUEUE]) == []
        held = served.runtime.host.metrics.registry.get_sample_value(
            "jobwire_claims_held_back_total", {"reason": "PAUSED"}
        )
        assert held == 1  # the claim through this server, counted by why
        waiting = asyncio.create_task(claim(served, queues=[QUEUE], wait=LONG_WAIT_S))
        await until_waiting(served, waiting)
        resumed = await served.admin.ResumeQueue(admin_pb2.ResumeQueueRequest(queue=QUEUE))
        assert not resumed.paused
        first = await woken(waiting)  # woken by the resume, not by the slow poll
        rest = await claim(other, queues=[QUEUE], max_jobs=5, wait=5)
    finally:
        await other.close()
    assert sorted(lease.job_no for lease in [*first, *rest]) == sorted(j.job_no for j in jobs)


async def test_a_full_queue_wakes_a_held_claim_when_a_job_ends(served) -> None:  # type: ignore[no-untyped-def]
    await set_limits(served, max_running=1)
    first, second = [await submit(served, queue=QUEUE) for _ in range(2)]
    (lease,) = await claim(served, queues=[QUEUE])
    assert await claim(served, worker_id="w2", queues=[QUEUE]) == []  # at its limit
    waiting = asyncio.create_task(claim(served, worker_id="w2", queues=[QUEUE], wait=LONG_WAIT_S))
    await until_waiting(served, waiting)
    started = time.monotonic()
    await served.workers.Complete(complete_request(lease))
    assert [x.job_no for x in await woken(waiting)] == [second.job_no]
    assert time.monotonic() - started < 1.5  # by the ending, not by the held claim's own look
    assert lease.job_no == first.job_no


async def test_limits_read_back_and_a_queue_without_any_has_none(served) -> None:  # type: ignore[no-untyped-def]
    empty = await served.admin.GetQueueLimits(admin_pb2.GetQueueLimitsRequest(queue="untouched"))
    assert (empty.queue, empty.limits, empty.paused) == ("untouched", admin_pb2.QueueLimits(), False)
    await set_limits(served, max_running=3, rate_per_second=2.5, burst=4)
    await served.admin.PauseQueue(admin_pb2.PauseQueueRequest(queue=QUEUE))
    got = await served.admin.GetQueueLimits(admin_pb2.GetQueueLimitsRequest(queue=QUEUE))
    assert got.limits == admin_pb2.QueueLimits(max_running=3, rate_per_second=2.5, burst=4)
    assert got.paused  # setting limits keeps a pause, and pausing keeps the limits
    cleared = await set_limits(served)
    assert cleared.limits == admin_pb2.QueueLimits() and cleared.paused


@pytest.mark.both_databases  # first writes racing on one row
async def test_concurrent_first_limits_of_a_queue_all_answer(served) -> None:  # type: ignore[no-untyped-def]
    # Each finds no row and inserts one; the ones that lose the race decide again on the row made.
    answers = await asyncio.gather(*(set_limits(served, "fresh", max_running=n) for n in range(1, 9)))
    got = await served.admin.GetQueueLimits(admin_pb2.GetQueueLimitsRequest(queue="fresh"))
    assert got.limits.max_running in {a.limits.max_running for a in answers}


@pytest.mark.parametrize(
    ("queue", "limits", "field"),
    [
        (QUEUE, {"max_running": -1}, "limits.max_running"),
        (QUEUE, {"rate_per_second": -0.5}, "limits.rate_per_second"),
        (QUEUE, {"rate_per_second": float("nan")}, "limits.rate_per_second"),
        (QUEUE, {"rate_per_second": float("inf")}, "limits.rate_per_second"),
        (QUEUE, {"burst": -2, "rate_per_second": 1}, "limits.burst"),
        (QUEUE, {"burst": 3}, "limits.burst"),
        (QUEUE, {"max_running_per_tenant": 2}, "limits.max_running_per_tenant"),
        (QUEUE, {"job_type": "frames"}, "limits.job_type"),
        ("no spaces", {"max_running": 1}, "queue"),
        ("", {"max_running": 1}, "queue"),
    ],
)
async def test_bad_limits_are_refused_and_change_nothing(served, queue, limits, field) -> None:  # type: ignore[no-untyped-def]
    await set_limits(served, max_running=4)
    before = await db_rows(served)
    exc = await rpc_failure(set_limits(served, queue, **limits))
    assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (exc.details() or "")
    assert await db_rows(served) == before
    got = await served.admin.GetQueueLimits(admin_pb2.GetQueueLimitsRequest(queue=QUEUE))
    assert got.limits == admin_pb2.QueueLimits(max_running=4)


async def test_only_an_admin_token_of_the_queue_sets_limits(database_url: str, tmp_path: Path) -> None:
    tokens = {
        "client": Token("client-secret", role="client"),
        "worker": Token("worker-secret", role="worker"),
        "admin": Token("admin-secret", role="admin", queues=("reports",)),
    }
    served = await start_server(database_url, auth_file=write_auth_file(tmp_path / "auth.toml", tokens.values()))
    try:
        pause = admin_pb2.PauseQueueRequest(queue=QUEUE)
        for name in ("client", "worker"):
            code, _ = await rpc_error(served.admin.PauseQueue(pause, metadata=tokens[name].metadata))
            assert code == grpc.StatusCode.PERMISSION_DENIED, name
        code, _ = await rpc_error(served.admin.PauseQueue(pause, metadata=tokens["admin"].metadata))
        assert code == grpc.StatusCode.PERMISSION_DENIED  # an admin of other queues only
        mine = admin_pb2.PauseQueueRequest(queue="reports")
        assert (await served.admin.PauseQueue(mine, metadata=tokens["admin"].metadata)).paused
    finally:
        await served.close()


async def test_an_unlimited_queue_is_not_held_by_another_queues_limits(served) -> None:  # type: ignore[no-untyped-def]
    await served.admin.PauseQueue(admin_pb2.PauseQueueRequest(queue=QUEUE))
    held = await submit(served, queue=QUEUE)
    free = await submit(served, queue="free")
    leases = await claim(served, queues=[QUEUE, "free"], max_jobs=5)
    assert [lease.job_no for lease in leases] == [free.job_no]
    assert held.job_no not in {lease.job_no for lease in leases}


def _time(value: object) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


async def test_a_held_back_job_says_why_instead_of_its_place_in_line(served) -> None:  # type: ignore[no-untyped-def]
    await set_limits(served, max_running=1)
    first, second = [await submit(served, queue=QUEUE) for _ in range(2)]
    free = await submit(served, queue="free")
    (lease,) = await claim(served, queues=[QUEUE])
    assert lease.job_no == first.job_no
    at_limit = await get(served, second.job_no)
    assert at_limit.display.detail == "Queued: the queue is at its limit"
    assert (await get(served, second.job_no, "zh-CN")).display.detail == "排队中：队列已达到处理上限"
    await served.admin.PauseQueue(admin_pb2.PauseQueueRequest(queue=QUEUE))
    listed = await served.jobs.ListJobs(job_pb2.ListJobsRequest(statuses=[job_pb2.Job.QUEUED]))
    details = {j.job_no: j.display.detail for j in listed.jobs}
    assert details[second.job_no] == "Queued: the queue is paused"
    assert "queue" not in details[free.job_no]  # another queue's jobs keep their place in line
    assert (await get(served, second.job_no, "zh-CN")).display.detail == "排队中：队列已暂停"
    assert first.job_no not in details  # running, not held


async def test_another_tenants_backlog_never_delays_a_tenants_job(database_url: str, tmp_path: Path) -> None:
    """A claim scans its own tenant's jobs only (the claim index leads with the tenant): tenant
    A's 2,000 queued jobs in the same queue name are never ahead of tenant B's one job."""
    tokens = [Token(f"{who}-{role}", tenant=who, role=role) for who in ("a", "b") for role in ("client", "worker")]
    a_client, a_worker, b_client, b_worker = tokens
    served = await start_server(database_url, auth_file=write_auth_file(tmp_path / "auth.toml", tokens))
    try:
        for _ in range(2):
            requests = [job_pb2.SubmitRequest(job_type="frames", queue=QUEUE) for _ in range(1000)]
            await served.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=requests), metadata=a_client.metadata)
        b_job = (
            await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", queue=QUEUE), metadata=b_client.metadata)
        ).job
        first = await served.workers.Claim(_claim_request(), metadata=b_worker.metadata)
        assert [(lease.tenant, lease.job_no) for lease in first.leases] == [("b", b_job.job_no)]
        a_first = await served.workers.Claim(_claim_request(), metadata=a_worker.metadata)
        assert a_first.leases[0].tenant == "a"
    finally:
        await served.close()


def _claim_request() -> worker_pb2.ClaimRequest:
    return worker_pb2.ClaimRequest(worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name="frames")], queues=[QUEUE])
