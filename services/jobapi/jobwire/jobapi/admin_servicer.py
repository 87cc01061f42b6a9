"""AdminService: what operators use to see stalled leases and broken invariants, and decide."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import grpc

from jobwire.db.inspect import FindingKind
from jobwire.domain import limits
from jobwire.domain.errors import InvalidArgument
from jobwire.jobapi.jobs import Jobs
from jobwire.rpc import auth, convert
from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2

# Inspect subtracts stalled_after from the database clock: an unbounded one overflows the date.
MAX_STALLED_AFTER_S = 366 * 86_400.0


def _status(value: str | None) -> job_pb2.Job.Status.ValueType:
    return job_pb2.Job.Status.Value(value) if value else job_pb2.Job.STATUS_UNSPECIFIED


def finding(kind: FindingKind, row: dict[str, Any]) -> admin_pb2.Finding:
    lease = row["lease_expires_at"]
    overdue = (row["db_now"] - lease).total_seconds() if lease is not None else None
    detail = ""
    if overdue is not None and overdue > 0:
        # What the reaper has done and will do, so an operator can decide with the evidence.
        then = "ends CANCELLED" if row["status"] == "CANCEL_REQUESTED" else f"policy {row['on_lease_lost']}"
        marked = "marked stalled" if row["stalled"] else "not yet marked stalled"
        detail = f"lease expired {overdue:.1f}s ago; {marked}; {then}"
    return admin_pb2.Finding(
        kind=admin_pb2.Finding.Kind.Value(kind.value),
        job_no=row["job_no"],
        status=_status(row["status"]),
        stage=row["stage"] or "",
        heartbeat_at=convert.timestamp(row["heartbeat_at"]),
        worker_id=row["worker_id"] or "",
        detail=detail,
        queue=row["queue"],
        attempt=row["attempt"],
        processed_units=row["processed_units"],
        total_units=row["total_units"],
        checkpoint_present=bool(row["has_checkpoint"]),
        lease_expires_at=convert.timestamp(lease),
    )


def event(row: dict[str, Any]) -> admin_pb2.JobEvent:
    return admin_pb2.JobEvent(
        version=row["version"],
        kind=row["kind"],
        from_status=_status(row["from_status"]),
        to_status=_status(row["to_status"]),
        stage=row["stage"] or "",
        processed_units=row["processed_units"] or 0,
        total_units=row["total_units"],
        worker_id=row["worker_id"] or "",
        attempt=row["attempt"] or 0,
        detail=row["detail"] or "",
        created_at=convert.timestamp(row["created_at"]),
    )


def _kinds(numbers: Any) -> list[FindingKind]:
    kinds = []
    for n in numbers:
        if n not in admin_pb2.Finding.Kind.values() or n == admin_pb2.Finding.KIND_UNSPECIFIED:
            raise InvalidArgument("kinds", f"unknown finding kind {n}")
        kinds.append(FindingKind(admin_pb2.Finding.Kind.Name(n)))
    return kinds


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs

    async def Inspect(
        self, request: admin_pb2.InspectRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.InspectResponse:
        after = convert.seconds(request.stalled_after) if request.HasField("stalled_after") else 0.0
        if not 0 <= after <= MAX_STALLED_AFTER_S:
            raise InvalidArgument("stalled_after", "must be between 0 and 366 days")
        queue = limits.name("queue", request.queue) if request.queue else ""
        found = await self.jobs.inspect(auth.current(), timedelta(seconds=after), queue, _kinds(request.kinds))
        return admin_pb2.InspectResponse(findings=[finding(k, r) for k, r in found])

    async def ListEvents(
        self, request: admin_pb2.ListEventsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListEventsResponse:
        rows, token = await self.jobs.list_events(
            auth.current(), limits.job_no(request.job_no), limits.page_size(request.page_size, 100), request.page_token
        )
        return admin_pb2.ListEventsResponse(events=[event(r) for r in rows], next_page_token=token)

    async def Requeue(self, request: admin_pb2.RequeueRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        reason = limits.short_text("reason", request.reason, limits.MAX_MESSAGE_CHARS)
        job = await self.jobs.requeue(auth.current(), limits.job_no(request.job_no), reason)
        return convert.job_to_proto(job)

    async def ListWorkers(
        self, request: admin_pb2.ListWorkersRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListWorkersResponse:
        queue = limits.name("queue", request.queue) if request.queue else ""
        size = limits.page_size(request.page_size, 100)
        workers, token = await self.jobs.list_workers(auth.current(), queue, size, request.page_token)
        return admin_pb2.ListWorkersResponse(next_page_token=token, workers=[
            admin_pb2.WorkerInfo(
                worker_id=w["worker_id"], queues=w["queues"], job_types=w["job_types"],
                last_seen_at=convert.timestamp(w["last_seen_at"]), leases_held=w["leases_held"],
            ) for w in workers
        ])  # fmt: skip
