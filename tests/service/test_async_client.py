"""AsyncJobClient over real gRPC: a real server on SQLite, and the scripted fake.

The real server shows submit, watch to READY, cancel and the error mapping end to end; the
fake (tests/service/test_client_fake.py) drops streams on cue, which a real server will not,
to show the async watch resumes after the last version exactly as the blocking one does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from served import Served, eventually
from service_support import artifact, claim, when
from test_client_fake import FAST, JOB_NO, Fake

from jobwire.client import (
    AsyncAdminClient,
    AsyncJobClient,
    FailedPreconditionError,
    InvalidArgumentError,
    JobClient,
    NotFoundError,
    UnavailableError,
)
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(60)
Job = job_pb2.Job


@pytest.fixture
async def client(served: Served) -> AsyncIterator[AsyncJobClient]:
    async with AsyncJobClient.connect(served.target, retry=FAST) as c:
        yield c


async def test_submit_watch_to_ready(served: Served, client: AsyncJobClient) -> None:
    job, created = await client.submit("frames", {"video": "v.mp4"}, idempotency_key="a-1", owner="alice")
    assert created and job.status == Job.QUEUED and job.owner == "alice"
    again, created_again = await client.submit("frames", {"video": "v.mp4"}, idempotency_key="a-1", owner="alice")
    assert again.job_no == job.job_no and not created_again

    seen: list[job_pb2.Job] = []

    async def watch() -> None:
        async for update in client.watch(job.job_no):
            seen.append(update)

    watcher = asyncio.create_task(watch())
    await eventually(lambda: asyncio.sleep(0, result=bool(seen)), what="the first version")
    (lease,) = await claim(served)
    await served.workers.Complete(
        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
    )
    await asyncio.wait_for(watcher, 10)
    statuses = [j.status for j in seen]
    assert statuses[0] == Job.QUEUED and statuses[-1] == Job.READY and Job.RUNNING in statuses
    versions = [j.version for j in seen]
    assert versions == sorted(set(versions))  # each version once, in order
    assert (await client.get(job.job_no)).result.uri == artifact().uri
    assert [j.job_no async for j in client.list_jobs(owner="alice")] == [job.job_no]


async def test_cancel_and_errors_map_like_the_sync_client(served: Served, client: AsyncJobClient) -> None:
    job, _ = await client.submit("frames")
    cancelled = await client.cancel(job.job_no)
    assert cancelled.status == Job.CANCELLED
    assert [j.status async for j in client.watch(job.job_no)] == [Job.CANCELLED]

    def sync_errors() -> list[tuple[type[Exception], str | None]]:
        found = []
        with JobClient.connect(served.target, retry=FAST) as sync:
            for call in (lambda: sync.get("PT-20990101-999"), lambda: sync.retry(job.job_no)):
                with pytest.raises(Exception) as caught:
                    call()
                found.append((type(caught.value), getattr(caught.value, "reason", None)))
        return found

    async_found = []
    for call in (lambda: client.get("PT-20990101-999"), lambda: client.retry(job.job_no)):
        with pytest.raises(Exception) as caught:
            await call()
        async_found.append((type(caught.value), getattr(caught.value, "reason", None)))
    assert async_found == await asyncio.to_thread(sync_errors)
    assert async_found[0][0] is NotFoundError and async_found[1][0] is FailedPreconditionError
    with pytest.raises(NotFoundError) as missing:
        async for _ in client.watch("PT-20990101-999"):
            pass
    assert missing.value.reason == "JOB_NOT_FOUND"
    with pytest.raises(InvalidArgumentError) as invalid:
        await client.submit("bad type!")
    assert invalid.value.violations and invalid.value.violations[0][0] == "job_type"


async def test_batches_and_results(served: Served, client: AsyncJobClient) -> None:
    batch = await client.submit_batch([client.submit_request("frames"), client.submit_request("frames")])
    assert (await client.get_batch(batch.batch_id)).total == 2
    assert (await client.cancel_batch(batch.batch_id)).counts
    with pytest.raises(FailedPreconditionError) as unavailable:
        await client.result(batch.jobs[0].job_no)
    assert unavailable.value.reason == "RESULT_NOT_AVAILABLE"
    await eventually(when(served, batch.jobs[0].job_no, lambda j: j.status == Job.CANCELLED), what="cancelled")


# ---- against the scripted fake: dropped streams, retries --------------------------------


@pytest.fixture
def fake() -> Iterator[Fake]:
    f = Fake()
    yield f
    f.server.stop(0)


async def test_watch_resumes_after_dropped_streams(fake: Fake) -> None:
    fake.jobs.drops = [2, 1]  # the first stream breaks after 2 updates, the second after 1
    reconnects: list[int] = []
    async with AsyncJobClient.connect(fake.target, retry=FAST) as client:
        watch = client.watch(JOB_NO, on_reconnect=lambda failures, _delay, _cause: reconnects.append(failures))
        versions = [job.version async for job in watch]
    assert versions == [1, 2, 3, 4, 5, 6]
    assert fake.jobs.watch_after == [0, 2, 3] and reconnects == [1, 1]


async def test_unary_retries_follow_the_sync_rules(fake: Fake) -> None:
    async with AsyncJobClient.connect(fake.target, retry=FAST) as client:
        fake.jobs.fail["Get"] = [grpc.StatusCode.UNAVAILABLE] * 2
        assert (await client.get(JOB_NO)).version == 6
        assert fake.jobs.calls["Get"] == 3
        fake.jobs.fail["Get"] = [grpc.StatusCode.UNAVAILABLE] * 10
        with pytest.raises(UnavailableError):
            await client.get(JOB_NO)
        assert fake.jobs.calls["Get"] == 3 + FAST.unary_attempts
        fake.jobs.fail["Submit"] = [grpc.StatusCode.UNAVAILABLE]
        with pytest.raises(UnavailableError):  # no key: never repeated
            await client.submit("transcode")
        assert fake.jobs.calls["Submit"] == 1
        with pytest.raises(InvalidArgumentError):  # a bad limit fails before any call
            client.list_jobs(limit=-1)
        assert len([j async for j in client.list_jobs(page_size=2, limit=1)]) == 1


async def test_async_admin_client(fake: Fake) -> None:
    async with AsyncAdminClient.connect(fake.target, retry=FAST) as admin:
        assert (await admin.inspect(stalled_after=5))[0].kind == admin_pb2.Finding.STALLED
        assert [e.version async for e in admin.list_events(JOB_NO)] == [1, 2]
        assert [e.version async for e in admin.list_events(JOB_NO, limit=1)] == [1]
        pages = [(p.title, [e.version for e in p.events]) async for p in admin.list_event_pages(JOB_NO)]
        assert pages == [("Import customers-2026-11.csv", [1]), ("Import customers-2026-11.csv", [2])]
        assert [w.worker_id async for w in admin.list_workers()] == ["w-7"]
        fake.admin.fail_requeue = [grpc.StatusCode.UNAVAILABLE]
        with pytest.raises(UnavailableError):  # an operator's decision is never repeated blindly
            await admin.requeue(JOB_NO, reason="host died")
        assert fake.admin.calls["Requeue"] == 1
