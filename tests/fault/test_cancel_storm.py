"""A cancel storm holds the database for nobody: another tenant's Submit p99 stays under 250 ms
while a root with 10,000 dependents is cancelled, on SQLite and MariaDB.

A load test, so it states its bound (P99_BOUND_S) and restarts nothing. The root and its
dependents (tenant acme) are committed through the server's own store before the server
starts, in submits of 1,000; then `python -m jobwire serve` (one process, two tenants) takes
acme's Cancel of the root while globex submits SUBMITS jobs, one every PACE_S (each one's
latency counts from when it was due, whatever the others do).
The Submits must overlap the settling: when the last one returns, dependents are still
waiting. The storm's load per second does not depend on its size (the settler cancels in
chunks of 50), only how long it lasts: when the Submits end, about 6,000 of 10,000 still
wait on SQLite and 9,300 on MariaDB (this machine, idle), and the test takes 19 s alone
where 50,000 took 65 s (most of it seeding). bench/cancel_storm.py measures the same at full length, 50,000 (root Cancel
latency, total settle time).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from processes import start_server_process

from jobwire.db.store import Submit, open_store
from jobwire.domain.commands import NewJob
from jobwire.v1 import job_pb2, job_pb2_grpc

# alone: a load test, whose latency bound needs the machine to itself
pytestmark = [pytest.mark.alone, pytest.mark.timeout(900)]

DEPENDENTS = 10_000
SUBMITS = 100
PACE_S = 0.02  # from one Submit's start to the next: 100 Submits in two seconds
P99_BOUND_S = 0.25  # issue 22, finding 8
CALL_TIMEOUT_S = 60.0  # a stalled Submit counts as this long
WARM_UP = 50  # Submits first, a second of them, not counted
ACME = Token("storm-acme-client-22", tenant="acme")
GLOBEX = Token("storm-globex-client-22", tenant="globex")


async def seed(url: str) -> str:
    """The root's job number, once it and its DEPENDENTS dependents are committed."""
    store = open_store(url)
    try:
        job = NewJob(tenant="acme", job_type="frames", queue="default", payload=b"{}")
        ((root, _),) = (await store.apply([Submit([job])]))[0]
        child = NewJob(tenant="acme", job_type="frames", queue="default", payload=b"{}", depends_on=(root.job_no,))
        for _ in range(DEPENDENTS // 1000):
            await store.apply([Submit([child] * 1000)])
        return root.job_no
    finally:
        await store.db.close()


def still_waiting(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            query = "SELECT COUNT(*) FROM job WHERE tenant = 'acme' AND status = 'QUEUED' AND waiting_on > 0"
            return int(conn.execute(sa.text(query)).scalar_one())
    finally:
        engine.dispose()


async def storm(target: str, root: str) -> tuple[list[tuple[float, str]], str]:
    """globex's Submits while acme's Cancel of `root` settles (each one's latency in seconds,
    and its error code if it failed), and the root's status as the Cancel answered (or the
    Cancel's error code)."""
    async with grpc.aio.insecure_channel(target) as channel:
        jobs = job_pb2_grpc.JobServiceStub(channel)
        for _ in range(WARM_UP):  # not counted: the server's start (its first housekeeping round reads every job)
            await jobs.Submit(job_pb2.SubmitRequest(job_type="warm"), metadata=GLOBEX.metadata)
            await asyncio.sleep(PACE_S)

        async def one() -> tuple[float, str]:
            began = time.perf_counter()
            try:
                request = job_pb2.SubmitRequest(job_type="frames")
                await jobs.Submit(request, metadata=GLOBEX.metadata, timeout=CALL_TIMEOUT_S)
                failed = ""
            except grpc.aio.AioRpcError as exc:  # a stalled one ends at its deadline: counted as long
                failed = exc.code().name
            return time.perf_counter() - began, failed

        async def submitter() -> list[tuple[float, str]]:
            # One Submit every PACE_S whether the last has answered or not: a stall delays
            # every Submit made during it, not just the one that met it.
            started = []
            for _ in range(SUBMITS):
                started.append(asyncio.create_task(one()))
                await asyncio.sleep(PACE_S)
            return list(await asyncio.gather(*started))

        other = asyncio.create_task(submitter())
        try:
            cancel = job_pb2.CancelRequest(job_no=root)
            answer = job_pb2.Job.Status.Name((await jobs.Cancel(cancel, metadata=ACME.metadata, timeout=120)).status)
        except grpc.aio.AioRpcError as exc:
            answer = exc.code().name
        return await other, answer


async def test_another_tenants_submits_stay_fast_while_10000_dependents_are_cancelled(
    database_url: str, tmp_path: Path
) -> None:
    root = await seed(database_url)
    auth = write_auth_file(tmp_path / "auth.toml", [ACME, GLOBEX])
    env = {"JOBWIRE_DATABASE_URL": database_url, "JOBWIRE_LISTEN": "127.0.0.1:0", "JOBWIRE_PROCESSES": "1",
           "JOBWIRE_AUTH_FILE": str(auth)}  # fmt: skip
    server = start_server_process(["jobwire", "serve"], env)
    try:
        submits, answer = await storm(server.target, root)
        waiting = await asyncio.to_thread(still_waiting, database_url)
    finally:
        server.terminate()
    latencies = sorted(latency for latency, _ in submits)
    failed = [code for _, code in submits if code]
    p50, p99 = latencies[len(latencies) // 2], latencies[-(len(latencies) // 100) - 1]
    figures = f"globex Submit p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms"
    print(f"\n{figures}, failed {failed}; root Cancel answered {answer}; {waiting} dependents waiting after")
    assert p99 < P99_BOUND_S, figures
    assert failed == []
    assert answer == "CANCELLED"
    assert waiting > 0, f"the Submits did not overlap the settling ({figures})"
