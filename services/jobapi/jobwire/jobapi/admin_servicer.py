"""AdminService: what operators use to see stalled leases and broken invariants, and decide."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import grpc

from jobwire.domain import flow, limits
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.evidence import Finding, FindingKind, JobEvent, WorkerInfo
from jobwire.domain.job import Digest
from jobwire.domain.queues import QueueSummary, window
from jobwire.domain.states import Status
from jobwire.jobapi.jobs import Jobs
from jobwire.rpc import auth, convert
from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2

# Inspect subtracts stalled_after from the database clock: an unbounded one overflows the date.
MAX_STALLED_AFTER_S = 366 * 86_400.0


def _status(value: Status | None) -> job_pb2.Job.Status.ValueType:
    return job_pb2.Job.Status.Value(value.value) if value else job_pb2.Job.STATUS_UNSPECIFIED


def finding(found: Finding) -> admin_pb2.Finding:
    return admin_pb2.Finding(
        kind=admin_pb2.Finding.Kind.Value(found.kind.value),
        job_no=found.job_no,
        status=_status(found.status),
        stage=found.stage or "",
        heartbeat_at=convert.timestamp(found.heartbeat_at),
        worker_id=found.worker_id or "",
        detail=found.detail,
        queue=found.queue,
        attempt=found.attempt,
        processed_units=found.processed_units,
        total_units=found.total_units,
        checkpoint_present=found.checkpoint_present,
        lease_expires_at=convert.timestamp(found.lease_expires_at),
        progress_at=convert.timestamp(found.progress_at),
        job_type=found.job_type,
        worker_claimed_at=convert.timestamp(found.claimed_at),
        title=found.title,
    )


def event(found: JobEvent) -> admin_pb2.JobEvent:
    return admin_pb2.JobEvent(
        version=found.version,
        kind=found.kind,
        from_status=_status(found.from_status),
        to_status=_status(found.to_status),
        stage=found.stage or "",
        processed_units=found.processed_units or 0,
        total_units=found.total_units,
        worker_id=found.worker_id or "",
        attempt=found.attempt or 0,
        detail=found.detail or "",
        created_at=convert.timestamp(found.created_at),
        key=found.key or "",
        size_bytes=found.size_bytes or 0,
        sha256=found.sha256 or "",
    )


def worker(found: WorkerInfo) -> admin_pb2.WorkerInfo:
    return admin_pb2.WorkerInfo(
        worker_id=found.worker_id, queues=found.queues, job_types=found.job_types,
        last_seen_at=convert.timestamp(found.last_seen_at), leases_held=found.leases_held, live=found.live,
        leases_stalled=found.leases_stalled,
        shared_fleet=found.shared_fleet,
    )  # fmt: skip


def queue_limits(queue: str, found: flow.QueueLimits) -> admin_pb2.QueueLimitsResponse:
    return admin_pb2.QueueLimitsResponse(
        queue=queue,
        limits=admin_pb2.QueueLimits(
            max_running=found.max_running, rate_per_second=found.rate_per_second, burst=found.burst
        ),
        paused=found.paused,
    )


def queue_summary(found: QueueSummary) -> admin_pb2.QueueSummary:
    oldest = None if found.oldest_runnable_s is None else convert.duration(found.oldest_runnable_s)
    return admin_pb2.QueueSummary(
        queue=found.queue, queued=found.queued, running=found.running, waiting=found.waiting,
        oldest_runnable_age=oldest, finished=found.finished, failed=found.failed,
        limits=admin_pb2.QueueLimits(
            max_running=found.limits.max_running, rate_per_second=found.limits.rate_per_second,
            burst=found.limits.burst,
        ),
        paused=found.limits.paused,
        minutes=[
            admin_pb2.QueueMinute(
                minute=convert.timestamp(m.start), submitted=m.submitted, finished=m.finished, failed=m.failed
            )
            for m in found.minutes
        ],
    )  # fmt: skip


def _limits(request: admin_pb2.QueueLimits) -> flow.QueueLimits:
    if request.max_running_per_tenant:
        # A queue belongs to one tenant (its name is scoped by the caller's token), so its
        # max_running already is a per-tenant limit.
        raise InvalidArgument("limits.max_running_per_tenant", "queues are per tenant: set max_running instead")
    if request.job_type:
        raise InvalidArgument("limits.job_type", "limits per job type are not supported: leave it empty")
    return flow.checked(request.max_running, request.rate_per_second, request.burst)


def _kinds(numbers: Any) -> list[FindingKind]:
    """Each kind asked for, once: a query each, so a kind repeated 100,000 times is not 100,000 queries."""
    if len(numbers) > len(FindingKind):
        raise InvalidArgument("kinds", f"at most {len(FindingKind)} kinds, each named once")
    kinds = []
    for n in numbers:
        if n not in admin_pb2.Finding.Kind.values() or n == admin_pb2.Finding.KIND_UNSPECIFIED:
            raise InvalidArgument("kinds", f"unknown finding kind {n}")
        kinds.append(FindingKind(admin_pb2.Finding.Kind.Name(n)))
    return list(dict.fromkeys(kinds))


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs

    async def Inspect(
        self, request: admin_pb2.InspectRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.InspectResponse:
        after = convert.seconds(request.stalled_after, "stalled_after") if request.HasField("stalled_after") else 0.0
        if not 0 <= after <= MAX_STALLED_AFTER_S:
            raise InvalidArgument("stalled_after", "must be between 0 and 366 days")
        queue = limits.name("queue", request.queue) if request.queue else ""
        found = await self.jobs.inspect(auth.current(), timedelta(seconds=after), queue, _kinds(request.kinds))
        return admin_pb2.InspectResponse(findings=[finding(f) for f in found])

    async def ListEvents(
        self, request: admin_pb2.ListEventsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListEventsResponse:
        scope = auth.current().scope
        job_no, size = limits.job_no(request.job_no), limits.page_size(request.page_size, 100)
        events, token, title = await self.jobs.with_store(
            lambda store: store.list_events(scope, job_no, size, request.page_token)
        )
        return admin_pb2.ListEventsResponse(events=[event(e) for e in events], next_page_token=token, title=title)

    async def GetCheckpoint(
        self, request: admin_pb2.GetCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.Checkpoint:
        job_no = limits.job_no(request.job_no)
        scope = auth.current().scope
        data = await self.jobs.with_store(lambda store: store.checkpoint(scope, job_no))
        saved = Digest.of(data)
        return admin_pb2.Checkpoint(job_no=job_no, data=data, size_bytes=saved.size_bytes, sha256=saved.sha256)

    async def Requeue(self, request: admin_pb2.RequeueRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        reason = limits.short_text("reason", request.reason, limits.MAX_MESSAGE_CHARS)
        locale = limits.locale(request.locale)  # a bad request is refused before anything changes
        job = await self.jobs.requeue(auth.current(), limits.job_no(request.job_no), reason)
        return convert.job_to_proto(job, locale)

    async def ListWorkers(
        self, request: admin_pb2.ListWorkersRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListWorkersResponse:
        queue = limits.name("queue", request.queue) if request.queue else ""
        size = limits.page_size(request.page_size, 100)
        workers, token = await self.jobs.list_workers(auth.current(), queue, size, request.page_token)
        return admin_pb2.ListWorkersResponse(workers=[worker(w) for w in workers], next_page_token=token)

    async def SetQueueLimits(
        self, request: admin_pb2.SetQueueLimitsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.QueueLimitsResponse:
        queue = limits.name("queue", request.queue)
        wanted = _limits(request.limits)
        return queue_limits(queue, await self.jobs.set_queue_limits(auth.current(), queue, wanted))

    async def GetQueueLimits(
        self, request: admin_pb2.GetQueueLimitsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.QueueLimitsResponse:
        queue = limits.name("queue", request.queue)
        return queue_limits(queue, await self.jobs.queue_limits(auth.current(), queue))

    async def PauseQueue(
        self, request: admin_pb2.PauseQueueRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.QueueLimitsResponse:
        queue = limits.name("queue", request.queue)
        return queue_limits(queue, await self.jobs.pause_queue(auth.current(), queue))

    async def ResumeQueue(
        self, request: admin_pb2.ResumeQueueRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.QueueLimitsResponse:
        queue = limits.name("queue", request.queue)
        return queue_limits(queue, await self.jobs.resume_queue(auth.current(), queue))

    async def ListQueues(
        self, request: admin_pb2.ListQueuesRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListQueuesResponse:
        who = auth.current()
        queue = limits.name("queue", request.queue) if request.queue else ""
        if queue:
            who.check_queue(queue)
        scope, minutes = who.scope, window(request.minutes)
        found = await self.jobs.with_store(lambda store: store.queue_overview(scope, queue, minutes))
        return admin_pb2.ListQueuesResponse(
            queues=[queue_summary(q) for q in found.queues],
            read_at=convert.timestamp(found.read_at),
            queues_omitted=found.omitted,
        )
