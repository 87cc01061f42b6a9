"""An SDK worker against a real server, on SQLite: its jobs end READY over one
Session stream; against a server built without Session it runs on unary calls; and when its
server goes away for longer than the session grace, its handlers stop as for a lost lease.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from served import Served, eventually, start_server
from service_support import when

from jobwire.client import AsyncJobClient
from jobwire.client.enums import JobStatus
from jobwire.v1 import job_pb2, worker_pb2_grpc
from jobwire.worker.sdk import Handlers, JobContext, Result, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(90)
SESSION = "jobwire.v1.WorkerService/Session"

handlers = Handlers()


@handlers.job("frames")
def frames(ctx: JobContext) -> Result:
    ctx.progress(1, total=1)
    return Result.from_json({"ok": True})


@handlers.job("endless")
def endless(ctx: JobContext) -> Result:
    """Works until it is stopped; each unit a safe point."""
    i = 0
    while True:
        i += 1
        ctx.progress(i)
        ctx.sleep(0.01)


def _config(s: Served, tmp_path: Path, **fields: Any) -> WorkerConfig:
    return WorkerConfig(
        target=s.target, worker_id="w-session", concurrency=2, claim_wait=0.2, grace_period=2,
        tmp_root=tmp_path / "tmp", **fields,
    )  # fmt: skip


async def _run_jobs(s: Served, worker: Worker, count: int) -> None:
    """Submit `count` jobs and run `worker` until every one is READY; it must stop cleanly."""
    running = asyncio.create_task(worker.run())
    try:
        async with AsyncJobClient.connect(s.target) as client:
            jobs = [(await client.submit("frames")).job for _ in range(count)]

            async def all_ready() -> bool:
                return all([(await client.get(j.job_no)).status is JobStatus.READY for j in jobs])

            await eventually(all_ready, what="every job READY")
    finally:
        worker.shutdown()
        assert await asyncio.wait_for(running, 10) == 0


def _sessions(s: Served) -> float:
    """Session streams the server has seen end, whatever their code."""
    (family,) = [f for f in s.runtime.host.metrics.registry.collect() if f.name == "jobwire_rpc"]
    return sum(x.value for x in family.samples if x.name == "jobwire_rpc_total" and x.labels["method"] == SESSION)


async def test_an_sdk_worker_runs_jobs_to_ready_over_a_session(
    serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.worker")
    s: Served = await serve()
    await _run_jobs(s, Worker(_config(s, tmp_path), handlers), 5)
    assert caplog.text.count("worker transport: session") == 1  # said at the first frame answered
    assert "unary calls" not in caplog.text and "retrying" not in caplog.text
    await eventually(_ended(s), what="the worker's Session seen to end")


def _ended(s: Served) -> Any:
    async def probe() -> bool:
        return _sessions(s) >= 1

    return probe


async def test_against_a_server_built_without_session_the_worker_runs_on_unary_calls(
    serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.worker")
    add = worker_pb2_grpc.add_WorkerServiceServicer_to_server

    def add_without_session(servicer: Any, server: Any) -> None:
        """WorkerService as a server built before Session registers it: every method but that one."""

        class Registrar:
            def add_generic_rpc_handlers(self, handlers: object) -> None:
                """The generated code registers the same handlers by name just after."""

            def add_registered_method_handlers(self, service: str, methods: dict[str, Any]) -> None:
                server.add_registered_method_handlers(service, {n: h for n, h in methods.items() if n != "Session"})

        add(servicer, Registrar())

    monkeypatch.setattr(worker_pb2_grpc, "add_WorkerServiceServicer_to_server", add_without_session)
    s: Served = await serve()
    await _run_jobs(s, Worker(_config(s, tmp_path), handlers), 3)
    assert caplog.text.count("worker transport: unary calls (the server has no Session)") == 1
    assert "worker transport: session" not in caplog.text
    assert _sessions(s) == 0  # the server never ran one: its calls were unary


async def test_a_server_gone_longer_than_the_grace_stops_the_workers_handlers_as_lost_leases(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.worker")
    s = await start_server(database_url)  # this test stops it
    worker = Worker(_config(s, tmp_path, session_grace=0.5), handlers)
    running = asyncio.create_task(worker.run())
    try:
        job = (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="endless"))).job
        await eventually(when(s, job.job_no, lambda j: j.status == job_pb2.Job.RUNNING), what="RUNNING")
        await s.close()  # the server goes away, and stays away

        async def stopped() -> bool:
            return worker.running == 0

        await eventually(stopped, timeout=20, what="the handler stopped")
    finally:
        worker.shutdown()
        assert await asyncio.wait_for(running, 10) == 0
    assert "no worker session for 0.5s (JOBWIRE_SESSION_GRACE_SECONDS)" in caplog.text
    assert f"{job.job_no} attempt 1: lease lost" in caplog.text
