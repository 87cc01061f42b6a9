"""1,000 concurrent watchers in one process: all of them see every job to its end."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import sqlalchemy as sa
from served import Served, start_server
from service_support import claim, submit
from watch_support import complete, next_job, read_to_end, report, watch

from jobwire.v1 import job_pb2

JOBS = 50
WATCHERS_PER_JOB = 20  # 1,000 streams
CHANNELS = 4


async def test_a_thousand_watchers_all_receive_the_terminal_state(tmp_path: Path) -> None:
    served = await start_server(f"sqlite:///{tmp_path / 'jobwire.db'}")
    channels = [grpc.aio.insecure_channel(served.target) for _ in range(CHANNELS)]
    try:
        jobs = [await submit(served) for _ in range(JOBS)]
        stubs = [Served.on(served.runtime, served.target, ch) for ch in channels]
        calls = [(job.job_no, watch(stubs[i % CHANNELS], job.job_no))
                 for i, job in enumerate(j for j in jobs for _ in range(WATCHERS_PER_JOB))]  # fmt: skip
        firsts = await asyncio.gather(*(next_job(call, timeout=20) for _, call in calls))
        assert all(f is not None and f.status == job_pb2.Job.QUEUED for f in firsts)
        feed_reads = _count_event_reads(served)
        changing = time.monotonic()

        leases = []
        while len(leases) < JOBS:
            leases += await claim(served, max_jobs=JOBS - len(leases))
        for stage, units in (("PROCESSING", 50), ("VERIFYING", 1)):
            await asyncio.gather(*(report(served, lease, stage, units) for lease in leases))
        await asyncio.gather(*(complete(served, lease) for lease in leases))

        rests = await asyncio.gather(*(read_to_end(call, timeout=20) for _, call in calls))
        for (job_no, _), first, rest in zip(calls, firsts, rests, strict=True):
            seen = [first, *rest]
            assert seen[-1].status == job_pb2.Job.READY and all(j.job_no == job_no for j in seen)  # type: ignore[union-attr]
            versions = [j.version for j in seen]  # type: ignore[union-attr]
            assert versions == sorted(set(versions))
        # The database saw one feed, not a thousand: reads of job_event track time, not watchers.
        polls = (time.monotonic() - changing) / served.runtime.settings.feed_poll_seconds
        assert len(feed_reads) <= polls + 5, (len(feed_reads), polls)  # a ceiling: load only lowers the count
    finally:
        for ch in channels:
            await ch.close()
        await served.channel.close()
        await served.runtime.stop(grace=1.0)


def _count_event_reads(served) -> list[str]:  # type: ignore[no-untyped-def]
    """From now on, every SELECT that reads job_event on the server's engine."""
    seen: list[str] = []

    def before(conn, cursor, statement: str, *args: object) -> None:  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT") and "job_event" in statement:
            seen.append(statement)

    sa.event.listen(served.runtime.store.db.engine, "before_cursor_execute", before)
    return seen
