"""A server that closes each connection after its age (JOBWIRE_MAX_CONNECTION_AGE_SECONDS, so
long-lived channels rebalance) breaks none of its long-lived callers, on SQLite:

- a client's watch cut by the age (UNAVAILABLE "max connection age" once the grace is over)
  resumes from its last version: every version once, none missed, to the terminal one; a
  batch watch opens its stream again and catches up, each version once;
- an SDK worker's long-poll Claims and reports carry on across many ages: every job is
  leased once and ends READY, and no call had to be retried;
- the gateway's live stream ends without `gone`, as for a restart, so the browser reconnects
  and reads each job as it is.

The ages here are a fraction of a second so that a test spans several.
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from gateway_support import browser, running_gateway, sign_in
from served import Served, eventually
from service_support import claim, complete_request, submit

from jobwire.client import AsyncJobClient
from jobwire.client.enums import JobStatus
from jobwire.db.tables import job_event
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk import Handlers, JobContext, Result, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(90)
AGE = {"max_connection_age_seconds": 0.5, "max_connection_age_grace_seconds": 0.3}
# For a worker's calls: the same ages, and a grace in which a call in flight surely ends, as
# a 30 s long poll does in the 600 s of the defaults. With 0.3 s, a 0.2 s Claim on a loaded
# machine can outlast the grace and be cut with UNAVAILABLE, which the defaults never do.
AGE_WITH_GRACE = {"max_connection_age_seconds": 0.5, "max_connection_age_grace_seconds": 3.0}
REPORTS = 12
WATCH_JOBS = "jobwire.v1.JobService/WatchJobs"

handlers = Handlers()


@handlers.job("frames")
def frames(ctx: JobContext) -> Result:
    return Result.from_json({"ok": True})


async def test_a_watch_cut_by_the_connection_age_resumes_without_a_duplicate_or_a_miss(serve: Any) -> None:
    s: Served = await serve(**AGE)
    job = await submit(s)
    cuts: list[BaseException | None] = []
    seen: list[int] = []

    async with AsyncJobClient.connect(s.target) as client:

        async def watch() -> None:
            async for update in client.watch(job.job_no, on_reconnect=lambda n, delay, cause: cuts.append(cause)):
                seen.append(update.version)

        watching = asyncio.create_task(watch())
        await eventually(lambda: _true(seen), what="the first update")
        (lease,) = await claim(s, job.job_type)
        for units in range(1, REPORTS + 1):
            report = worker_pb2.ReportStageRequest(
                job_no=job.job_no, worker_token=lease.worker_token, stage="RENDERING", processed_units=units
            )
            await s.workers.BatchReportStage(worker_pb2.BatchReportStageRequest(reports=[report]))
            if units % 4 == 0:  # let a cut happen between some of the changes
                await eventually(partial(_more_than, cuts, len(cuts)), what="the stream cut by its connection's age")
        done = await s.workers.Complete(complete_request(lease))
        await asyncio.wait_for(watching, 10)

    assert cuts and all("max connection age" in str(cause) for cause in cuts), cuts
    assert seen == list(range(job.version, done.version + 1)), "a version twice, or one missed"


async def test_a_batch_watch_cut_by_the_connection_age_catches_up_with_each_version_once(serve: Any) -> None:
    s: Served = await serve(**AGE)
    seen: list[tuple[str, int]] = []
    async with AsyncJobClient.connect(s.target) as client:
        made = await client.submit_batch([client.submit_request("frames") for _ in range(3)])

        async def watch() -> None:
            async for job in client.watch_batch(made.batch_id):
                seen.append((job.job_no, job.version))

        watching = asyncio.create_task(watch())
        for _ in made.jobs:
            (lease,) = await claim(s, "frames")
            await s.workers.Complete(complete_request(lease))
            ended = _watches_ended(s)
            await eventually(lambda: _true(_watches_ended(s) > ended), what="the batch's stream cut by its age")  # noqa: B023
        await asyncio.wait_for(watching, 10)
        final = {job.job_no: (await client.get(job.job_no)).version for job in made.jobs}
    assert len(seen) == len(set(seen)), "a version delivered twice"
    for job_no, version in final.items():
        versions = [v for no, v in seen if no == job_no]
        assert versions == sorted(versions) and versions[-1] == version, (job_no, versions)


def _watches_ended(s: Served) -> float:
    """WatchJobs calls this server has seen end, whatever their code."""
    (family,) = [f for f in s.runtime.host.metrics.registry.collect() if f.name == "jobwire_rpc"]
    return sum(x.value for x in family.samples if x.name == "jobwire_rpc_total" and x.labels["method"] == WATCH_JOBS)


async def test_an_sdk_worker_carries_on_across_connection_ages(
    serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s: Served = await serve(**AGE_WITH_GRACE)
    config = WorkerConfig(
        target=s.target, worker_id="w-aged", concurrency=2, claim_wait=0.2, grace_period=2, tmp_root=tmp_path / "tmp"
    )
    worker = Worker(config, handlers)
    caplog.set_level(logging.WARNING, logger="jobwire.worker")
    running = asyncio.create_task(worker.run())
    jobs = []
    try:
        async with AsyncJobClient.connect(s.target) as client:
            for _ in range(8):  # one job at a time over about eight connection ages
                jobs.append((await client.submit("frames")).job)
                await eventually(lambda: _ready(client, jobs[-1].job_no), what="the job READY")
                await asyncio.sleep(AGE["max_connection_age_seconds"] / 2)  # spread the jobs over several ages
    finally:
        worker.shutdown()
        assert await asyncio.wait_for(running, 10) == 0
    claimed = await _claims(s)
    assert claimed == len(jobs), "a job leased twice"
    assert not [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]


async def test_the_gateways_live_stream_ends_for_the_browser_to_reconnect(serve: Any, tmp_path: Path) -> None:
    person, worker = Token("acme-client-token", tenant="acme"), Token("acme-worker-token", tenant="acme", role="worker")
    s: Served = await serve(auth_file=write_auth_file(tmp_path / "auth.toml", [person, worker]), **AGE)
    job = (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=person.metadata)).job
    live = {"job": job.job_no, "one": "1"}
    with running_gateway(s.target) as gateway:
        async with browser(gateway) as page:
            assert (await sign_in(page, person.secret)).status_code == 303
            cut = await asyncio.wait_for(_events_until_the_end(page, live), 10)
            assert [name for name, _ in cut][:1] == ["job"] and "gone" not in [name for name, _ in cut]
            kinds = [worker_pb2.JobTypeSpec(name="frames")]
            await s.workers.Claim(worker_pb2.ClaimRequest(worker_id="w1", job_types=kinds), metadata=worker.metadata)
            again = await asyncio.wait_for(_events_until_the_end(page, live), 10)  # as EventSource reconnects
            assert again[0] == ("job", "RUNNING")


async def _events_until_the_end(page: Any, params: dict[str, str]) -> list[tuple[str, str]]:
    """(event, the job's status) of each event of one live stream, until the gateway ends it."""
    events, name = [], ""
    async with page.stream("GET", "/live", params=params) as stream:
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: ")).get("status", "")))
    return events


async def _true(value: object) -> bool:
    return bool(value)


async def _more_than(items: list[Any], n: int) -> bool:
    return len(items) > n


async def _ready(client: AsyncJobClient, job_no: str) -> bool:
    return (await client.get(job_no)).status is JobStatus.READY


async def _claims(s: Served) -> int:
    query = sa.select(sa.func.count()).select_from(job_event).where(job_event.c.kind == "CLAIMED")

    def read() -> int:
        with s.runtime.store.db.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    return await asyncio.to_thread(read)
