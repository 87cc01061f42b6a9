"""The safety net: a stream that misses a version fills it from job_event.

A feed that lost a row (one committed after the gap grace period) and an inbox that
overflowed behind a slow reader both leave a hole in a stream's versions; the stream
must notice and replay it, so no transition is ever lost. These tests build the feed
and the streams by hand around a served database, with a feed that loses rows on purpose
and a private method (Watches._replay) wrapped to count replays: fault injection, hence
tests/fault.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from fault_support import claim_request, result
from google.protobuf.duration_pb2 import Duration
from served import Served

from jobwire.db.feed import FeedReader, FeedRow
from jobwire.jobapi.feed import ChangeFeed
from jobwire.jobapi.watch import StreamRegistry, Watches
from jobwire.runtime.tail import EventTail
from jobwire.v1 import job_pb2, worker_pb2


class LossyReader(FeedReader):
    """A FeedReader that drops the rows `lose` picks, as if they had committed too late."""

    def __init__(self, reader: FeedReader, lose: Callable[[FeedRow], bool]) -> None:
        super().__init__(reader.db, batch=reader.batch)
        self.lose = lose
        self.lost: list[FeedRow] = []

    def poll(self, full: bool = True) -> list[FeedRow]:
        rows = super().poll(full)
        self.lost += [r for r in rows if self.lose(r)]
        return [r for r in rows if not self.lose(r)]


async def watches_over(
    served: Served, lose: Callable[[FeedRow], bool], inbox_limit: int = 256
) -> tuple[Watches, LossyReader, EventTail, asyncio.Task[None]]:
    reader = LossyReader(FeedReader(served.runtime.store.db), lose)
    tail = EventTail(reader, poll_seconds=0.02)
    rt = served.runtime
    no_worker_after = timedelta(seconds=rt.settings.no_worker_after_seconds)
    feed = ChangeFeed(tail, rt.store, rt.blocking, no_worker_after=no_worker_after)
    task = asyncio.create_task(tail.run())
    registry = StreamRegistry(100, max_watched_jobs=100_000, inbox_limit=inbox_limit)
    return Watches(feed, rt.store, rt.blocking, registry), reader, tail, task


async def claimed(served: Served) -> worker_pb2.Lease:
    (lease,) = (await served.workers.Claim(claim_request(wait=2))).leases
    return lease


async def report(served: Served, lease: worker_pb2.Lease, stage: str, units: int) -> None:
    await served.workers.ReportStage(worker_pb2.ReportStageRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, stage=stage, processed_units=units, total_units=100,
    ))  # fmt: skip


async def complete(served: Served, lease: worker_pb2.Lease) -> None:
    await served.workers.Complete(
        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=result())
    )


async def fail_retryable(served: Served, lease: worker_pb2.Lease) -> None:
    await served.workers.Fail(worker_pb2.FailRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, category=job_pb2.JobError.INPUT_INVALID,
        message="the input is not a video", retryable=True,
    ))  # fmt: skip


async def collect(stream: AsyncIterator[job_pb2.JobUpdate], timeout: float = 10.0) -> list[job_pb2.Job]:
    async def all_of() -> list[job_pb2.Job]:
        return [u.job async for u in stream]

    return await asyncio.wait_for(all_of(), timeout)


async def test_a_version_the_feed_never_delivered_is_replayed(servers, database_url) -> None:  # type: ignore[no-untyped-def]
    served = await servers(database_url)
    job = (await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))).job
    lease = await claimed(served)
    assert lease.job_no == job.job_no
    watches, reader, _, task = await watches_over(served, lambda r: r.version in (3, 5))
    try:
        stream = watches.status("default", job.job_no, 0, "")
        first = await anext(stream)
        assert first.job.version == 2
        await report(served, lease, "PREPARING", 1)  # v3: lost by the feed
        await report(served, lease, "PROCESSING", 1)  # v4
        await report(served, lease, "VERIFYING", 1)  # v5: lost by the feed
        await complete(served, lease)  # v6
        rest = await collect(stream)
        assert {r.version for r in reader.lost} == {3, 5}
        assert [j.version for j in rest] == [3, 4, 5, 6]
    finally:
        task.cancel()


async def test_a_slow_reader_keeps_every_transition_in_bounded_memory(servers, database_url) -> None:  # type: ignore[no-untyped-def]
    served = await servers(database_url)
    policy = job_pb2.RetryPolicy(max_attempts=5, initial_backoff=Duration(nanos=1_000_000))
    job = (await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", retry_policy=policy))).job
    watches, _, tail, task = await watches_over(served, lambda r: False, inbox_limit=2)
    replays = []
    real_replay = watches._replay

    async def counted(job_id: int, after: int, upto: int | None) -> list:  # type: ignore[type-arg]
        replays.append((after, upto))
        return await real_replay(job_id, after, upto)

    watches._replay = counted  # type: ignore[method-assign]
    try:
        stream = watches.status("default", job.job_no, 0, "")
        assert (await anext(stream)).job.version == 1
        # The reader stops reading while the job goes through four attempts.
        for _ in range(3):
            lease = await claimed(served)
            for units in (1, 2, 3):
                await report(served, lease, "PROCESSING", units)
            await fail_retryable(served, lease)
        await complete(served, await claimed(served))
        # Until the feed has delivered every event committed so far into the two-item inbox.
        await asyncio.wait_for(tail.sync(), 10)
        rest = await collect(stream)
        statuses = [job_pb2.Job.Status.Name(j.status) for j in rest]
        folded = [s for i, s in enumerate(statuses) if i == 0 or statuses[i - 1] != s]
        assert folded == ["RUNNING", "QUEUED"] * 3 + ["RUNNING", "READY"]
        assert [j.attempt for j in rest if j.status == job_pb2.Job.QUEUED] == [1, 2, 3]
        versions = [j.version for j in rest]
        assert versions == sorted(set(versions)) and versions[-1] == rest[-1].version
        assert replays, "the inbox never overflowed: the test proves nothing"
    finally:
        task.cancel()
