"""WorkerService: decode and validate worker calls, run the leasing use cases, encode."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from jobwire.codec import stages_from_proto, stages_to_proto
from jobwire.domain import handler_evidence, kept_results, limits
from jobwire.domain.commands import Claimant, Failure, ProgressReport
from jobwire.domain.errors import InvalidArgument, JobwireError
from jobwire.domain.lease import Lease, LeaseState, LeaseStatus
from jobwire.domain.review import review_request
from jobwire.domain.stages import validate_plan
from jobwire.rpc import auth, convert
from jobwire.rpc.errors import status_proto
from jobwire.rpc.handlers import decoded
from jobwire.rpc.metrics import Metrics
from jobwire.runtime.settings import Settings
from jobwire.runtime.transfers import Transfers
from jobwire.v1 import job_pb2, worker_pb2, worker_pb2_grpc
from jobwire.worker.server.leasing import Leasing
from jobwire.worker.server.result_uploads import Results
from jobwire.worker.server.session import WorkerSession, routes
from jobwire.worker.server.session_push import PushHub

MAX_WAIT_S = 60.0
MAX_JOB_TYPES = 100
MAX_QUEUES = 64
# Every (queue, job type) a claim names is a worker_claim row (NO_WORKER): 64 queues x 100
# job types made 6,400 rows a claim, so a claim names at most this many pairs.
MAX_CLAIM_KINDS = 1000
MAX_HEARTBEAT_LEASES = 1000
MAX_BATCH_REPORTS = 1000
MAX_TOKEN_CHARS = 80
MAX_CONTENT_TYPE_CHARS = 255


async def _upload_data(first: job_pb2.ResultChunk, rest: AsyncIterator[job_pb2.ResultChunk]) -> AsyncIterator[bytes]:
    """Each chunk's bytes; only the first names the job (a later one naming any is refused)."""
    chunk = first
    while True:
        if len(chunk.data) > kept_results.RESULT_CHUNK_BYTES:
            raise InvalidArgument("data", f"at most {kept_results.RESULT_CHUNK_BYTES} bytes per chunk")
        yield chunk.data
        following = await anext(rest, None)
        if following is None:
            return
        if following.job_no or following.worker_token or following.content_type:
            raise InvalidArgument("job_no", "only the first chunk names the job, worker_token and content_type")
        chunk = following


def _worker_id(value: str) -> str:
    if not value:
        raise InvalidArgument("worker_id", "is required")
    return limits.short_text("worker_id", value)


def _token(value: str) -> str:
    return limits.short_text("worker_token", value, MAX_TOKEN_CHARS)


def decode_claim(request: worker_pb2.ClaimRequest, settings: Settings) -> tuple[Claimant, int, float]:
    who = auth.current()
    if len(request.queues) > MAX_QUEUES:
        raise InvalidArgument("queues", f"at most {MAX_QUEUES} queues per worker")
    queues = sorted({limits.queue("queues", q) for q in request.queues} or {limits.DEFAULT_QUEUE})
    for queue in queues:
        who.check_queue(queue)
    if not request.job_types or len(request.job_types) > MAX_JOB_TYPES:
        raise InvalidArgument("job_types", f"name 1 to {MAX_JOB_TYPES} job types this worker runs")
    plans = {
        limits.name("job_types.name", spec.name): validate_plan(
            stages_from_proto(spec.stages), field_name="job_types.stages"
        )
        for spec in request.job_types
    }
    if len(queues) * len(plans) > MAX_CLAIM_KINDS:
        raise InvalidArgument(
            "job_types",
            f"queues x job types is {len(queues) * len(plans)}, at most {MAX_CLAIM_KINDS} a claim: "
            "split the worker into workers of fewer queues or job types",
        )
    if not 0 <= request.max_jobs <= limits.MAX_JOBS_PER_CLAIM:
        raise InvalidArgument("max_jobs", f"must be between 0 and {limits.MAX_JOBS_PER_CLAIM}")
    wait = convert.seconds(request.wait, "wait")
    if not 0 <= wait <= MAX_WAIT_S:
        raise InvalidArgument("wait", f"must be between 0 and {MAX_WAIT_S:.0f} s")
    lease = (
        convert.seconds(request.lease_duration, "lease_duration")
        if request.HasField("lease_duration")
        else settings.lease_seconds
    )
    claimant = Claimant(
        tenant=who.tenant, worker_id=_worker_id(request.worker_id), queues=queues, plans=plans,
        lease_seconds=limits.lease_seconds(lease),
    )  # fmt: skip
    return claimant, request.max_jobs or 1, wait


def lease_proto(lease: Lease) -> worker_pb2.Lease:
    """A lease as a Claim's answer (or a standing claim's push) carries it."""
    return worker_pb2.Lease(
        job_no=lease.job_no,
        tenant=lease.tenant,
        worker_token=lease.worker_token,
        job_type=lease.job_type,
        payload=lease.payload,
        attempt=lease.attempt,
        checkpoint=lease.checkpoint or b"",
        has_checkpoint=lease.checkpoint is not None,
        stages=stages_to_proto(lease.stages),
        lease_expires_at=convert.timestamp(lease.lease_expires_at),
        heartbeat_interval=convert.duration(lease.lease_seconds / 3),
        attempt_deadline=convert.timestamp(lease.attempt_deadline),
        review=convert.review_to_proto(lease.review),
        traceparent=lease.trace_context or "",
    )


def decode_report(request: worker_pb2.ReportStageRequest, tenant: str) -> ProgressReport:
    checkpoint = request.checkpoint if request.HasField("checkpoint") else None
    if checkpoint is not None:
        limits.blob("checkpoint", checkpoint, limits.MAX_CHECKPOINT_BYTES)
    return ProgressReport(
        tenant=tenant,
        job_no=limits.job_no(request.job_no),
        token=_token(request.worker_token),
        stage=limits.short_text("stage", request.stage, 32),
        processed=request.processed_units,
        total=request.total_units if request.HasField("total_units") else None,
        checkpoint=checkpoint,
        note=limits.short_text("note", request.note, limits.MAX_MESSAGE_CHARS),
    )


def _decoded(request: worker_pb2.ReportStageRequest, tenant: str) -> ProgressReport | JobwireError:
    try:
        return decode_report(request, tenant)
    except JobwireError as refused:
        return refused


def report_response(status: LeaseStatus) -> worker_pb2.ReportStageResponse:
    return worker_pb2.ReportStageResponse(
        cancel_requested=status.state is LeaseState.CANCEL_REQUESTED,
        lease_expires_at=convert.timestamp(status.lease_expires_at),
    )


def report_result(outcome: LeaseStatus | JobwireError) -> worker_pb2.ReportStageResult:
    if isinstance(outcome, JobwireError):
        return worker_pb2.ReportStageResult(error=status_proto(outcome))
    return worker_pb2.ReportStageResult(response=report_response(outcome))


def answer_margin(remaining_s: float) -> float:
    """How long before the caller's deadline an empty Claim answers: a quarter of the time
    left, 0.5-2 s, so that a loaded server's reply still arrives before the caller gives up
    (a fixed half second was missed on a busy 2-core machine)."""
    return min(2.0, max(0.5, remaining_s / 4))


class WorkerServicer(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(
        self,
        leasing: Leasing,
        settings: Settings,
        kept: Results,
        transfers: Transfers,
        metrics: Metrics,
        pushes: PushHub,
    ) -> None:
        self.leasing = leasing
        self.settings = settings
        self.results = kept
        self.transfers = transfers
        self.metrics = metrics  # the server's: a Session's calls are counted as their unary calls
        self.pushes = pushes  # what Sessions are sent unasked, and what they hold
        self.routes = routes(self)

    # Writes with context.write() rather than yielding: a cancelled stream then cancels this
    # coroutine itself, whose own `finally` ends the session's calls at once (a generator left
    # while grpc sends would be closed only when collected).
    async def Session(  # type: ignore[override]
        self, frames: AsyncIterator[worker_pb2.WorkerFrame], context: grpc.aio.ServicerContext
    ) -> None:
        await self.pushes.ready()
        await WorkerSession(self.routes, context, self.metrics, self.pushes).serve(decoded(frames))

    async def Claim(
        self, request: worker_pb2.ClaimRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.ClaimResponse:
        who, max_jobs, wait = decode_claim(request, self.settings)
        remaining = context.time_remaining()
        if remaining is not None:
            wait = max(0.0, min(wait, remaining - answer_margin(remaining)))
        leases = await self.leasing.claim(who, max_jobs, wait)
        if leases:
            # Leased but never heard of: a reply that did not reach the worker (it hung up,
            # its deadline passed, the connection broke) hands its leases back at once.
            context.add_done_callback(lambda done: self._check_delivered(done, who.tenant, leases))
        return worker_pb2.ClaimResponse(leases=[lease_proto(lease) for lease in leases])

    def _check_delivered(self, context: grpc.aio.ServicerContext, tenant: str, leases: list[Lease]) -> None:
        if context.cancelled():
            self.leasing.hand_back(tenant, leases, "the reply was not delivered")

    async def Heartbeat(
        self, request: worker_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.HeartbeatResponse:
        if len(request.leases) > MAX_HEARTBEAT_LEASES:
            raise InvalidArgument("leases", f"at most {MAX_HEARTBEAT_LEASES} per heartbeat")
        held = [(limits.job_no(ref.job_no), _token(ref.worker_token)) for ref in request.leases]
        states = await self.leasing.heartbeat(auth.current().tenant, _worker_id(request.worker_id), held)
        return worker_pb2.HeartbeatResponse(leases=[
            worker_pb2.LeaseState(
                job_no=s.job_no, state=worker_pb2.LeaseState.State.Value(s.state.value),
                lease_expires_at=convert.timestamp(s.lease_expires_at),
            ) for s in states
        ])  # fmt: skip

    async def ReportStage(
        self, request: worker_pb2.ReportStageRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.ReportStageResponse:
        status = await self.leasing.report(decode_report(request, auth.current().tenant))
        return report_response(status)

    async def BatchReportStage(
        self, request: worker_pb2.BatchReportStageRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.BatchReportStageResponse:
        if len(request.reports) > MAX_BATCH_REPORTS:
            raise InvalidArgument("reports", f"at most {MAX_BATCH_REPORTS} per call")
        tenant = auth.current().tenant
        decoded = [_decoded(item, tenant) for item in request.reports]  # one bad report is refused alone
        reports = [d for d in decoded if isinstance(d, ProgressReport)]
        applied = iter(await self.leasing.reports(reports) if reports else [])
        results = [d if isinstance(d, JobwireError) else next(applied) for d in decoded]
        return worker_pb2.BatchReportStageResponse(results=[report_result(r) for r in results])

    async def RecordEvidence(
        self, request: worker_pb2.RecordEvidenceRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.RecordEvidenceResponse:
        tenant, job_no, token = auth.current().tenant, limits.job_no(request.job_no), _token(request.worker_token)
        entries = handler_evidence.entries((entry.key, entry.value) for entry in request.entries)
        recorded = await self.leasing.record(tenant, job_no, token, entries)
        return worker_pb2.RecordEvidenceResponse(attempt_entries=recorded)

    async def Complete(self, request: worker_pb2.CompleteRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        tenant, job_no, token = auth.current().tenant, limits.job_no(request.job_no), _token(request.worker_token)
        if request.upload_id or request.inline_result:
            if request.upload_id and request.inline_result:
                raise InvalidArgument("upload_id", "give inline_result or upload_id, not both")
            claimed = convert.claimed_artifact(request.result) if request.HasField("result") else None
            if request.upload_id:
                upload_id = kept_results.upload_id(request.upload_id)
                job = await self.results.complete_upload(tenant, job_no, token, upload_id, claimed)
            else:
                job = await self.results.complete_inline(tenant, job_no, token, request.inline_result, claimed)
            return convert.job_to_proto(job)
        result = convert.artifact(request.result, self.settings.result_schemes)
        job = await self.leasing.complete(tenant, job_no, token, result)
        return convert.job_to_proto(job)

    async def UploadResult(
        self, request_iterator: AsyncIterator[job_pb2.ResultChunk], context: grpc.aio.ServicerContext
    ) -> worker_pb2.UploadResultResponse:
        tenant = auth.current().tenant
        # Held until gRPC has ended the call (jobwire.runtime.transfers).
        give_back = self.transfers.take(tenant)
        context.add_done_callback(lambda _: give_back())
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # a later upload of the lease
        chunks = aiter(self.transfers.arriving(decoded(request_iterator), stop))
        first = await anext(chunks, None)
        if first is None:
            raise InvalidArgument("job_no", "the first chunk must name the job, its worker_token and content_type")
        job_no, token = limits.job_no(first.job_no), _token(first.worker_token)
        content_type = limits.short_text("content_type", first.content_type, MAX_CONTENT_TYPE_CHARS)
        upload_id, size, sha256 = await self.results.upload(
            tenant, job_no, token, content_type, _upload_data(first, chunks), stop
        )
        return worker_pb2.UploadResultResponse(upload_id=upload_id, size_bytes=size, sha256=sha256)

    async def Fail(self, request: worker_pb2.FailRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        # Never refuse a Fail for its text: a refused Fail would leave the job RUNNING with
        # nobody working on it. The store keeps the raw text as evidence and shows users
        # only plain_message() of it.
        failure = Failure(
            category=convert.category(request.category),
            message=request.message[: limits.MAX_MESSAGE_CHARS],
            retryable=request.retryable,
            detail=request.detail[: limits.MAX_DETAIL_CHARS],
        )
        job = await self.leasing.fail(
            auth.current().tenant, limits.job_no(request.job_no), _token(request.worker_token), failure
        )
        return convert.job_to_proto(job)

    async def ConfirmCancel(
        self, request: worker_pb2.ConfirmCancelRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.Job:
        note = limits.short_text("note", request.note, limits.MAX_MESSAGE_CHARS)
        job = await self.leasing.confirm_cancel(
            auth.current().tenant, limits.job_no(request.job_no), _token(request.worker_token), note
        )
        return convert.job_to_proto(job)

    async def Release(self, request: worker_pb2.ReleaseRequest, context: grpc.aio.ServicerContext) -> job_pb2.Job:
        checkpoint = _checkpoint(request)
        note = limits.short_text("note", request.note, limits.MAX_MESSAGE_CHARS)
        job = await self.leasing.release(
            auth.current().tenant, limits.job_no(request.job_no), _token(request.worker_token), checkpoint, note
        )
        return convert.job_to_proto(job)

    async def AwaitReview(
        self, request: worker_pb2.AwaitReviewRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.Job:
        checkpoint = _checkpoint(request)
        review = review_request(request.assignee, request.items)
        job = await self.leasing.await_review(
            auth.current().tenant, limits.job_no(request.job_no), _token(request.worker_token), review, checkpoint
        )
        return convert.job_to_proto(job)


def _checkpoint(request: worker_pb2.ReleaseRequest | worker_pb2.AwaitReviewRequest) -> bytes | None:
    checkpoint = request.checkpoint if request.HasField("checkpoint") else None
    if checkpoint is not None:
        limits.blob("checkpoint", checkpoint, limits.MAX_CHECKPOINT_BYTES)
    return checkpoint
