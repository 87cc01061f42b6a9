"""Client-side balancing (jobwire.client.channel): one client's calls reach every server its
target resolves to, on SQLite (one file) and MariaDB (one database).

Two servers listen on 127.0.0.1 and 127.0.0.2 with the same port: each address is its own
socket, so nothing is shared. In Kubernetes the target is `dns:///<headless Service>:PORT`,
one address per ready pod; a DNS name is hard to fake here, so the target is grpc's
`ipv4:127.0.0.1:PORT,127.0.0.2:PORT`, which lists both addresses and goes through the same
load-balancing policy as a name that resolves to both.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from served import Served, eventually

from jobwire.client import AsyncJobClient, JobClient
from jobwire.client.enums import JobStatus
from jobwire.worker.sdk import Handlers, JobContext, Result, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(90)
GET = "jobwire.v1.JobService/Get"
CLAIM = "jobwire.v1.WorkerService/Claim"

handlers = Handlers()


@handlers.job("frames")
def frames(ctx: JobContext) -> Result:
    return Result.from_json({"ok": True})


async def _pair(serve: Any) -> tuple[str, list[Served]]:
    """Two servers over one database, on 127.0.0.1:PORT and 127.0.0.2:PORT, and a target listing both."""
    first: Served = await serve()
    port = int(first.target.rpartition(":")[2])
    second: Served = await serve(listen=f"127.0.0.2:{port}")
    assert second.target == f"127.0.0.2:{port}"
    return f"ipv4:127.0.0.1:{port},127.0.0.2:{port}", [first, second]


def _calls(servers: list[Served], method: str) -> list[float]:
    return [s.runtime.host.metrics.count(method, "OK") for s in servers]


async def test_one_clients_gets_reach_both_servers(serve: Any) -> None:
    target, servers = await _pair(serve)

    def hundred_gets() -> None:
        with JobClient.connect(target) as client:
            job, _ = client.submit("frames")
            for _ in range(100):
                assert client.get(job.job_no).job_no == job.job_no

    await asyncio.to_thread(hundred_gets)  # the blocking client, off the servers' event loop
    gets = _calls(servers, GET)
    assert sum(gets) == 100 and min(gets) > 0, f"Gets per server: {gets}"

    async with AsyncJobClient.connect(target) as client:  # the asyncio client opens its channel the same way
        job, _ = await client.submit("frames")
        for _ in range(100):
            await client.get(job.job_no)
    more = [after - before for after, before in zip(_calls(servers, GET), gets, strict=True)]
    assert sum(more) == 100 and min(more) > 0, f"Gets per server: {more}"


async def test_a_workers_unary_claims_reach_both_servers_and_its_jobs_end(serve: Any, tmp_path: Path) -> None:
    target, servers = await _pair(serve)
    # Unary calls: a worker on a Session sends every call on its one stream, to one server.
    config = WorkerConfig(
        target=target, worker_id="w-balanced", concurrency=2, claim_wait=0.2, grace_period=2,
        tmp_root=tmp_path / "tmp", transport="unary",
    )  # fmt: skip
    worker = Worker(config, handlers)
    running = asyncio.create_task(worker.run())
    try:
        async with AsyncJobClient.connect(target) as client:
            jobs = [(await client.submit("frames")).job for _ in range(10)]

            async def all_ready() -> bool:
                return all([(await client.get(j.job_no)).status is JobStatus.READY for j in jobs])

            await eventually(all_ready, what="every job READY")

        # An idle worker's Claims come one after another, so round-robin alternates them.
        async def both_claimed_from() -> bool:
            return min(_calls(servers, CLAIM)) > 0

        await eventually(both_claimed_from, what=f"Claims on both servers: {_calls(servers, CLAIM)}")
    finally:
        worker.shutdown()
        assert await asyncio.wait_for(running, 10) == 0
