"""One story per job, over real gRPC on SQLite with the web gateway in front.

Get, ListJobs, WatchStatus, WatchJobs (an owner's, job numbers', a batch's) and the web pages
(their HTML and their live stream, read over HTTP) say the same of a QUEUED job: that no
worker serves its kind, that its queue is paused or at its limit (of running jobs, or of
starts per second), or its place in line, which counts only the jobs ahead a worker could
claim now. A stream's later messages say what Get says of the worker and the queue (they
carry no place in line: it is not a versioned change).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from db_edits import db_execute
from gateway_support import browser, running_gateway, sign_in
from served import Served

from jobwire.db.tables import worker_claim
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(120)
CLIENT = Token("acme-client", tenant="acme")
WORKER = Token("acme-worker", tenant="acme", role="worker")
ADMIN = Token("acme-admin", tenant="acme", role="admin")
OWNER = "alice"
NO_WORKER = "Queued · No worker is serving this kind of job yet"
PAUSED = "Queued: the queue is paused"
AT_LIMIT = "Queued: the queue is at its limit"
NEXT = "Queued · next in line"


@pytest.fixture
async def served(serve: Callable[..., Awaitable[Served]], tmp_path: Path) -> Served:
    return await serve(auth_file=write_auth_file(tmp_path / "auth.toml", [CLIENT, WORKER, ADMIN]))


@pytest.fixture
def gateway(served: Served) -> Iterator[str]:
    with running_gateway(served.target) as url:
        yield url


@asynccontextmanager
async def signed_in(gateway: str) -> AsyncIterator[httpx.AsyncClient]:
    async with browser(gateway) as client:
        assert (await sign_in(client, CLIENT.secret)).status_code == 303
        yield client


async def claim(served: Served, job_type: str, queue: str = "default") -> list[worker_pb2.Lease]:
    request = worker_pb2.ClaimRequest(worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name=job_type)], queues=[queue])
    return list((await served.workers.Claim(request, metadata=WORKER.metadata)).leases)


async def submit_batch(served: Served, *kinds: tuple[str, str], attempts: int = 0) -> job_pb2.SubmitBatchResponse:
    """A batch of `(job type, queue)` jobs of OWNER, in that order."""
    policy = job_pb2.RetryPolicy(max_attempts=attempts)
    jobs = [job_pb2.SubmitRequest(job_type=t, queue=q, owner=OWNER, retry_policy=policy) for t, q in kinds]
    return await served.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=jobs), metadata=CLIENT.metadata)


async def get(served: Served, job_no: str) -> job_pb2.Job:
    job: job_pb2.Job = await served.jobs.Get(job_pb2.GetRequest(job_no=job_no), metadata=CLIENT.metadata)
    return job


async def next_of(call: grpc.aio.UnaryStreamCall, job_no: str) -> job_pb2.Job:
    """The stream's next message about `job_no` (an owner's stream sends the owner's other jobs too)."""
    while True:
        update = await call.read()
        assert update is not grpc.aio.EOF, f"the stream ended before a message about {job_no}"
        if update.job.job_no == job_no:
            return update.job


async def next_sse(lines: AsyncIterator[str], job_no: str) -> dict[str, Any]:
    """The data of the live stream's next `job` event about `job_no`."""
    name = ""
    async for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: ") and name == "job":
            data: dict[str, Any] = json.loads(line.removeprefix("data: "))
            if data["job_no"] == job_no:
                return data
    raise AssertionError(f"the live stream ended before an event about {job_no}")


def watch_status(served: Served, job_no: str) -> grpc.aio.UnaryStreamCall:
    return served.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=job_no), metadata=CLIENT.metadata)


def watch_jobs(served: Served, **scope: Any) -> grpc.aio.UnaryStreamCall:
    return served.jobs.WatchJobs(job_pb2.WatchJobsRequest(**scope), metadata=CLIENT.metadata)


def _html_detail(page: str, pattern: str) -> str:
    found = re.search(pattern, page, re.S)
    assert found is not None, page
    return html.unescape(found.group(1)).strip()


async def every_view(served: Served, gateway: str, job_no: str, batch_id: str) -> dict[str, str]:
    """The detail line each view of the job shows now, by view."""
    listed = await served.jobs.ListJobs(job_pb2.ListJobsRequest(owner=OWNER), metadata=CLIENT.metadata)
    shown = {
        "Get": (await get(served, job_no)).display.detail,
        "ListJobs": next(j for j in listed.jobs if j.job_no == job_no).display.detail,
    }
    streams = {
        "WatchStatus": watch_status(served, job_no),
        "WatchJobs(owner)": watch_jobs(served, owner=OWNER),
        "WatchJobs(job_nos)": watch_jobs(served, job_nos=[job_no]),
        "WatchJobs(batch_id)": watch_jobs(served, batch_id=batch_id),
    }
    for name, call in streams.items():
        shown[name] = (await next_of(call, job_no)).display.detail
        call.cancel()
    async with signed_in(gateway) as client:
        jobs_page = (await client.get("/jobs")).text
        shown["jobs page"] = _html_detail(jobs_page, rf'data-job="{job_no}".*?data-field="detail">(.*?)</td>')
        job_page = (await client.get(f"/jobs/{job_no}")).text
        shown["job page"] = _html_detail(job_page, r'data-field="detail" id="detail">(.*?)</p>')
        for name, path, params in (
            ("job page's live stream", "/live", {"job": job_no, "one": "1"}),
            ("jobs page's live stream", "/live/jobs", {"job": job_no}),
        ):
            async with client.stream("GET", path, params=params) as stream:
                shown[name] = (await next_sse(stream.aiter_lines(), job_no))["detail"]
    return shown


async def test_a_job_no_worker_serves_says_so_everywhere_and_is_not_ahead_of_one_a_worker_serves(
    served: Served, gateway: str
) -> None:
    assert await claim(served, "frames") == []  # a worker serves frames, none serves orphan
    batch = await submit_batch(served, ("orphan", "default"), ("frames", "default"))
    orphan, frames = (job.job_no for job in batch.jobs)  # the orphan first: it is ahead in line
    unserved = await every_view(served, gateway, orphan, batch.batch_id)
    assert unserved == dict.fromkeys(unserved, NO_WORKER)
    behind = await every_view(served, gateway, frames, batch.batch_id)
    assert behind == dict.fromkeys(behind, NEXT)  # not "1 job ahead": nobody can claim the orphan
    assert (await get(served, frames)).queue_position == 0


async def test_a_job_in_a_paused_queue_says_so_everywhere(served: Served, gateway: str) -> None:
    assert await claim(served, "frames", "exports") == []
    await served.admin.PauseQueue(admin_pb2.PauseQueueRequest(queue="exports"), metadata=ADMIN.metadata)
    batch = await submit_batch(served, ("frames", "exports"))
    held = await every_view(served, gateway, batch.jobs[0].job_no, batch.batch_id)
    assert held == dict.fromkeys(held, PAUSED)


@pytest.mark.parametrize(
    "limits",
    [admin_pb2.QueueLimits(max_running=1), admin_pb2.QueueLimits(rate_per_second=0.001, burst=1)],
    ids=["max_running", "rate"],
)
async def test_a_job_in_a_queue_at_its_limit_says_so_everywhere(
    served: Served, gateway: str, limits: admin_pb2.QueueLimits
) -> None:
    """One job at a time in `exports`, or one start per 1000 s: once one is leased, the next is held back."""
    await _limit_exports(served, limits)
    batch = await submit_batch(served, ("frames", "exports"), ("frames", "exports"))
    (lease,) = await claim(served, "frames", "exports")
    held_no = next(job.job_no for job in batch.jobs if job.job_no != lease.job_no)
    held = await every_view(served, gateway, held_no, batch.batch_id)
    assert held == dict.fromkeys(held, AT_LIMIT)


async def _limit_exports(served: Served, limits: admin_pb2.QueueLimits) -> None:
    request = admin_pb2.SetQueueLimitsRequest(queue="exports", limits=limits)
    await served.admin.SetQueueLimits(request, metadata=ADMIN.metadata)


async def fed(served: Served) -> None:
    """The change feed has handed out every event so far. Else a version from before the streams
    opened could still be stood once they watch, and its queue's facts kept for the next second
    (JobStore.restand), unaware of a change made behind the server's back (`_age_the_claims`)."""
    await served.runtime.tail.sync()


async def _age_the_claims(served: Served) -> None:
    """The workers of every kind stopped claiming long ago (JOBWIRE_NO_WORKER_AFTER has passed)."""
    await db_execute(served, sa.update(worker_claim).values(claimed_at=datetime(2000, 1, 1)))


async def _pause_exports(served: Served) -> None:
    await served.admin.PauseQueue(admin_pb2.PauseQueueRequest(queue="exports"), metadata=ADMIN.metadata)


async def _fill_exports(served: Served) -> None:
    """Another job runs in `exports`, which now leases one job at a time."""
    await submit_batch(served, ("frames", "exports"))
    assert len(await claim(served, "frames", "exports")) == 1
    await _limit_exports(served, admin_pb2.QueueLimits(max_running=1))


@pytest.mark.parametrize(
    ("change", "said"), [(_pause_exports, PAUSED), (_fill_exports, AT_LIMIT), (_age_the_claims, NO_WORKER)]
)
async def test_a_later_stream_message_agrees_with_get(
    served: Served, gateway: str, change: Callable[[Served], Awaitable[None]], said: str
) -> None:
    """A running job goes back to the queue (Release) after its queue was paused, or reached its
    limit, or after its kind's workers went away: each stream's next message says so, as Get does."""
    batch = await submit_batch(served, ("frames", "exports"))
    job_no = batch.jobs[0].job_no
    (lease,) = await claim(served, "frames", "exports")
    await fed(served)
    calls = [
        watch_status(served, job_no),
        watch_jobs(served, owner=OWNER),
        watch_jobs(served, job_nos=[job_no]),
        watch_jobs(served, batch_id=batch.batch_id),
    ]
    async with signed_in(gateway) as client, client.stream("GET", "/live", params={"job": job_no}) as stream:
        lines = stream.aiter_lines()
        for call in calls:
            assert (await next_of(call, job_no)).status == job_pb2.Job.RUNNING
        assert (await next_sse(lines, job_no))["status"] == "RUNNING"
        await change(served)
        release = worker_pb2.ReleaseRequest(job_no=job_no, worker_token=lease.worker_token)
        await served.workers.Release(release, metadata=WORKER.metadata)
        now = await get(served, job_no)
        assert now.display.detail == said
        for call in calls:
            later = await next_of(call, job_no)
            assert (later.status, later.display.detail, later.no_worker) == (now.status, said, now.no_worker)
            assert not later.HasField("queue_position")  # streams send no place in line after the first
        assert (await next_sse(lines, job_no))["detail"] == said
    for call in calls:
        call.cancel()


async def test_a_retry_of_a_kind_no_worker_serves_any_more_says_so_on_the_stream(served: Served, gateway: str) -> None:
    batch = await submit_batch(served, ("flaky", "default"), attempts=1)  # its one failure ends it
    job_no = batch.jobs[0].job_no
    (lease,) = await claim(served, "flaky")
    failing = worker_pb2.FailRequest(
        job_no=job_no, worker_token=lease.worker_token, category=job_pb2.JobError.PROCESSING_ERROR,
        message="the service it calls is down", retryable=True,
    )  # fmt: skip
    await served.workers.Fail(failing, metadata=WORKER.metadata)
    await fed(served)
    call = watch_jobs(served, job_nos=[job_no])
    async with signed_in(gateway) as client, client.stream("GET", "/live", params={"job": job_no}) as stream:
        lines = stream.aiter_lines()
        assert (await next_of(call, job_no)).status == job_pb2.Job.FAILED
        assert (await next_sse(lines, job_no))["status"] == "FAILED"
        await _age_the_claims(served)  # the flaky kind's worker is gone
        await served.jobs.Retry(job_pb2.RetryRequest(job_no=job_no), metadata=CLIENT.metadata)
        now = await get(served, job_no)
        assert (now.status, now.display.detail, now.no_worker) == (job_pb2.Job.QUEUED, NO_WORKER, True)
        later = await next_of(call, job_no)
        assert (later.status, later.display.detail, later.no_worker) == (job_pb2.Job.QUEUED, NO_WORKER, True)
        assert (await next_sse(lines, job_no))["detail"] == NO_WORKER
    call.cancel()


async def test_a_later_message_of_a_job_waiting_for_dependencies_names_those_left(served: Served) -> None:
    """A version records only how many dependencies are left; the stream names them, as Get does."""
    first, second = [await submit_batch(served, ("frames", "default")) for _ in range(2)]
    deps = [first.jobs[0].job_no, second.jobs[0].job_no]
    request = job_pb2.SubmitRequest(job_type="frames", owner=OWNER, depends_on=deps)
    waiting = (await served.jobs.Submit(request, metadata=CLIENT.metadata)).job.job_no
    call = watch_status(served, waiting)
    assert (await next_of(call, waiting)).display.detail == f"Queued · Waiting for {deps[0]}, {deps[1]}"
    (lease,) = await claim(served, "frames")
    done = worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token,
        result=job_pb2.Artifact(uri="file:///results/out.bin", size_bytes=1, sha256="ab" * 32),
    )  # fmt: skip
    await served.workers.Complete(done, metadata=WORKER.metadata)
    later = await next_of(call, waiting)
    assert later.display.detail == (await get(served, waiting)).display.detail == f"Queued · Waiting for {deps[1]}"
    call.cancel()
