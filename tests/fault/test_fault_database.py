"""The database goes away under a running system (MariaDB only).

* Restarted mid-run: health goes NOT_SERVING then SERVING; calls meanwhile fail
  UNAVAILABLE (never UNKNOWN or INTERNAL); afterwards every job is done exactly once.
* A connection killed in the middle of a transaction: nothing half-applied is ever
  visible, and the server retries the call on a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import pytest
import sqlalchemy as sa
from fault_support import (
    claim_request,
    connections,
    kill,
    mariadb_reachable,
    result,
    rows_modified,
    server_url,
    start_mariadb,
    stop_mariadb,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from served import eventually

from jobwire.client.status import error_reason
from jobwire.db.tables import artifact, job, job_event
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = [pytest.mark.alone, pytest.mark.mysql, pytest.mark.timeout(90)]  # alone: it restarts the shared MariaDB

T = TypeVar("T")
JOBS = 30
LEASE_S = 2.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED)  # ABORTED: a conflict; safe to repeat


class Calls:
    """Runs calls, retrying UNAVAILABLE and ABORTED as a client would, and counts every failure seen."""

    def __init__(self) -> None:
        self.failures: Counter[tuple[str, str, str | None]] = Counter()

    async def __call__(self, method: str, make: Callable[[], Awaitable[T]]) -> T:
        while True:
            try:
                return await make()
            except grpc.aio.AioRpcError as exc:
                self.failures[method, exc.code().name, error_reason(exc)] += 1
                if exc.code() not in RETRIED:
                    raise
                await asyncio.sleep(0.1)


async def worker(s: Any, calls: Calls, name: str, done: set[str], stop: asyncio.Event) -> None:
    """Claim, report, complete; a call refused otherwise than UNAVAILABLE gives the lease up."""
    claim = claim_request(worker_id=name, lease=LEASE_S, wait=0.2)
    while not stop.is_set():
        with contextlib.suppress(grpc.aio.AioRpcError):  # every failure is counted, and checked below
            for lease in (await calls("Claim", lambda: s.workers.Claim(claim, timeout=20))).leases:
                await work(s, calls, lease, done)


async def work(s: Any, calls: Calls, lease: worker_pb2.Lease, done: set[str]) -> None:
    ref = {"job_no": lease.job_no, "worker_token": lease.worker_token}
    for units in (1, 2):
        report = worker_pb2.ReportStageRequest(**ref, stage="PROCESSING", processed_units=units, total_units=2)
        await calls("ReportStage", lambda: s.workers.ReportStage(report, timeout=20))  # noqa: B023 - awaited here
        await asyncio.sleep(0.02)
    finish = worker_pb2.CompleteRequest(**ref, result=result(f"file:///results/{lease.job_no}.bin"))
    done.add((await calls("Complete", lambda: s.workers.Complete(finish, timeout=20))).job_no)


async def health(s: Any) -> int:
    try:
        reply = await health_pb2_grpc.HealthStub(s.channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
        return int(reply.status)
    except grpc.aio.AioRpcError:
        return -1


# The database fixture comes first so it is dropped last: after the servers close, whose
# connections (one may sit in a transaction the restart interrupted) would hold DROP's lock.
async def test_database_restarted_mid_run(restartable_mysql_url, servers) -> None:  # type: ignore[no-untyped-def]
    mysql_url = restartable_mysql_url
    s = await servers(mysql_url, reaper_interval_seconds=0.2, stall_grace_seconds=1.0)
    calls = Calls()
    done: set[str] = set()
    stop = asyncio.Event()
    workers = [asyncio.create_task(worker(s, calls, f"w{i}", done, stop)) for i in range(2)]
    policy = job_pb2.RetryPolicy(max_attempts=10, on_lease_lost=job_pb2.RetryPolicy.RETRY)
    submitted: dict[str, str] = {}
    restarted = False
    try:
        for i in range(JOBS):
            request = job_pb2.SubmitRequest(job_type="frames", idempotency_key=f"k{i}", retry_policy=policy)
            reply = await calls("Submit", lambda: s.jobs.Submit(request, timeout=20))  # noqa: B023 - awaited here
            submitted[f"k{i}"] = reply.job.job_no
            if i == JOBS // 3:
                assert await health(s) == SERVING
                await asyncio.to_thread(stop_mariadb)
                restarted = True
                await eventually(lambda: _is(health(s), NOT_SERVING), timeout=10, what="health NOT_SERVING")
                for call in (  # the database stays down until these have answered
                    s.jobs.Get(job_pb2.GetRequest(job_no=reply.job.job_no), timeout=10),
                    s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", idempotency_key="down"), timeout=10),
                    s.workers.Claim(claim_request(worker_id="down"), timeout=10),
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await call
                    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE, refused.value
                await asyncio.to_thread(start_mariadb, server_url(mysql_url))
                await eventually(lambda: _is(health(s), SERVING), timeout=10, what="health SERVING again")
            await asyncio.sleep(0.05)
        await eventually(lambda: _true(len(done) >= JOBS), timeout=30, what=f"all jobs done; {calls.failures}")
    finally:
        stop.set()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if restarted and not mariadb_reachable(server_url(mysql_url)):
            await asyncio.to_thread(start_mariadb, server_url(mysql_url))

    failures = {code for _, code, _ in calls.failures}  # what the workload's calls met, if anything
    assert failures <= {"UNAVAILABLE", "ABORTED", "FAILED_PRECONDITION"}, calls.failures  # never UNKNOWN or INTERNAL
    assert {reason for _, code, reason in calls.failures if code == "FAILED_PRECONDITION"} <= {"WORKER_LEASE_LOST"}
    assert done == set(submitted.values())
    with s.runtime.store.db.engine.connect() as conn:
        statuses = Counter(conn.execute(sa.select(job.c.status)).scalars())
        completions = Counter(
            conn.execute(sa.select(job_event.c.job_no).where(job_event.c.kind == "COMPLETED")).scalars()
        )
        results = conn.execute(sa.select(sa.func.count()).select_from(artifact)).scalar_one()
    assert statuses == {"READY": JOBS}  # none lost, none doubled
    assert set(completions.values()) == {1} and len(completions) == JOBS
    assert results == JOBS


async def _is(value: Awaitable[int], wanted: int) -> bool:
    return await value == wanted


async def _true(value: bool) -> bool:
    return value


async def test_a_connection_killed_mid_transaction_leaves_no_half_change(servers, mysql_url) -> None:  # type: ignore[no-untyped-def]
    s = await servers(mysql_url, reaper_interval_seconds=0)
    job_no = (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))).job.job_no
    [lease] = (await s.workers.Claim(claim_request())).leases
    outside = sa.create_engine(mysql_url, isolation_level="READ COMMITTED", poolclass=sa.pool.NullPool)

    def visible() -> tuple[str, int, int, int]:
        """(status, version, artifact rows, COMPLETED events) as committed."""
        with outside.connect() as conn:
            status, version = conn.execute(sa.select(job.c.status, job.c.version).where(job.c.job_no == job_no)).one()
            files = conn.execute(sa.select(sa.func.count()).select_from(artifact)).scalar_one()
            completed = conn.execute(
                sa.select(sa.func.count()).where(job_event.c.job_no == job_no, job_event.c.kind == "COMPLETED")
            ).scalar_one()
        return status, version, files, completed

    running = await asyncio.to_thread(visible)
    assert running[0] == "RUNNING" and running[2:] == (0, 0)
    holder = outside.connect()
    holding = holder.begin()
    try:
        # An uncommitted artifact row for the job: Complete updates the job, writes its event,
        # then waits on the artifact's unique key, holding a transaction with writes in it.
        job_id = holder.execute(sa.select(job.c.id).where(job.c.job_no == job_no)).scalar_one()
        holder.execute(sa.insert(artifact).values(
            job_id=job_id, uri="file:///held", size_bytes=0, sha256="0" * 64, content_type="", summary="",
            created_at=sa.func.utc_timestamp(6),
        ))  # fmt: skip
        request = worker_pb2.CompleteRequest(job_no=job_no, worker_token=lease.worker_token, result=result())
        call = asyncio.ensure_future(s.workers.Complete(request, timeout=30))

        async def blocked(exclude: int | None = None) -> int | None:
            found = await asyncio.to_thread(connections, mysql_url, "INSERT INTO artifact %")
            return next((cid for cid, _ in found if cid != exclude), None)

        first = await eventually(blocked, what="Complete blocked mid-transaction")
        assert await asyncio.to_thread(rows_modified, mysql_url, first) >= 2  # job UPDATE + event, uncommitted
        await asyncio.to_thread(kill, mysql_url, first)
        retried = await eventually(lambda: blocked(exclude=first), what="the server retries on a new connection")
        assert retried != first and not call.done()
        assert await asyncio.to_thread(visible) == running  # the killed transaction left nothing behind
    finally:
        holding.rollback()
        holder.close()
    done = await call
    assert done.status == job_pb2.Job.READY and done.version == running[1] + 1
    assert await asyncio.to_thread(visible) == ("READY", running[1] + 1, 1, 1)
    outside.dispose()


async def test_killed_idle_connections_are_replaced_unnoticed(servers, mysql_url) -> None:  # type: ignore[no-untyped-def]
    s = await servers(mysql_url, reaper_interval_seconds=0)
    for _ in range(3):
        await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))
    pooled = await asyncio.to_thread(connections, mysql_url)
    assert pooled
    for cid, _ in pooled:
        await asyncio.to_thread(kill, mysql_url, cid)
    started = time.monotonic()
    reply = await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))
    assert reply.created and time.monotonic() - started < 10  # no connect timeout, no error
    assert len((await s.workers.Claim(claim_request(max_jobs=10))).leases) == 4
