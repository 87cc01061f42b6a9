"""JobService: decode and validate requests, call the use cases, encode the answers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import replace

import grpc

from jobwire.domain import limits
from jobwire.domain.batches import REPLY_BUDGET, NewBatch, new_batch_id
from jobwire.domain.commands import JobFilter
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.job import JobRecord
from jobwire.jobapi.decode import decode_submit, within
from jobwire.jobapi.jobs import Jobs
from jobwire.jobapi.result_downloads import ResultReader
from jobwire.jobapi.watch import Watches
from jobwire.observe import logs
from jobwire.rpc import auth, convert
from jobwire.rpc.handlers import written
from jobwire.runtime.settings import Settings
from jobwire.runtime.transfers import Transfers
from jobwire.v1 import job_pb2, job_pb2_grpc


def decode_batch(request: job_pb2.SubmitBatchRequest, tenant: str, default_attempt_s: float | None) -> NewBatch:
    """A SubmitBatch as a NewBatch: each job decoded as Submit would, a refusal naming jobs[i].<field>."""
    if not 1 <= len(request.jobs) <= limits.MAX_BATCH_JOBS:
        raise InvalidArgument("jobs", f"1 to {limits.MAX_BATCH_JOBS} jobs")
    key = limits.key("idempotency_key", request.idempotency_key) or None
    batch_id = new_batch_id()
    jobs = []
    for i, one in enumerate(request.jobs):
        with within(f"jobs[{i}]"):
            if one.idempotency_key:
                raise InvalidArgument("idempotency_key", "a batch's jobs have none: the batch's key replays them all")
            jobs.append(replace(decode_submit(one, tenant, default_attempt_s), batch_id=batch_id))
    reply_bytes = sum(convert.reply_bytes(new) for new in jobs)
    return NewBatch(tenant=tenant, batch_id=batch_id, jobs=jobs, idempotency_key=key, reply_bytes=reply_bytes)


def batch_reply(batch_id: str, jobs: Sequence[JobRecord]) -> job_pb2.SubmitBatchResponse:
    """The reply listing `jobs` while they fit one message; a replay's jobs past that are counted, not listed."""
    reply = job_pb2.SubmitBatchResponse(batch_id=batch_id)
    used = reply.ByteSize()
    for i, job in enumerate(jobs):
        message = convert.job_to_proto(job)
        used += message.ByteSize() + 8  # and its field's tag and length
        if used > REPLY_BUDGET:
            reply.jobs_omitted = len(jobs) - i
            break
        reply.jobs.append(message)
    return reply


class JobServicer(job_pb2_grpc.JobServiceServicer):
    def __init__(
        self, jobs: Jobs, watches: Watches, settings: Settings, results: ResultReader, transfers: Transfers
    ) -> None:
        self.jobs = jobs
        self.watches = watches
        self.settings = settings
        self.results = results
        self.transfers = transfers

    # Writes with context.write, whose wait a stalled reader's idle cut can bound (a yield's cannot).
    async def GetResult(  # type: ignore[override]
        self, request: job_pb2.GetResultRequest, context: grpc.aio.ServicerContext
    ) -> None:
        who, job_no = auth.current(), limits.job_no(request.job_no)
        # Held until gRPC has ended the call, a cut one included (jobwire.runtime.transfers).
        give_back = self.transfers.take(who.tenant)
        context.add_done_callback(lambda _: give_back())
        # NOT_FOUND for a job the caller does not see (another tenant's, a queue its token may
        # not use), FAILED_PRECONDITION without a kept result.
        content_type, kept = await self.jobs.with_store(lambda store: store.kept_result(who.scope, job_no))
        chunks = self.results.chunks(kept)
        async with aclosing(chunks):  # the file closes now, cut or not, never when collected
            async for data in chunks:
                await self.transfers.sent(written(context, job_pb2.ResultChunk(data=data, content_type=content_type)))
                content_type = ""  # on the first chunk only

    async def Submit(self, request: job_pb2.SubmitRequest, context: grpc.aio.ServicerContext) -> job_pb2.SubmitResponse:
        who = auth.current()
        new = decode_submit(request, who.tenant, self.settings.default_attempt_timeout_seconds)
        job, created = await self.jobs.submit(who, new)
        logs.bind(job_no=job.job_no)  # the call's log lines name the job it made
        return job_pb2.SubmitResponse(job=convert.job_to_proto(job, request.locale), created=created)

    async def SubmitBatch(
        self, request: job_pb2.SubmitBatchRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.SubmitBatchResponse:
        who = auth.current()
        batch = decode_batch(request, who.tenant, self.settings.default_attempt_timeout_seconds)
        batch_id, jobs = await self.jobs.submit_batch(who, batch)
        return batch_reply(batch_id, jobs)

    async def GetBatch(self, request: job_pb2.GetBatchRequest, context: grpc.aio.ServicerContext) -> job_pb2.Batch:
        scope, batch_id = auth.current().scope, limits.batch_id(request.batch_id)
        batch = await self.jobs.with_store(lambda store: store.get_batch(scope, batch_id))
        return convert.batch_to_proto(batch)

    async def CancelBatch(
        self, request: job_pb2.CancelBatchRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.Batch:
        batch = await self.jobs.cancel_batch(auth.current(), limits.batch_id(request.batch_id))
        return convert.batch_to_proto(batch)

    async def Get(self, request: job_pb2.GetRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        job = await self.jobs.get(auth.current(), limits.job_no(request.job_no))
        return convert.job_to_proto(job, limits.locale(request.locale))

    async def GetPayload(
        self, request: job_pb2.GetPayloadRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.GetPayloadResponse:
        if request.max_bytes < 0:
            raise InvalidArgument("max_bytes", "must not be negative (0: the whole payload)")
        wanted = min(request.max_bytes or limits.MAX_PAYLOAD_BYTES, limits.MAX_PAYLOAD_BYTES)
        scope, job_no = auth.current().scope, limits.job_no(request.job_no)
        data, size = await self.jobs.with_store(lambda store: store.payload(scope, job_no, wanted))
        return job_pb2.GetPayloadResponse(data=data, size_bytes=size)

    async def Cancel(self, request: job_pb2.CancelRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        locale = limits.locale(request.locale)  # a bad request is refused before anything changes
        job = await self.jobs.cancel(auth.current(), limits.job_no(request.job_no))
        return convert.job_to_proto(job, locale)

    async def Retry(self, request: job_pb2.RetryRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        locale = limits.locale(request.locale)  # a bad request is refused before anything changes
        job = await self.jobs.retry(auth.current(), limits.job_no(request.job_no), force=request.force)
        return convert.job_to_proto(job, locale)

    async def Resolve(self, request: job_pb2.ResolveRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        decision = convert.decision(request.decision)
        note = limits.short_text("note", request.note, limits.MAX_MESSAGE_CHARS)
        locale = limits.locale(request.locale)  # a bad request is refused before anything changes
        job = await self.jobs.resolve(auth.current(), limits.job_no(request.job_no), decision, note)
        return convert.job_to_proto(job, locale)

    async def ListJobs(
        self, request: job_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.ListJobsResponse:
        who = auth.current()
        queue = limits.name("queue", request.queue) if request.queue else ""
        if queue:
            who.check_queue(queue)
        where = JobFilter(
            scope=who.scope,
            owner=limits.key("owner", request.owner),
            statuses=[convert.status(s) for s in request.statuses],
            job_type=limits.name("job_type", request.job_type) if request.job_type else "",
            assignee=limits.key("assignee", request.assignee),
            queue=queue,
            labels=limits.labels(request.labels),
            batch_id=limits.batch_id(request.batch_id) if request.batch_id else "",
        )
        locale = limits.locale(request.locale)
        jobs, token = await self.jobs.list_jobs(where, limits.page_size(request.page_size), request.page_token)
        return job_pb2.ListJobsResponse(jobs=[convert.job_to_proto(j, locale) for j in jobs], next_page_token=token)

    async def WatchStatus(
        self, request: job_pb2.WatchStatusRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[job_pb2.JobUpdate]:
        job_no = limits.job_no(request.job_no)
        if request.after_version < 0:
            raise InvalidArgument("after_version", "must not be negative")
        locale = limits.locale(request.locale)
        who = auth.current()
        await self.jobs.check_visible(who, [job_no])
        async for update in self.watches.status(who.tenant, job_no, request.after_version, locale):
            yield update

    async def WatchJobs(
        self, request: job_pb2.WatchJobsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[job_pb2.JobUpdate]:
        owner = limits.key("owner", request.owner)
        job_nos = [limits.job_no(no) for no in request.job_nos]
        locale = limits.locale(request.locale)
        who = auth.current()
        if request.batch_id:
            if owner or job_nos:
                raise InvalidArgument("batch_id", "give an owner, job numbers or a batch: one of them")
            # A batch's jobs are fixed when it is made: its stream watches them by number.
            batch_id = limits.batch_id(request.batch_id)
            job_nos = await self.jobs.with_store(lambda store: store.batch_job_nos(who.scope, batch_id))
        await self.jobs.check_visible(who, job_nos)
        async for update in self.watches.jobs(who.tenant, owner, job_nos, locale):
            if who.may_use(update.job.queue):  # an owner's jobs in queues the token may not use stay unseen
                yield update
