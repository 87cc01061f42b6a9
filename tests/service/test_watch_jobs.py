"""WatchJobs over real gRPC: many jobs on one stream, for gateways; it stays open."""

from __future__ import annotations

import grpc
from service_support import claim, rpc_error, submit
from watch_support import next_job, read_until

from jobwire.v1 import job_pb2, worker_pb2

Q, R, CANCELLED = job_pb2.Job.QUEUED, job_pb2.Job.RUNNING, job_pb2.Job.CANCELLED


def watch_jobs(served, owner: str = "", job_nos: tuple[str, ...] = ()) -> grpc.aio.UnaryStreamCall:  # type: ignore[no-untyped-def]
    return served.jobs.WatchJobs(job_pb2.WatchJobsRequest(owner=owner, job_nos=list(job_nos)))


async def cancel(served, job_no: str) -> None:  # type: ignore[no-untyped-def]
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job_no))


async def test_owner_stream_sends_unfinished_jobs_then_changes_and_new_jobs(served) -> None:  # type: ignore[no-untyped-def]
    a1 = await submit(served, owner="alice")
    a2 = await submit(served, owner="alice")
    done = await submit(served, owner="alice")
    await cancel(served, done.job_no)
    bob = await submit(served, owner="bob")
    call = watch_jobs(served, owner="alice")
    first = [await next_job(call), await next_job(call)]
    assert {(j.job_no, j.status) for j in first if j} == {(a1.job_no, Q), (a2.job_no, Q)}
    assert all(j is not None and j.HasField("queue_position") for j in first)

    await cancel(served, bob.job_no)  # another owner's change: not on this stream
    a3 = await submit(served, owner="alice")  # submitted later: on the stream
    assert [(j.job_no, j.status, j.version) for j in await read_until(call, lambda j: True)] == [(a3.job_no, Q, 1)]
    await cancel(served, a1.job_no)
    assert [(j.job_no, j.status) for j in await read_until(call, lambda j: True)] == [(a1.job_no, CANCELLED)]
    (lease,) = await claim(served, max_jobs=1)
    assert lease.job_no == a2.job_no
    changed = await read_until(call, lambda j: True)
    assert [(j.job_no, j.status) for j in changed] == [(a2.job_no, R)]
    call.cancel()


async def test_job_list_stream_stays_open_after_a_job_ends(served) -> None:  # type: ignore[no-untyped-def]
    x = await submit(served)
    y = await submit(served)
    other = await submit(served)
    call = watch_jobs(served, job_nos=(x.job_no, y.job_no, x.job_no))  # a repeat is watched once
    assert [(await next_job(call)).job_no for _ in range(2)] == [x.job_no, y.job_no]  # type: ignore[union-attr]
    await cancel(served, y.job_no)
    assert [(j.job_no, j.status) for j in await read_until(call, lambda j: True)] == [(y.job_no, CANCELLED)]
    await cancel(served, other.job_no)
    (lease,) = await claim(served)  # x, the oldest
    got = await read_until(call, lambda j: True)
    assert [(j.job_no, j.status) for j in got] == [(x.job_no, R)]
    await served.workers.Release(worker_pb2.ReleaseRequest(job_no=x.job_no, worker_token=lease.worker_token))
    assert [(j.job_no, j.status) for j in await read_until(call, lambda j: True)] == [(x.job_no, Q)]
    call.cancel()


async def test_bad_requests(served) -> None:  # type: ignore[no-untyped-def]
    x = await submit(served)
    assert (await rpc_error(watch_jobs(served).read()))[0] == grpc.StatusCode.INVALID_ARGUMENT
    both = watch_jobs(served, owner="alice", job_nos=(x.job_no,))
    assert (await rpc_error(both.read()))[0] == grpc.StatusCode.INVALID_ARGUMENT
    unknown = watch_jobs(served, job_nos=(x.job_no, "PT-20990101-999"))
    assert await rpc_error(unknown.read()) == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")


async def test_an_owner_with_many_jobs_costs_queries_per_page_not_per_job(serve) -> None:  # type: ignore[no-untyped-def]
    """Security review, finding 4: one queue-position COUNT per job made an owner with 4,000
    queued jobs wait 6.8 s for the first message. Positions come a page at a time now, and
    each is the one Get answers."""
    # No housekeeping or schedule rounds: their reads, on timers, would count as the stream's
    # (on a loaded machine the stream takes longer and more of them fell in it).
    served = await serve(reaper_interval_seconds=0, schedule_interval_seconds=0)
    from datetime import UTC, datetime, timedelta

    import sqlalchemy as sa
    from google.protobuf.timestamp_pb2 import Timestamp

    from jobwire.db.feed import OWNER_PAGE

    later = Timestamp()
    later.FromDatetime(datetime.now(UTC) + timedelta(hours=1))
    assert await claim(served, queues=["default", "q2"]) == []  # served: their places in line count
    count = OWNER_PAGE * 2 + 17
    for i in range(count):
        fields: dict[str, object] = {"owner": "many", "priority": i % 3}
        if i % 50 == 7:
            fields["run_after"] = later  # not runnable yet: no position among the runnable
        await submit(served, queue="q2" if i % 10 == 3 else "", **fields)
    await submit(served, owner="other", priority=5)  # ahead of all of them in the default queue
    sent: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(statement)

    engine = served.runtime.store.db.engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        call = watch_jobs(served, owner="many")
        seen = [await next_job(call) for _ in range(count)]
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    call.cancel()
    assert len({j.job_no for j in seen if j}) == count
    # the job reads of this stream (the change feed's polls of job_event run beside it): per page
    # the jobs, the job types served and the limits of their queues, and one count per queue;
    # a job not runnable yet is counted alone
    reads = [q for q in sent if q.lstrip().upper().startswith("SELECT") and "job_event" not in q]
    assert len(reads) <= 5 * (count // OWNER_PAGE + 1) + 2 * count // 50 + 4, len(reads)
    for job in seen[::7]:
        assert job is not None
        now = await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no))
        assert (job.HasField("queue_position"), job.queue_position) == (
            now.HasField("queue_position"),
            now.queue_position,
        ), job.job_no
