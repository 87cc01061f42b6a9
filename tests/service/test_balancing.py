"""Client-side balancing (jobwire.client.channel): one client's calls reach every server its
target resolves to (two servers on one SQLite file); a worker's unary calls
do, and a worker's Session, one stream to one server, moves on when that server's connection
ages (JOBWIRE_MAX_CONNECTION_AGE_SECONDS): without an age it stays on one server for good.

Two servers listen on 127.0.0.1 and 127.0.0.2 with the same port: each address is its own
socket, so nothing is shared. In Kubernetes the target is `dns:///<headless Service>:PORT`,
one address per ready pod; a DNS name is hard to fake here, so the target is grpc's
`ipv4:127.0.0.1:PORT,127.0.0.2:PORT`, which lists both addresses and goes through the same
load-balancing policy as a name that resolves to both.
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from served import Served, eventually

from jobwire.client import AsyncJobClient, JobClient
from jobwire.client.enums import JobStatus
from jobwire.worker.sdk import Handlers, JobContext, Result, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(90)
GET = "jobwire.v1.JobService/Get"
CLAIM = "jobwire.v1.WorkerService/Claim"  # a unary worker's; a Session's worker waits in a StandingClaim
COMPLETE = "jobwire.v1.WorkerService/Complete"
SESSION = "jobwire.v1.WorkerService/Session"
# Each connection closed after half a second (JOBWIRE_MAX_CONNECTION_AGE_SECONDS), with a grace
# in which a call in flight surely ends (test_connection_age.py says why).
AGE = {"max_connection_age_seconds": 0.5, "max_connection_age_grace_seconds": 3.0}

handlers = Handlers()


@handlers.job("frames")
def frames(ctx: JobContext) -> Result:
    return Result.from_json({"ok": True})


async def _pair(serve: Any, **settings: object) -> tuple[str, list[Served]]:
    """Two servers over one database, on 127.0.0.1:PORT and 127.0.0.2:PORT, and a target listing both."""
    first: Served = await serve(**settings)
    port = int(first.target.rpartition(":")[2])
    second: Served = await serve(listen=f"127.0.0.2:{port}", **settings)
    assert second.target == f"127.0.0.2:{port}"
    return f"ipv4:127.0.0.1:{port},127.0.0.2:{port}", [first, second]


def _calls(servers: list[Served], method: str) -> list[float]:
    return [s.runtime.host.metrics.count(method, "OK") for s in servers]


def _streams(servers: list[Served], method: str) -> list[float]:
    """`method` streams each server has had: open now, or ended whatever their code."""
    seen = []
    for s in servers:
        metrics = s.runtime.host.metrics
        ended = metrics.registry.get_sample_value("jobwire_rpc_seconds_count", {"method": method}) or 0.0
        seen.append(metrics.open_streams(method) + ended)
    return seen


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


async def test_a_session_worker_moves_to_the_other_server_when_its_connection_ages(
    serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One long-lived channel does not pin a worker to one pod. A worker's Session (the default
    transport) sends every call on one stream, to one server; that server closes the connection
    at its maximum age, and cuts the stream once the age's grace is over (with several
    addresses the channel as a whole stays READY, so the worker sees no change before). The
    next stream goes round-robin: the other server leases the worker jobs too."""
    target, servers = await _pair(serve, **AGE)
    config = WorkerConfig(
        target=target, worker_id="w-session", concurrency=2, claim_wait=0.2, grace_period=2, tmp_root=tmp_path / "tmp"
    )
    assert config.transport == "session"
    worker = Worker(config, handlers)
    caplog.set_level(logging.WARNING, logger="jobwire.worker")
    running = asyncio.create_task(worker.run())
    loop = asyncio.get_running_loop()
    # A stream cut every age plus grace (3.5 s) goes to either server: round robin's picker
    # starts at a random index each time the subchannels change, as each connection's age
    # makes them. So a cut moves the worker with odds of one half; 60 s is about 17 cuts
    # (18.5 s, five cuts, stayed put in 1 of 8 runs on a loaded machine). Most runs end in seconds.
    deadline = loop.time() + 60
    done = 0
    try:
        async with AsyncJobClient.connect(target) as client:
            while min(_calls(servers, COMPLETE)) == 0:  # one job at a time, until each server finished one
                assert loop.time() < deadline, f"Completes per server: {_calls(servers, COMPLETE)}"
                job = (await client.submit("frames")).job
                await eventually(partial(_ready, client, job.job_no), what="the job READY")
                done += 1
                await asyncio.sleep(0.2)
    finally:
        worker.shutdown()
        assert await asyncio.wait_for(running, 10) == 0
    sessions = _streams(servers, SESSION)
    assert min(sessions) > 0 and _calls(servers, CLAIM) == [0, 0], f"Sessions per server: {sessions}"
    assert not [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]  # its leases outlived the cut
    print(json.dumps({"jobs": done, "completes": _calls(servers, COMPLETE), "sessions": sessions}))


async def _ready(client: AsyncJobClient, job_no: str) -> bool:
    return (await client.get(job_no)).status is JobStatus.READY
