"""A job's title on SQLite and MariaDB: kept as submitted through Submit, SubmitBatch and a
schedule's firing, returned by Get, a watch stream and ListJobs with the Display carrying it;
an empty one stays empty; one too long or with control characters refused by name."""

from __future__ import annotations

import grpc
import pytest
from served import Served, eventually
from service_support import duration, get, rpc_failure, submit

from jobwire.client.status import field_violations
from jobwire.v1 import job_pb2, schedule_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(60)]  # characters counted by each database's column

TITLE = "Import customers-2026-11.csv · 客户导入"


async def test_a_submitted_title_comes_back_from_get_a_watch_and_a_list(served: Served) -> None:
    made = await submit(served, title=TITLE)
    assert (made.title, made.display.title) == (TITLE, TITLE)
    read = await get(served, made.job_no)
    assert (read.title, read.display.title) == (TITLE, TITLE)
    stream = aiter(served.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=made.job_no)))
    first = await anext(stream)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=made.job_no))
    cancelled = await anext(stream)  # a later message: from the event's snapshot, not a read
    assert cancelled.job.status == job_pb2.Job.CANCELLED
    for message in (first, cancelled):
        assert (message.job.title, message.job.display.title) == (TITLE, TITLE)
        assert message.job.input.sha256 == read.input.sha256
    listed = await served.jobs.ListJobs(job_pb2.ListJobsRequest())
    assert [(job.title, job.display.title) for job in listed.jobs] == [(TITLE, TITLE)]


async def test_no_title_stays_empty(served: Served) -> None:
    made = await submit(served)
    read = await get(served, made.job_no)
    assert (made.title, read.title, read.display.title) == ("", "", "")


async def test_each_job_of_a_batch_keeps_its_own_title(served: Served) -> None:
    request = job_pb2.SubmitBatchRequest(
        jobs=[job_pb2.SubmitRequest(job_type="frames", title=f"Part {i}") for i in (1, 2)]
        + [job_pb2.SubmitRequest(job_type="frames")]
    )
    reply = await served.jobs.SubmitBatch(request)
    assert [job.title for job in reply.jobs] == ["Part 1", "Part 2", ""]
    read = [await get(served, job.job_no) for job in reply.jobs]
    assert [job.title for job in read] == ["Part 1", "Part 2", ""]


async def test_a_schedules_firing_submits_its_templates_title(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(schedule_interval_seconds=0.2)
    template = job_pb2.SubmitRequest(job_type="report", title="Monthly sales report")
    created = await served.schedules.CreateSchedule(
        schedule_pb2.CreateScheduleRequest(schedule_id="sales", every=duration(1), template=template)
    )
    assert created.template.title == "Monthly sales report"

    async def fired() -> str | None:
        found = await served.schedules.GetSchedule(schedule_pb2.ScheduleRef(schedule_id="sales"))
        return found.last_job_no or None

    job_no = await eventually(fired, timeout=20, what="the schedule's first firing")
    assert (await get(served, job_no)).title == "Monthly sales report"


BAD_TITLES = [
    pytest.param("t" * 201, "at most 200 characters", id="201 characters"),
    pytest.param("line one\nline two", "control characters", id="a newline"),
    pytest.param("bell\x07", "control characters", id="a bell"),
    pytest.param("c1\x85", "control characters", id="a C1 control"),
]


@pytest.mark.parametrize(("title", "words"), BAD_TITLES)
async def test_a_bad_title_is_refused_by_name_everywhere_a_job_is_described(
    served: Served, title: str, words: str
) -> None:
    calls = {
        "title": served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", title=title)),
        "jobs[1].title": served.jobs.SubmitBatch(
            job_pb2.SubmitBatchRequest(
                jobs=[job_pb2.SubmitRequest(job_type="frames"), job_pb2.SubmitRequest(job_type="frames", title=title)]
            )
        ),
        "template.title": served.schedules.CreateSchedule(
            schedule_pb2.CreateScheduleRequest(
                schedule_id="bad", every=duration(60), template=job_pb2.SubmitRequest(job_type="frames", title=title)
            )
        ),
    }
    for field, call in calls.items():
        refused = await rpc_failure(call)
        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert [name for name, _ in field_violations(refused)] == [field]
        assert words in (refused.details() or "")
    assert not (await served.jobs.ListJobs(job_pb2.ListJobsRequest())).jobs


async def test_200_characters_of_any_script_are_kept_whole(served: Served) -> None:
    title = "报" * 200  # 600 bytes of UTF-8: the limit counts characters, as the column does
    made = await submit(served, title=title)
    assert (await get(served, made.job_no)).title == title
