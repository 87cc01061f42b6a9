"""JobService: decode and validate requests, call the use cases, encode the answers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from jobwire.domain import limits
from jobwire.domain.commands import JobFilter, NewJob
from jobwire.domain.errors import InvalidArgument
from jobwire.jobapi.jobs import Jobs
from jobwire.jobapi.watch import Watches
from jobwire.rpc import auth, convert
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2, job_pb2_grpc

MAX_LOCALE_CHARS = 35


def _locale(value: str) -> str:
    return limits.short_text("locale", value, MAX_LOCALE_CHARS)


def decode_submit(request: job_pb2.SubmitRequest, tenant: str, default_attempt_s: float | None) -> NewJob:
    return NewJob(
        tenant=tenant,
        job_type=limits.name("job_type", request.job_type),
        queue=limits.queue("queue", request.queue),
        payload=limits.blob("payload", request.payload, limits.MAX_PAYLOAD_BYTES),
        idempotency_key=limits.key("idempotency_key", request.idempotency_key) or None,
        priority=request.priority,
        run_after=convert.from_timestamp(request.run_after, "run_after") if request.HasField("run_after") else None,
        retry=convert.retry_policy(request.retry_policy, request.HasField("retry_policy")),
        timeouts=convert.timeouts(request.timeouts, request.HasField("timeouts"), default_attempt_s),
        owner=limits.key("owner", request.owner),
        labels=limits.labels(request.labels),
        locale=_locale(request.locale) or "en",
    )


class JobServicer(job_pb2_grpc.JobServiceServicer):
    def __init__(self, jobs: Jobs, watches: Watches, settings: Settings) -> None:
        self.jobs = jobs
        self.watches = watches
        self.settings = settings

    async def Submit(self, request: job_pb2.SubmitRequest, context: grpc.aio.ServicerContext) -> job_pb2.SubmitResponse:
        who = auth.current()
        new = decode_submit(request, who.tenant, self.settings.default_attempt_timeout_seconds)
        job, created = await self.jobs.submit(who, new)
        return job_pb2.SubmitResponse(job=convert.job_to_proto(job, request.locale), created=created)

    async def Get(self, request: job_pb2.GetRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        job = await self.jobs.get(auth.current(), limits.job_no(request.job_no))
        return convert.job_to_proto(job, _locale(request.locale))

    async def Cancel(self, request: job_pb2.CancelRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        locale = _locale(request.locale)  # a bad request is refused before anything changes
        job = await self.jobs.cancel(auth.current(), limits.job_no(request.job_no))
        return convert.job_to_proto(job, locale)

    async def Retry(self, request: job_pb2.RetryRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        locale = _locale(request.locale)  # a bad request is refused before anything changes
        job = await self.jobs.retry(auth.current(), limits.job_no(request.job_no))
        return convert.job_to_proto(job, locale)

    async def Resolve(self, request: job_pb2.ResolveRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        decision = convert.decision(request.decision)
        note = limits.short_text("note", request.note, limits.MAX_MESSAGE_CHARS)
        locale = _locale(request.locale)  # a bad request is refused before anything changes
        job = await self.jobs.resolve(auth.current(), limits.job_no(request.job_no), decision, note)
        return convert.job_to_proto(job, locale)

    async def ListJobs(
        self, request: job_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.ListJobsResponse:
        where = JobFilter(
            tenant=auth.current().tenant,
            owner=limits.key("owner", request.owner),
            statuses=[convert.status(s) for s in request.statuses],
            job_type=limits.name("job_type", request.job_type) if request.job_type else "",
            assignee=limits.key("assignee", request.assignee),
        )
        locale = _locale(request.locale)
        jobs, token = await self.jobs.list_jobs(where, limits.page_size(request.page_size), request.page_token)
        return job_pb2.ListJobsResponse(jobs=[convert.job_to_proto(j, locale) for j in jobs], next_page_token=token)

    async def WatchStatus(
        self, request: job_pb2.WatchStatusRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[job_pb2.JobUpdate]:
        job_no = limits.job_no(request.job_no)
        if request.after_version < 0:
            raise InvalidArgument("after_version", "must not be negative")
        locale = _locale(request.locale)
        async for update in self.watches.status(auth.current().tenant, job_no, request.after_version, locale):
            yield update

    async def WatchJobs(
        self, request: job_pb2.WatchJobsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[job_pb2.JobUpdate]:
        owner = limits.key("owner", request.owner)
        job_nos = [limits.job_no(no) for no in request.job_nos]
        locale = _locale(request.locale)
        async for update in self.watches.jobs(auth.current().tenant, owner, job_nos, locale):
            yield update
