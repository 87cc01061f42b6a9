"""WatchStatus over real gRPC on SQLite and MariaDB: the job first, each change, the end, resume.

The tenancy check starts its own server with two tenants, on SQLite."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from google.protobuf.duration_pb2 import Duration
from served import eventually, start_server
from service_support import claim, rpc_error, running, submit
from watch_support import (
    assert_strictly_increasing,
    complete,
    fail,
    next_job,
    phases,
    read_to_end,
    read_until,
    report,
    watch,
)

from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.both_databases  # the event tail read from the database

Q, R, CR = job_pb2.Job.QUEUED, job_pb2.Job.RUNNING, job_pb2.Job.CANCEL_REQUESTED
READY, FAILED, CANCELLED = job_pb2.Job.READY, job_pb2.Job.FAILED, job_pb2.Job.CANCELLED


async def test_snapshot_then_every_change_in_order_and_end_after_ready(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served)
    call = watch(served, job.job_no)
    first = await next_job(call)
    assert first is not None and (first.status, first.version) == (Q, 1)
    assert first.HasField("queue_position") and first.queue_position == 0
    seen = [first]
    (lease,) = await claim(served)
    seen += await read_until(call, lambda j: j.status == R)
    for stage, units in (("PREPARING", 5), ("PROCESSING", 10), ("PROCESSING", 60), ("VERIFYING", 1)):
        await report(served, lease, stage, units)
        seen += await read_until(call, lambda j, s=stage, u=units: (j.stage, j.progress.processed_units) == (s, u))
    await complete(served, lease)
    seen += await read_to_end(call)
    # One step at a time, so nothing was coalesced: every version, once, in order.
    assert [j.version for j in seen] == list(range(1, len(seen) + 1))
    assert phases(seen) == [("QUEUED", ""), ("RUNNING", "PREPARING"), ("RUNNING", "PROCESSING"),
                            ("RUNNING", "VERIFYING"), ("READY", "")]  # fmt: skip
    assert seen[-1].result.sha256 == "ab" * 32 and seen[-1].downloadable


async def test_stream_ends_after_failed(served) -> None:  # type: ignore[no-untyped-def]
    job, lease = await running(served)
    call = watch(served, job.job_no)
    assert (await next_job(call)).status == R  # type: ignore[union-attr]
    await fail(served, lease)
    jobs = await read_to_end(call)
    assert [j.status for j in jobs] == [FAILED]
    assert jobs[0].error.category == job_pb2.JobError.INPUT_INVALID and not jobs[0].error.retryable


async def test_stream_ends_after_cancelled_from_queued_and_from_running(served) -> None:  # type: ignore[no-untyped-def]
    queued = await submit(served)
    call = watch(served, queued.job_no)
    assert (await next_job(call)).status == Q  # type: ignore[union-attr]
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=queued.job_no))
    assert [j.status for j in await read_to_end(call)] == [CANCELLED]

    job, lease = await running(served)
    call = watch(served, job.job_no)
    assert (await next_job(call)).status == R  # type: ignore[union-attr]
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
    assert [j.status for j in await read_until(call, lambda j: j.status == CR)] == [CR]
    await served.workers.ConfirmCancel(
        worker_pb2.ConfirmCancelRequest(job_no=job.job_no, worker_token=lease.worker_token)
    )
    jobs = await read_to_end(call)
    assert [j.status for j in jobs] == [CANCELLED]


async def _history(served) -> tuple[str, list[job_pb2.Job], dict[int, str]]:  # type: ignore[no-untyped-def]
    """A job driven to READY through a retry, unwatched: (job_no, final job, version -> event kind)."""
    policy = job_pb2.RetryPolicy(max_attempts=3, initial_backoff=Duration(nanos=1_000_000))
    job = await submit(served, retry_policy=policy)
    (lease,) = await claim(served)
    for units in (10, 20, 30):
        await report(served, lease, "PROCESSING", units)
    await fail(served, lease, retryable=True)  # back to QUEUED, attempt 2 follows
    (lease,) = await claim(served, wait=2)
    for stage, units in (("PREPARING", 1), ("PROCESSING", 40), ("PROCESSING", 50), ("VERIFYING", 0)):
        await report(served, lease, stage, units)
    final = await complete(served, lease)
    events = await served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job.job_no, page_size=500))
    kinds = {e.version: e.kind for e in events.events}
    assert sorted(kinds) == list(range(1, final.version + 1))
    return job.job_no, [final], kinds


async def test_resume_after_each_version_has_no_gaps_and_no_duplicates(served) -> None:  # type: ignore[no-untyped-def]
    job_no, (final,), kinds = await _history(served)
    for after in range(1, final.version):
        jobs = await read_to_end(watch(served, job_no, after_version=after))
        versions = [j.version for j in jobs]
        assert_strictly_increasing(jobs)
        assert versions[0] > after and versions[-1] == final.version and jobs[-1].status == READY
        # Only progress inside one stage may be folded away: every other event is replayed.
        must = [v for v, kind in kinds.items() if v > after and kind != "PROGRESS"]
        assert set(must) <= set(versions), (after, must, versions)
        # A folded run of progress is represented by its newest report.
        for v in versions:
            assert v in kinds


async def test_resume_at_the_terminal_version_ends_at_once(served) -> None:  # type: ignore[no-untyped-def]
    job_no, (final,), _ = await _history(served)
    # Nothing will ever follow: a stream that did not end by itself would stall read_to_end.
    assert await read_to_end(watch(served, job_no, after_version=final.version)) == []
    # A client that saw nothing yet gets the terminal job, and the end.
    assert [j.version for j in await read_to_end(watch(served, job_no))] == [final.version]


async def test_resume_at_the_current_version_sends_only_what_follows(served) -> None:  # type: ignore[no-untyped-def]
    job, lease = await running(served)
    now = await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no))
    call = watch(served, job.job_no, after_version=now.version)

    async def served_stream() -> bool:
        return served.runtime.host.metrics.open_streams("jobwire.v1.JobService/WatchStatus") == 1

    # The server holds the stream before the job changes: a wrong implementation would send the current job first.
    await eventually(served_stream, what="the WatchStatus stream open on the server")
    await report(served, lease, "PROCESSING", 7)
    first = await next_job(call)
    assert first is not None and (first.version, first.stage) == (now.version + 1, "PROCESSING")
    call.cancel()


async def test_reconnecting_after_a_drop_misses_nothing_and_repeats_nothing(served) -> None:  # type: ignore[no-untyped-def]
    job, lease = await running(served)
    call = watch(served, job.job_no)
    seen = [await next_job(call)]
    await report(served, lease, "PREPARING", 3)
    seen += await read_until(call, lambda j: j.progress.processed_units == 3)
    call.cancel()  # the client goes away mid-job
    await report(served, lease, "PROCESSING", 10)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
    await served.workers.ConfirmCancel(
        worker_pb2.ConfirmCancelRequest(job_no=job.job_no, worker_token=lease.worker_token)
    )
    seen += await read_to_end(watch(served, job.job_no, after_version=seen[-1].version))
    assert [j.version for j in seen] == list(range(seen[0].version, seen[-1].version + 1))
    assert phases(seen)[-3:] == [("RUNNING", "PROCESSING"), ("CANCEL_REQUESTED", "PROCESSING"), ("CANCELLED", "")]


async def test_unknown_job_and_bad_requests(served) -> None:  # type: ignore[no-untyped-def]
    async def first_error(call: grpc.aio.UnaryStreamCall) -> tuple[grpc.StatusCode, str | None]:
        return await rpc_error(call.read())

    assert await first_error(watch(served, "PT-20990101-999")) == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")
    assert (await first_error(watch(served, "not a job")))[0] == grpc.StatusCode.INVALID_ARGUMENT
    job = await submit(served)
    assert (await first_error(watch(served, job.job_no, after_version=-1)))[0] == grpc.StatusCode.INVALID_ARGUMENT


async def test_locale_labels_the_updates(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served)
    first = await next_job(call := watch(served, job.job_no, locale="zh-CN"))
    assert first is not None and first.display.status_label == "排队中"
    call.cancel()


ACME, GLOBEX = Token("token-a", tenant="acme"), Token("token-b", tenant="globex")


@pytest.fixture
def two_tenants(tmp_path: Path) -> Path:
    return write_auth_file(tmp_path / "auth.toml", [ACME, GLOBEX])


async def test_another_tenants_job_is_not_found(tmp_path: Path, two_tenants: Path) -> None:
    served = await start_server(f"sqlite:///{tmp_path / 'jobwire.db'}", auth_file=two_tenants)
    try:
        acme, globex = ACME.metadata, GLOBEX.metadata
        reply = await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=acme)
        mine = served.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=reply.job.job_no), metadata=acme)
        assert (await next_job(mine)).job_no == reply.job.job_no  # type: ignore[union-attr]
        mine.cancel()
        theirs = served.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=reply.job.job_no), metadata=globex)
        assert await rpc_error(theirs.read()) == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")
    finally:
        await served.channel.close()
        await served.runtime.stop(grace=1.0)


async def test_a_version_ahead_of_the_job_is_out_of_range_not_a_silent_stream(served) -> None:  # type: ignore[no-untyped-def]
    """Security review, finding 8: after_version above the job's version held the stream
    open, silent, even after the job ended."""
    job, _lease = await running(served)
    now = await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no))
    ahead = await rpc_error(watch(served, job.job_no, after_version=now.version + 1).read())
    assert ahead == (grpc.StatusCode.OUT_OF_RANGE, "OUT_OF_RANGE")
    job_no, (final,), _ = await _history(served)
    ended = await rpc_error(watch(served, job_no, after_version=final.version + 5).read())
    assert ended == (grpc.StatusCode.OUT_OF_RANGE, "OUT_OF_RANGE")
