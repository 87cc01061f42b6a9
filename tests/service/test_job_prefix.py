"""JOBWIRE_JOB_PREFIX (Settings.job_prefix) applied by a running server: every job number begins with it.

Numbers read PREFIX-YYYYMMDD-NNN ("PT-20261008-001"), the day in UTC. A number
with the longest prefix allowed still goes back in through every call that names a job.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import grpc
import pytest
from served import start_server
from service_support import artifact, claim, submit

from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(60)


def number_of(prefix: str) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(prefix)}-(\d{{8}})-(\d{{3,}})")


def utc_day() -> str:
    return datetime.now(UTC).strftime("%Y%m%d")


@pytest.mark.parametrize("prefix", ["QA7", "ABCDEFGHIJKLMNOP"])  # short, and the longest allowed (16)
async def test_every_job_number_begins_with_the_prefix(serve, prefix: str) -> None:  # type: ignore[no-untyped-def]
    s = await serve(job_prefix=prefix)
    before = utc_day()
    made = [await submit(s, queue="parked" if i % 2 else "") for i in range(5)]
    replayed = await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", idempotency_key="k-1"))
    again = await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", idempotency_key="k-1"))
    after = utc_day()
    assert again.created is False and again.job.job_no == replayed.job.job_no
    numbers = [j.job_no for j in made] + [replayed.job.job_no]
    pattern = number_of(prefix)
    for job_no in numbers:
        found = pattern.fullmatch(job_no)
        assert found, job_no
        assert found.group(1) in (before, after), job_no  # today in UTC (a midnight may fall in between)
    assert len(set(numbers)) == len(numbers)
    sequence = [int(pattern.fullmatch(n).group(2)) for n in numbers]  # type: ignore[union-attr]
    assert sequence == sorted(sequence)  # one process numbers in increasing order

    # The numbers work everywhere a job is named.
    (lease,) = await claim(s)
    assert lease.job_no == made[0].job_no
    assert (await s.jobs.Get(job_pb2.GetRequest(job_no=lease.job_no))).status == job_pb2.Job.RUNNING
    await s.workers.ReportStage(worker_pb2.ReportStageRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, stage="PROCESSING", processed_units=1,
    ))  # fmt: skip
    done = await s.workers.Complete(
        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
    )
    assert done.job_no == lease.job_no and done.status == job_pb2.Job.READY
    events = await s.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=lease.job_no))
    assert [e.kind for e in events.events][-1] == "COMPLETED"
    call = s.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=made[1].job_no))
    assert (await call.read()).job.job_no == made[1].job_no
    call.cancel()
    cancelled = await s.jobs.Cancel(job_pb2.CancelRequest(job_no=made[1].job_no))
    assert cancelled.status == job_pb2.Job.CANCELLED
    listed = await s.jobs.ListJobs(job_pb2.ListJobsRequest(page_size=100))
    assert sorted(j.job_no for j in listed.jobs) == sorted(numbers)


async def test_the_default_prefix_is_pt_and_a_second_server_numbers_with_its_own(serve) -> None:  # type: ignore[no-untyped-def]
    plain = await serve()
    other = await serve(job_prefix="ZZ")  # the same database
    a, b = await submit(plain), await submit(other)
    assert number_of("PT").fullmatch(a.job_no), a.job_no
    assert number_of("ZZ").fullmatch(b.job_no), b.job_no
    # one database: each server reads the other's job by its number
    assert (await other.jobs.Get(job_pb2.GetRequest(job_no=a.job_no))).job_no == a.job_no
    assert (await plain.jobs.Get(job_pb2.GetRequest(job_no=b.job_no))).job_no == b.job_no


@pytest.mark.parametrize("prefix", ["pt", "9A", "A-B", "ABCDEFGHIJKLMNOPQ", ""])
async def test_a_prefix_that_cannot_make_a_job_number_stops_the_server(tmp_path, prefix: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="JOBWIRE_JOB_PREFIX") as refused:
        served = await start_server(f"sqlite:///{tmp_path / 'jobwire.db'}", job_prefix=prefix)
        await served.close()  # only reached if the server started: the test then fails
    assert "capitals" in str(refused.value)


async def test_a_number_with_a_foreign_prefix_is_simply_not_found(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(job_prefix="QA")
    job = await submit(s)
    day, seq = job.job_no.split("-")[1:]
    try:
        await s.jobs.Get(job_pb2.GetRequest(job_no=f"PT-{day}-{seq}"))
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND
    else:
        raise AssertionError("a number this server never issued was found")
