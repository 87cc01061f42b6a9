"""ScheduleService: decode and validate requests, call the use cases, encode the answers."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypeVar

import grpc
from google.protobuf import empty_pb2

from jobwire.domain import limits
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.schedules import CatchUp, Overlap, ScheduleRecord, timing
from jobwire.jobapi.decode import decode_submit, within
from jobwire.jobapi.schedules import Schedules
from jobwire.rpc import auth, convert
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2, schedule_pb2, schedule_pb2_grpc

E = TypeVar("E", Overlap, CatchUp)
_OVERLAP = {schedule_pb2.Schedule.OVERLAP_UNSPECIFIED: Overlap.SKIP, schedule_pb2.Schedule.SKIP: Overlap.SKIP,
            schedule_pb2.Schedule.ALLOW: Overlap.ALLOW}  # fmt: skip
_CATCH_UP = {schedule_pb2.Schedule.CATCH_UP_UNSPECIFIED: CatchUp.NONE, schedule_pb2.Schedule.NONE: CatchUp.NONE,
             schedule_pb2.Schedule.ONE: CatchUp.ONE}  # fmt: skip


def check_template(template: job_pb2.SubmitRequest, tenant: str, settings: Settings) -> str:
    """Refuse a template Submit would refuse (naming `template.<field>`); its queue."""
    with within("template"):
        new = decode_submit(template, tenant, settings.default_attempt_timeout_seconds)
        if new.idempotency_key:
            raise InvalidArgument("idempotency_key", "each firing sets its own: <schedule_id>@<fire time>")
    return new.queue


def _choice(table: Mapping[Any, E], field: str, value: int) -> E:
    if value not in table:
        raise InvalidArgument(field, "is not one of its enum's values")
    return table[value]


def schedule_to_proto(one: ScheduleRecord) -> schedule_pb2.Schedule:
    when = one.timing
    out = schedule_pb2.Schedule(
        schedule_id=one.schedule_id,
        time_zone=when.time_zone,
        template=job_pb2.SubmitRequest.FromString(one.template),
        overlap=schedule_pb2.Schedule.SKIP if one.overlap is Overlap.SKIP else schedule_pb2.Schedule.ALLOW,
        catch_up=schedule_pb2.Schedule.ONE if one.catch_up is CatchUp.ONE else schedule_pb2.Schedule.NONE,
        paused=one.paused,
        next_fire_time=convert.timestamp(one.next_fire_at),
        last_fire_time=convert.timestamp(one.last_fire_at),
        last_job_no=one.last_job_no or "",
        created_at=convert.timestamp(one.created_at),
        skipped_firings=one.skipped_firings,
        missed_firings=one.missed_firings,
    )
    if when.every is not None:
        out.every.CopyFrom(convert.duration(when.every.total_seconds()))
    else:
        out.cron = when.cron or ""
    return out


class ScheduleServicer(schedule_pb2_grpc.ScheduleServiceServicer):
    def __init__(self, schedules: Schedules, settings: Settings) -> None:
        self.schedules = schedules
        self.settings = settings

    async def CreateSchedule(
        self, request: schedule_pb2.CreateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> schedule_pb2.Schedule:
        who = auth.current()
        schedule_id = limits.name("schedule_id", request.schedule_id)
        if not request.HasField("template"):
            raise InvalidArgument("template", "is required: the SubmitRequest each firing submits")
        queue = check_template(request.template, who.tenant, self.settings)
        overlap = _choice(_OVERLAP, "overlap", request.overlap)
        catch_up = _choice(_CATCH_UP, "catch_up", request.catch_up)
        kind = request.WhichOneof("timing")
        when = timing(
            cron=request.cron if kind == "cron" else None,
            every=timedelta(seconds=convert.seconds(request.every, "every")) if kind == "every" else None,
            time_zone=limits.short_text("time_zone", request.time_zone),
            anchor=self.schedules.now(),
        )
        who.check_queue(queue)
        new = ScheduleRecord(
            tenant=who.tenant, schedule_id=schedule_id, queue=queue, timing=when,
            template=request.template.SerializeToString(deterministic=True),
            overlap=overlap, catch_up=catch_up, next_fire_at=when.next_after(when.anchor),
        )  # fmt: skip
        return schedule_to_proto(await self.schedules.create(new))

    async def GetSchedule(
        self, request: schedule_pb2.ScheduleRef, context: grpc.aio.ServicerContext
    ) -> schedule_pb2.Schedule:
        scope, schedule_id = auth.current().scope, _schedule_id(request)
        return schedule_to_proto(await self.schedules.with_store(lambda store: store.get_schedule(scope, schedule_id)))

    async def ListSchedules(
        self, request: schedule_pb2.ListSchedulesRequest, context: grpc.aio.ServicerContext
    ) -> schedule_pb2.ListSchedulesResponse:
        scope, size = auth.current().scope, limits.page_size(request.page_size)
        found, token = await self.schedules.with_store(
            lambda store: store.list_schedules(scope, size, request.page_token)
        )
        return schedule_pb2.ListSchedulesResponse(
            schedules=[schedule_to_proto(one) for one in found], next_page_token=token
        )

    async def PauseSchedule(
        self, request: schedule_pb2.ScheduleRef, context: grpc.aio.ServicerContext
    ) -> schedule_pb2.Schedule:
        scope, schedule_id = auth.current().scope, _schedule_id(request)
        paused = await self.schedules.with_store(lambda store: store.set_schedule_paused(scope, schedule_id, None))
        return schedule_to_proto(paused)

    async def ResumeSchedule(
        self, request: schedule_pb2.ScheduleRef, context: grpc.aio.ServicerContext
    ) -> schedule_pb2.Schedule:
        return schedule_to_proto(await self.schedules.resume(auth.current(), _schedule_id(request)))

    async def DeleteSchedule(
        self, request: schedule_pb2.ScheduleRef, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        scope, schedule_id = auth.current().scope, _schedule_id(request)
        await self.schedules.with_store(lambda store: store.delete_schedule(scope, schedule_id))
        return empty_pb2.Empty()

    async def ListScheduleJobs(
        self, request: schedule_pb2.ListScheduleJobsRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.ListJobsResponse:
        scope, schedule_id = auth.current().scope, limits.name("schedule_id", request.schedule_id)
        locale, size = limits.locale(request.locale), limits.page_size(request.page_size)
        # where a listed QUEUED job stands, as ListJobs says it (JOBWIRE_NO_WORKER_AFTER)
        no_worker_after = timedelta(seconds=self.settings.no_worker_after_seconds)
        found, token = await self.schedules.with_store(
            lambda store: store.schedule_jobs(
                scope, schedule_id, size, request.page_token, no_worker_after=no_worker_after
            )
        )
        return job_pb2.ListJobsResponse(jobs=[convert.job_to_proto(j, locale) for j in found], next_page_token=token)


def _schedule_id(request: schedule_pb2.ScheduleRef) -> str:
    return limits.name("schedule_id", request.schedule_id)
