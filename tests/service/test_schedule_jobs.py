"""ScheduleService.ListScheduleJobs: the jobs a schedule's firings made, the latest firing first,
paged, read by their idempotency keys; an unknown schedule is NOT_FOUND."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc
import pytest
import sqlalchemy as sa
from served import Served, eventually
from service_support import db_query, duration, rpc_error

from jobwire.db.tables import job
from jobwire.v1 import job_pb2, schedule_pb2

pytestmark = pytest.mark.timeout(60)


async def _made(served: Served, schedule_id: str) -> list[str]:
    """The schedule's job numbers, by the keys in the table, the latest fire time first."""
    query = sa.select(job.c.job_no, job.c.idempotency_key).where(job.c.idempotency_key.like(f"{schedule_id}@%"))
    rows = await db_query(served, query)
    return [str(r["job_no"]) for r in sorted(rows, key=lambda r: str(r["idempotency_key"]), reverse=True)]


async def _listed(served: Served, schedule_id: str) -> list[str]:
    found, request = [], schedule_pb2.ListScheduleJobsRequest(schedule_id=schedule_id, page_size=2)
    while True:
        reply = await served.schedules.ListScheduleJobs(request)
        found += [j.job_no for j in reply.jobs]
        if not reply.next_page_token:
            return found
        request.page_token = reply.next_page_token


async def test_a_schedules_jobs_are_listed_latest_firing_first(serve: Callable[..., Awaitable[Served]]) -> None:
    served = await serve(schedule_interval_seconds=0.2)
    template = job_pb2.SubmitRequest(job_type="tick", queue="ticks")
    await served.schedules.CreateSchedule(
        schedule_pb2.CreateScheduleRequest(
            schedule_id="tick", every=duration(1), template=template, overlap=schedule_pb2.Schedule.ALLOW
        )
    )
    await served.jobs.Submit(job_pb2.SubmitRequest(job_type="tick", idempotency_key="ticker@x"))  # another key
    await eventually(lambda: _enough(served), timeout=20, what="three firings")
    await served.schedules.PauseSchedule(schedule_pb2.ScheduleRef(schedule_id="tick"))
    made = await _made(served, "tick")
    assert await _listed(served, "tick") == made and len(made) >= 3
    reply = await served.schedules.ListScheduleJobs(schedule_pb2.ListScheduleJobsRequest(schedule_id="tick"))
    assert {j.queue for j in reply.jobs} == {"ticks"}


async def _enough(served: Served) -> bool:
    return len(await _made(served, "tick")) >= 3


async def test_an_unknown_schedule_or_a_forged_token_is_refused(served: Served) -> None:
    code, _ = await rpc_error(
        served.schedules.ListScheduleJobs(schedule_pb2.ListScheduleJobsRequest(schedule_id="none"))
    )
    assert code == grpc.StatusCode.NOT_FOUND
    await served.schedules.CreateSchedule(
        schedule_pb2.CreateScheduleRequest(
            schedule_id="s", cron="0 2 * * *", template=job_pb2.SubmitRequest(job_type="t")
        )
    )
    bad = schedule_pb2.ListScheduleJobsRequest(schedule_id="s", page_token="not-a-token")
    code, _ = await rpc_error(served.schedules.ListScheduleJobs(bad))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
