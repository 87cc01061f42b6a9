"""The safety net: a stream that misses a version fills it from job_event.

A feed that lost a row (one committed after the gap grace period) and an inbox that
overflowed behind a slow reader both leave a hole in a stream's versions; the stream
must notice and replay it, so no transition is ever lost. These tests build the feed
and the streams by hand around a served database, with a feed that loses rows on purpose.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from google.protobuf.duration_pb2 import Duration
from service_support import claim, running, submit
from watch_support import complete, fail, phases, report

from jobwire.db.feed import FeedReader, FeedRow
from jobwire.jobapi.feed import ChangeFeed
from jobwire.jobapi.watch import StreamRegistry, Watches
from jobwire.runtime.tail import EventTail
from jobwire.v1 import job_pb2


class LossyReader(FeedReader):
    """A FeedReader that drops the rows `lose` picks, as if they had committed too late."""

    def __init__(self, reader: FeedReader, lose: Callable[[FeedRow], bool]) -> None:
        super().__init__(reader.db, batch=reader.batch)
        self.lose = lose
        self.lost: list[FeedRow] = []

    def poll(self) -> list[FeedRow]:
        rows = super().poll()
        self.lost += [r for r in rows if self.lose(r)]
        return [r for r in rows if not self.lose(r)]


async def watches_over(
    served, lose: Callable[[FeedRow], bool], inbox_limit: int = 256
) -> tuple[Watches, LossyReader, asyncio.Task[None]]:  # type: ignore[no-untyped-def]
    reader = LossyReader(FeedReader(served.runtime.store.db), lose)
    tail = EventTail(reader, poll_seconds=0.02)
    feed = ChangeFeed(tail)
    task = asyncio.create_task(tail.run())
    rt = served.runtime
    return Watches(feed, rt.store, rt.blocking, StreamRegistry(100, inbox_limit=inbox_limit)), reader, task


async def collect(stream: AsyncIterator[job_pb2.JobUpdate], timeout: float = 10.0) -> list[job_pb2.Job]:
    async def all_of() -> list[job_pb2.Job]:
        return [u.job async for u in stream]

    return await asyncio.wait_for(all_of(), timeout)


async def test_a_version_the_feed_never_delivered_is_replayed(served) -> None:  # type: ignore[no-untyped-def]
    job, lease = await running(served)
    watches, reader, task = await watches_over(served, lambda r: r.version in (3, 5))
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


async def test_a_slow_reader_keeps_every_transition_in_bounded_memory(served) -> None:  # type: ignore[no-untyped-def]
    policy = job_pb2.RetryPolicy(max_attempts=5, initial_backoff=Duration(nanos=1_000_000))
    job = await submit(served, retry_policy=policy)
    watches, _, task = await watches_over(served, lambda r: False, inbox_limit=2)
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
            (lease,) = await claim(served, wait=2)
            for units in (1, 2, 3):
                await report(served, lease, "PROCESSING", units)
            await fail(served, lease, retryable=True)
        (lease,) = await claim(served, wait=2)
        await complete(served, lease)
        await asyncio.sleep(0.3)  # the feed delivers everything into a two-item inbox
        rest = await collect(stream)
        statuses = [status for status, _ in phases(rest)]
        folded = [s for i, s in enumerate(statuses) if i == 0 or statuses[i - 1] != s]
        assert folded == ["RUNNING", "QUEUED"] * 3 + ["RUNNING", "READY"]
        assert [j.attempt for j in rest if j.status == job_pb2.Job.QUEUED] == [1, 2, 3]
        versions = [j.version for j in rest]
        assert versions == sorted(set(versions)) and versions[-1] == rest[-1].version
        assert replays, "the inbox never overflowed: the test proves nothing"
    finally:
        task.cancel()
