"""What JobClient, AsyncJobClient and AdminClient hand back from a real server on SQLite.

Enums that print their names and still equal the wire numbers, aware UTC datetimes, the raw
message under `.raw`, a READY job's result as JSON, payloads refused before anything is
sent, and a batch watch that ends once every job of the batch has ended. The views
themselves, with no server, are in tests/unit/client/test_client_views.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from served import Served, eventually
from service_support import claim, running

from jobwire.client import AdminClient, AsyncJobClient, Job, JobClient, JobStatus
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(90)
RESULT = {"rows": 3, "names": ["ä", "b"]}
# A batch watch ends within a second of the batch's last ending (it takes ~0.01 s: the end
# follows the last job's update on the stream), measured from that ending to the watch's end.
ENDS_WITHIN_S = 1.0
HUNG_S = 10.0  # a watch that never ends fails here, before the per-test timeout


@pytest.fixture
async def kept(serve: Callable[..., Awaitable[Served]], tmp_path: Path) -> Served:
    """A server that keeps results, so GetResult (and result_json) can answer."""
    return await serve(result_store=str(tmp_path / "store"))


@pytest.fixture
async def client(kept: Served) -> AsyncIterator[AsyncJobClient]:
    async with AsyncJobClient.connect(kept.target) as c:
        yield c


async def complete(s: Served, lease: worker_pb2.Lease, data: bytes, content_type: str) -> None:
    result = job_pb2.Artifact(content_type=content_type)
    await s.workers.Complete(
        worker_pb2.CompleteRequest(
            job_no=lease.job_no, worker_token=lease.worker_token, inline_result=data, result=result
        )
    )


async def fail(s: Served, lease: worker_pb2.Lease) -> None:
    await s.workers.Fail(
        worker_pb2.FailRequest(
            job_no=lease.job_no,
            worker_token=lease.worker_token,
            category=job_pb2.JobError.PROCESSING_ERROR,
            message="the codec gave up",
            retryable=False,  # FAILED at once: no attempt left to retry
        )
    )


async def ready_and_failed(s: Served) -> tuple[str, str]:
    """A READY job whose result is JSON, and a FAILED one (PROCESSING_ERROR): their numbers."""
    ready, lease = await running(s)
    await complete(s, lease, json.dumps(RESULT).encode(), "application/json")
    failed, lease = await running(s)
    await fail(s, lease)
    return ready.job_no, failed.job_no


def check_values(ready: Job, failed: Job, parsed: Any) -> None:
    """What both clients must answer for the jobs of `ready_and_failed`."""
    assert str(ready.status) == "READY" and f"{ready.status}" == "READY" and ready.status == job_pb2.Job.READY
    assert isinstance(ready.raw, job_pb2.Job) and ready.raw.status == job_pb2.Job.READY
    assert ready.created_at is not None and ready.created_at.tzinfo is not None
    assert ready.finished_at is not None and ready.finished_at.utcoffset() == timedelta(0)
    assert ready.created_at <= ready.finished_at <= datetime.now(UTC) + timedelta(minutes=1)
    assert ready.error is None and ready.result is not None and ready.result.content_type == "application/json"
    assert ready.queue_position is None and not ready.HasField("queue_position")
    assert str(failed.status) == "FAILED" and failed.error is not None
    assert (
        f"{failed.error.category}" == "PROCESSING_ERROR" and failed.error.category == job_pb2.JobError.PROCESSING_ERROR
    )
    assert failed.error.message == "the codec gave up" and failed.error.retryable is False
    assert parsed == RESULT


async def test_async_client_values_print_names_and_read_times_as_datetimes(
    kept: Served, client: AsyncJobClient
) -> None:
    ready_no, failed_no = await ready_and_failed(kept)
    check_values(await client.get(ready_no), await client.get(failed_no), await client.result_json(ready_no))
    queued = await client.get((await client.submit("frames")).job.job_no)
    assert str(queued.status) == "QUEUED" and queued.queue_position == 0  # the head of its queue: 0, not None
    assert [str(job.status) async for job in client.list_jobs(statuses=["FAILED"])] == ["FAILED"]


async def test_sync_client_values_print_names_and_read_times_as_datetimes(kept: Served) -> None:
    ready_no, failed_no = await ready_and_failed(kept)

    def read() -> tuple[Job, Job, Any]:
        with JobClient.connect(kept.target) as sync:
            return sync.get(ready_no), sync.get(failed_no), sync.result_json(ready_no)

    check_values(*await asyncio.to_thread(read))


async def test_result_json_names_the_job_and_content_type_when_the_result_is_not_json(
    kept: Served, client: AsyncJobClient
) -> None:
    job, lease = await running(kept)
    await complete(kept, lease, b"\x89PNG\r\n", "image/png")
    with pytest.raises(ValueError, match=rf"the result of {job.job_no} is not JSON \(image/png, 6 bytes"):
        await client.result_json(job.job_no)

    def read() -> None:
        with JobClient.connect(kept.target) as sync:
            sync.result_json(job.job_no)

    with pytest.raises(ValueError, match=rf"{job.job_no} is not JSON \(image/png"):
        await asyncio.to_thread(read)


async def test_a_payload_that_is_not_bytes_or_json_is_refused_and_nothing_is_sent(
    kept: Served, client: AsyncJobClient
) -> None:
    with pytest.raises(
        TypeError, match=r"^payload must be .* not str; to send text, encode it: payload=text.encode\(\)"
    ):
        await client.submit("frames", "a string")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^payload is not JSON-serialisable \(Object of type set"):
        await client.submit("frames", {"tags": {"a", "b"}})
    with pytest.raises(TypeError, match=r"not int"):
        client.submit_request("frames", 7)  # type: ignore[arg-type]

    def sync_refusals() -> list[str]:
        found = []
        with JobClient.connect(kept.target) as sync:
            for bad in ("a string", {"at": datetime.now(UTC)}):
                with pytest.raises(TypeError) as refused:
                    sync.submit("frames", bad)  # type: ignore[arg-type]
                found.append(str(refused.value))
        return found

    said = await asyncio.to_thread(sync_refusals)
    assert said[0].startswith("payload must be") and "not str" in said[0]
    assert said[1].startswith("payload is not JSON-serialisable") and "datetime" in said[1]
    assert [job async for job in client.list_jobs()] == []  # nothing was submitted
    with pytest.raises(TypeError, match=r"not list; pass a dict, or send this JSON as bytes: payload=json\.dumps"):
        await client.submit("frames", [1, {"b": 1, "a": 2}])  # type: ignore[arg-type]
    assert [job async for job in client.list_jobs()] == []  # nothing was submitted
    listed = (await client.submit("frames", json.dumps([1, {"a": 2}]).encode())).job  # a list goes as bytes
    (lease,) = await claim(kept)
    assert lease.job_no == listed.job_no and json.loads(lease.payload) == [1, {"a": 2}]


# ---- watch_batch ends once every job of the batch has ended --------------------------------


async def make_batch(client: AsyncJobClient) -> list[str]:
    made = await client.submit_batch([client.submit_request("frames", {"n": n}) for n in range(3)])
    return [job.job_no for job in made.jobs]


async def end_each(s: Served, client: AsyncJobClient, job_nos: list[str]) -> tuple[str, float]:
    """End the batch's jobs one by one: CANCELLED, FAILED, then READY last.

    Returns the last one's number and when it ended (time.monotonic): taken just before its
    Complete is sent, so no later than the ending itself, and the time measured from it to
    the watch's end no shorter than the true one.
    """
    await client.cancel(job_nos[0])
    leases = {lease.job_no: lease for lease in await claim(s, max_jobs=2)}
    assert set(leases) == set(job_nos[1:])
    await fail(s, leases[job_nos[1]])
    last_ended = time.monotonic()
    await complete(s, leases[job_nos[2]], b"{}", "application/json")
    return job_nos[2], last_ended


def check_ended_soon(last_ended: float, watch_ended: list[float]) -> None:
    """The watch ended (its loop left, before any hang-up) within ENDS_WITHIN_S of the last ending."""
    (ended,) = watch_ended
    assert ended - last_ended < ENDS_WITHIN_S, f"the watch ended {ended - last_ended:.2f} s after the last job"


def check_watched(seen: list[Job], job_nos: list[str], last: str) -> None:
    """The watch saw each job, and kept going until the last one ended: its end came last."""
    assert {job.job_no for job in seen} == set(job_nos)
    assert (seen[-1].job_no, str(seen[-1].status)) == (last, "READY")
    final = {job.job_no: str(job.status) for job in seen}
    assert final == {job_nos[0]: "CANCELLED", job_nos[1]: "FAILED", last: "READY"}


async def test_async_watch_batch_ends_when_every_job_has_ended(kept: Served, client: AsyncJobClient) -> None:
    job_nos = await make_batch(client)
    batch_id = (await client.get(job_nos[0])).batch_id
    seen: list[Job] = []
    watch_ended: list[float] = []

    async def watch() -> None:
        async for job in client.watch_batch(batch_id):
            seen.append(job)
        watch_ended.append(time.monotonic())

    watcher = asyncio.create_task(watch())
    await eventually(lambda: asyncio.sleep(0, result=len(seen) >= 3), what="each job as it is")
    assert all(job.status == JobStatus.QUEUED for job in seen[:3]) and not watcher.done()
    last, last_ended = await end_each(kept, client, job_nos)
    await asyncio.wait_for(watcher, HUNG_S)  # no further change comes: the last ending ends it
    check_ended_soon(last_ended, watch_ended)
    check_watched(seen, job_nos, last)
    # A batch already finished: each job as it is, then the end at once.
    again = [job async for job in client.watch_batch(batch_id)]
    assert sorted(str(job.status) for job in again) == ["CANCELLED", "FAILED", "READY"]


async def test_sync_watch_batch_ends_when_every_job_has_ended(kept: Served, client: AsyncJobClient) -> None:
    job_nos = await make_batch(client)
    batch_id = (await client.get(job_nos[0])).batch_id
    seen: list[Job] = []
    watch_ended: list[float] = []
    ended = threading.Event()

    def watch() -> None:
        with JobClient.connect(kept.target) as sync:
            for job in sync.watch_batch(batch_id):
                seen.append(job)
            watch_ended.append(time.monotonic())  # the channel's closing is not the watch's
        ended.set()

    watcher = asyncio.create_task(asyncio.to_thread(watch))
    await eventually(lambda: asyncio.sleep(0, result=len(seen) >= 3), what="each job as it is")
    assert not ended.is_set()
    last, last_ended = await end_each(kept, client, job_nos)
    await asyncio.wait_for(watcher, HUNG_S)
    check_ended_soon(last_ended, watch_ended)
    check_watched(seen, job_nos, last)

    def watch_finished() -> list[Job]:
        with JobClient.connect(kept.target) as sync:
            return list(sync.watch_batch(batch_id))

    again = await asyncio.to_thread(watch_finished)
    assert sorted(str(job.status) for job in again) == ["CANCELLED", "FAILED", "READY"]


# ---- the operator's and the schedule's values ---------------------------------------------


async def test_admin_and_schedule_values_print_names_and_read_times_as_datetimes(kept: Served) -> None:
    job, lease = await running(kept, job_type="frames")
    await complete(kept, lease, b"{}", "application/json")

    def read() -> None:
        with AdminClient.connect(kept.target) as admin:
            events = list(admin.list_events(job.job_no))
            assert [str(e.to_status) for e in events] == ["QUEUED", "RUNNING", "READY"]
            assert all(e.created_at is not None and e.created_at.tzinfo is not None for e in events)
            assert isinstance(events[0].raw, admin_pb2.JobEvent)
            (worker,) = admin.list_workers()
            assert worker.worker_id == "w1" and worker.last_seen_at is not None and worker.last_seen_at.tzinfo
        with JobClient.connect(kept.target) as jobs:
            made = jobs.create_schedule("nightly", jobs.submit_request("report"), cron="0 2 * * *")
            assert (str(made.overlap), str(made.catch_up)) == ("SKIP", "NONE")
            assert made.next_fire_time is not None and (made.next_fire_time.hour, made.next_fire_time.tzinfo) == (
                2,
                UTC,
            )
            assert made.last_fire_time is None and jobs.pause_schedule("nightly").next_fire_time is None
            assert [s.schedule_id for s in jobs.list_schedules()] == ["nightly"]

    await asyncio.to_thread(read)
