"""Fakes for the worker SDK's unit tests: a WorkerService in memory, failed calls, leases."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import message
from google.rpc import code_pb2, error_details_pb2, status_pb2

from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk import Worker


def rpc_error(
    code: grpc.StatusCode, reason: str | None = None, details: str = "", metadata: dict[str, str] | None = None
) -> grpc.aio.AioRpcError:
    """What a failed aio call raises, with a jobwire ErrorInfo reason (and metadata) when given."""
    trailing = grpc.aio.Metadata()
    if reason is not None:
        status = status_pb2.Status(code=getattr(code_pb2, code.name), message=details)
        info = error_details_pb2.ErrorInfo(reason=reason, domain="jobwire", metadata=metadata or {})
        status.details.add().Pack(info)
        trailing.add("grpc-status-details-bin", status.SerializeToString())
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


def _status_of(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The google.rpc.Status an error carries (a batch call's per-item error)."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            return status_pb2.Status.FromString(value)
    return status_pb2.Status(code=getattr(code_pb2, error.code().name), message=error.details() or "")


def lease_lost(*, timed_out: bool = False) -> grpc.aio.AioRpcError:
    """WORKER_LEASE_LOST; `timed_out`: as the server says it of a lease revoked for time."""
    metadata = {"lease_state": "TIMED_OUT"} if timed_out else None
    return rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "WORKER_LEASE_LOST", "lease lost", metadata)


_GONE = (worker_pb2.LeaseState.LOST, worker_pb2.LeaseState.TIMED_OUT)


def unavailable() -> grpc.aio.AioRpcError:
    return rpc_error(grpc.StatusCode.UNAVAILABLE, None, "database down")


def make_lease(
    job_no: str = "PT-20260101-001",
    job_type: str = "test",
    payload: bytes = b"",
    *,
    attempt: int = 1,
    checkpoint: bytes | None = None,
    stages: Sequence[str] = (),
    heartbeat_s: float = 0.2,
    deadline_in: float | None = None,
    tenant: str = "",
) -> worker_pb2.Lease:
    """A lease as Claim grants it; its token `tok-<job_no>`, or `tok-<tenant>-<job_no>` with a tenant."""
    lease = worker_pb2.Lease(
        job_no=job_no,
        tenant=tenant,
        worker_token=f"tok-{tenant}-{job_no}" if tenant else f"tok-{job_no}",
        job_type=job_type,
        payload=payload,
        attempt=attempt,
        checkpoint=checkpoint or b"",
        has_checkpoint=checkpoint is not None,
        stages=[worker_pb2.StageDef(code=code, cancellable=code != "DELIVERING") for code in stages],
    )
    lease.heartbeat_interval.FromNanoseconds(int(heartbeat_s * 1e9))
    if deadline_in is not None:
        lease.attempt_deadline.FromNanoseconds(time.time_ns() + int(deadline_in * 1e9))
    return lease


@dataclass
class Call:
    method: str
    request: Any
    at: float


@dataclass
class FakeWorkerService:
    """Answers like WorkerService; scripted errors and states, every call recorded."""

    pending: list[worker_pb2.Lease] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    errors: dict[str, list[BaseException]] = field(default_factory=dict)
    lease_states: dict[str, int] = field(default_factory=dict)  # job_no -> LeaseState.State (LOST, TIMED_OUT: gone)
    cancel_in_reports: set[str] = field(default_factory=set)
    ended: dict[str, str] = field(default_factory=dict)  # job_no -> the ending method
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    claim_gate: asyncio.Event | None = None  # when set, Claim long-polls until the gate opens
    on_end: Callable[[str, Any], None] | None = None  # sees every ending call as it arrives
    report_gate: asyncio.Event | None = None  # when set, BatchReportStage answers once the gate opens
    clock: Callable[[], float] = time.monotonic  # what each call's `at` reads

    def of(self, method: str, job_no: str | None = None) -> list[Any]:
        return [c.request for c in self.calls if c.method == method and (job_no is None or c.request.job_no == job_no)]

    def fail_next(self, method: str, *errors: BaseException) -> None:
        self.errors.setdefault(method, []).extend(errors)

    async def wait_for(self, method: str, count: int = 1, timeout: float = 5.0) -> list[Any]:
        async with asyncio.timeout(timeout):
            while len(self.of(method)) < count:
                self.changed.clear()
                await self.changed.wait()
        return self.of(method)

    def _record(self, method: str, request: message.Message) -> None:
        self.calls.append(Call(method, request, self.clock()))
        self.changed.set()
        queued = self.errors.get(method)
        if queued:
            raise queued.pop(0)

    async def Claim(
        self, request: worker_pb2.ClaimRequest, *, timeout: float | None = None
    ) -> worker_pb2.ClaimResponse:
        self._record("Claim", request)
        if self.claim_gate is not None:
            await self.claim_gate.wait()
        elif not self.pending:
            # A short long poll: nothing to hand out, and a worker must not spin on the fake.
            await asyncio.sleep(min(0.02, request.wait.ToTimedelta().total_seconds()))
        granted, self.pending = self.pending[: request.max_jobs or 1], self.pending[request.max_jobs or 1 :]
        return worker_pb2.ClaimResponse(leases=granted)

    async def Heartbeat(
        self, request: worker_pb2.HeartbeatRequest, *, timeout: float | None = None
    ) -> worker_pb2.HeartbeatResponse:
        self._record("Heartbeat", request)
        states = [
            worker_pb2.LeaseState(job_no=ref.job_no, state=self.lease_states.get(ref.job_no, worker_pb2.LeaseState.OK))
            for ref in request.leases
        ]
        return worker_pb2.HeartbeatResponse(leases=states)

    async def BatchReportStage(
        self, request: worker_pb2.BatchReportStageRequest, *, timeout: float | None = None
    ) -> worker_pb2.BatchReportStageResponse:
        """Each report is recorded as "ReportStage"; an error queued for "ReportStage" that a
        retry could cure (UNAVAILABLE) fails the whole call, any other answers its report."""
        self._record("BatchReportStage", request)
        if self.report_gate is not None:
            await self.report_gate.wait()
        results = []
        for report in request.reports:
            try:
                self._record("ReportStage", report)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    raise
                results.append(worker_pb2.ReportStageResult(error=_status_of(exc)))
                continue
            state = self.lease_states.get(report.job_no)
            if state in _GONE:
                gone = lease_lost(timed_out=state == worker_pb2.LeaseState.TIMED_OUT)
                results.append(worker_pb2.ReportStageResult(error=_status_of(gone)))
                continue
            response = worker_pb2.ReportStageResponse(cancel_requested=report.job_no in self.cancel_in_reports)
            results.append(worker_pb2.ReportStageResult(response=response))
        return worker_pb2.BatchReportStageResponse(results=results)

    async def RecordEvidence(
        self, request: worker_pb2.RecordEvidenceRequest, *, timeout: float | None = None
    ) -> worker_pb2.RecordEvidenceResponse:
        self._record("RecordEvidence", request)
        return worker_pb2.RecordEvidenceResponse(attempt_entries=len(request.entries))

    async def _end(self, method: str, request: Any) -> job_pb2.Job:
        if self.on_end is not None:
            self.on_end(method, request)
        self._record(method, request)
        state = self.lease_states.get(request.job_no)
        if state in _GONE:
            raise lease_lost(timed_out=state == worker_pb2.LeaseState.TIMED_OUT)
        self.ended[request.job_no] = method
        return job_pb2.Job(job_no=request.job_no)

    async def Complete(self, request: worker_pb2.CompleteRequest, *, timeout: float | None = None) -> job_pb2.Job:
        return await self._end("Complete", request)

    async def Fail(self, request: worker_pb2.FailRequest, *, timeout: float | None = None) -> job_pb2.Job:
        return await self._end("Fail", request)

    async def ConfirmCancel(
        self, request: worker_pb2.ConfirmCancelRequest, *, timeout: float | None = None
    ) -> job_pb2.Job:
        return await self._end("ConfirmCancel", request)

    async def Release(self, request: worker_pb2.ReleaseRequest, *, timeout: float | None = None) -> job_pb2.Job:
        return await self._end("Release", request)


class FakeStream:
    """One Session stream as a SessionStub sees it (grpc.aio's StreamStreamCall); the test, or
    FakeSessions, plays the server: it reads `frames` and answers, pushes or ends."""

    def __init__(self, refused: grpc.aio.AioRpcError | None = None) -> None:
        self.frames: asyncio.Queue[worker_pb2.WorkerFrame | None] = asyncio.Queue()  # None: half-closed
        self._answers: asyncio.Queue[worker_pb2.ServerFrame | BaseException | None] = asyncio.Queue()
        self._refused = refused
        self.ended = False
        self.half_closed = False
        self.cancelled = False

    async def wait_for_connection(self) -> None:
        if self._refused is not None:
            self.ended = True
            raise self._refused

    async def write(self, frame: worker_pb2.WorkerFrame) -> None:
        if self.ended or self.half_closed:
            raise asyncio.InvalidStateError("RPC already finished.")
        self.frames.put_nowait(frame)

    async def read(self) -> Any:
        item = await self._answers.get()
        if item is None:
            self.ended = True
            return grpc.aio.EOF
        if isinstance(item, BaseException):
            self.ended = True
            raise item
        return item

    async def done_writing(self) -> None:
        self.half_closed = True
        self.frames.put_nowait(None)

    def cancel(self) -> bool:
        if self.ended:
            return False
        self.cancelled = True
        self._answers.put_nowait(asyncio.CancelledError())  # what grpc.aio's read raises once cancelled
        return True

    # -- the server's side ---------------------------------------------------------------

    async def next_frame(self) -> worker_pb2.WorkerFrame:
        frame = await asyncio.wait_for(self.frames.get(), 5)
        assert frame is not None, "the worker half-closed the stream"
        return frame

    def answer(self, call_id: int, **reply: Any) -> None:
        self._answers.put_nowait(worker_pb2.ServerFrame(call_id=call_id, **reply))

    def push(self, **reply: Any) -> None:
        self.answer(0, **reply)

    def end(self, error: BaseException | None = None) -> None:
        """The stream ends: with `error` (it broke, or was refused), or OK."""
        self._answers.put_nowait(error)


def status_of(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The google.rpc.Status a Session answers a refused frame with: the unary call's error."""
    return _status_of(error)


_UNARY = {
    "claim": ("Claim", "claim"),
    "heartbeat": ("Heartbeat", "heartbeat"),
    "batch_report_stage": ("BatchReportStage", "batch_report_stage"),
    "complete": ("Complete", "job"),
    "fail": ("Fail", "job"),
    "confirm_cancel": ("ConfirmCancel", "job"),
    "release": ("Release", "job"),
    "await_review": ("AwaitReview", "job"),
    "record_evidence": ("RecordEvidence", "record_evidence"),
}


@dataclass
class FakeSessions:
    """A WorkerService with Session over a FakeWorkerService: each Session() is a new FakeStream.

    `serving`: every frame is answered by the FakeWorkerService's own method (a server with
    Session); else the test answers. `standing`: standing claims are taken (answered with an
    empty claim, recorded in `standing_claims`) or refused INVALID_ARGUMENT as a server without
    them refuses a call it does not route. `refusals` fail the next opens, in order. Unary calls
    (a worker without a session, UploadResult) go to the FakeWorkerService.
    """

    service: FakeWorkerService
    serving: bool = True
    standing: bool = True
    has_session: bool = True
    refusals: list[grpc.aio.AioRpcError] = field(default_factory=list)
    opened: list[FakeStream] = field(default_factory=list)
    standing_claims: list[worker_pb2.ClaimRequest] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.service, name)

    def Session(self) -> FakeStream:
        stream = FakeStream(self.refusals.pop(0) if self.refusals else None)
        self.opened.append(stream)
        if not self.has_session:
            stream.end(rpc_error(grpc.StatusCode.UNIMPLEMENTED, None, "Method not found!"))
        elif self.serving:
            self._spawn(self._serve(stream))
        self.service.changed.set()
        return stream

    async def stream(self, index: int) -> FakeStream:
        """The index-th stream opened (from 0), once it is."""
        async with asyncio.timeout(5):
            while len(self.opened) <= index:
                self.service.changed.clear()
                await self.service.changed.wait()
        return self.opened[index]

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, stream: FakeStream) -> None:
        answering: set[asyncio.Task[None]] = set()
        while not stream.ended:
            frame = await stream.frames.get()
            if frame is None:  # half-closed: the calls in flight are answered, then it ends OK
                await asyncio.gather(*answering, return_exceptions=True)
                stream.end()
                return
            task = asyncio.ensure_future(self._answer(stream, frame))
            answering.add(task)
            task.add_done_callback(answering.discard)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, stream: FakeStream, frame: worker_pb2.WorkerFrame) -> None:
        kind = frame.WhichOneof("call")
        request = getattr(frame, kind)
        if kind == "standing_claim":
            if not self.standing:
                refused = rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "a frame carries one call")
                stream.answer(frame.call_id, error=_status_of(refused))
                return
            self.standing_claims.append(request)
            self.service.changed.set()
            stream.answer(frame.call_id, claim=worker_pb2.ClaimResponse())
            return
        method, reply = _UNARY[kind]
        try:
            answer = await getattr(self.service, method)(request)
        except grpc.aio.AioRpcError as exc:
            stream.answer(frame.call_id, error=_status_of(exc))
            return
        stream.answer(frame.call_id, **{reply: answer})


@asynccontextmanager
async def worker_running(worker: Worker) -> AsyncIterator[tuple[Worker, asyncio.Task[int]]]:
    """`worker` running until the block ends, then shut down at once (if it has not stopped)."""
    task = asyncio.create_task(worker.run())
    try:
        yield worker, task
    finally:
        if not task.done():
            worker.shutdown(immediate=True)
            await asyncio.wait_for(task, 5)
