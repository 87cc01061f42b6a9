"""Run one leased job: set up its attempt, call the handler, and end the attempt honestly.

Endings: a returned Result is delivered and verified, then Complete; a cancel at a safe
point removes the temporary folder, then ConfirmCancel; a lost lease, or an attempt past
its deadline, stops everything and tells nobody; an exception becomes Fail with a
category; a shutdown at a safe point becomes Release with the latest checkpoint. The
temporary folder is removed in every case.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc
from opentelemetry.trace import SpanKind, StatusCode

from jobwire.codec import stages_from_proto
from jobwire.domain.handler_evidence import Entry
from jobwire.domain.job import ErrorCategory
from jobwire.domain.review import Decision, Review, ReviewRequest
from jobwire.domain.stages import StageDef
from jobwire.observe import tracing
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk._context import AttemptState, JobContext, JobInfo, Snapshot, StopReason
from jobwire.worker.sdk._endings import (
    Ending,
    EndKind,
    begin_delivery,
    cancelled_from_outside,
    decide,
    run_async_handler,
)
from jobwire.worker.sdk._errors import DependencyFailed, Failure, failure_of
from jobwire.worker.sdk._handlers import AsyncHandler, HandlerSpec, SyncHandler
from jobwire.worker.sdk._lease_keeper import LeaseKeeper
from jobwire.worker.sdk._reporter import REPORT_INTERVAL_S, JobReporter, ReportSender
from jobwire.worker.sdk._result import ResultStore, remove_tree
from jobwire.worker.sdk._rpc import (
    CALL_TIMEOUT_S,
    WorkerStub,
    call_retrying,
    describe,
    is_lease_lost,
    is_transient,
)
from jobwire.worker.sdk._upload import complete_request

log = logging.getLogger("jobwire.worker")
FLUSH_TIMEOUT_S = 5.0
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class RunnerDeps:
    """What every job runner of one worker shares; built once by the Worker."""

    stub: WorkerStub
    keeper: LeaseKeeper
    store: ResultStore | None  # None: the server keeps results (the default); else this worker publishes them
    tmp_root: Path | None
    run_sync: Callable[[SyncHandler, JobContext], Awaitable[object]]
    give_up_at: Callable[[], float | None]
    reports: ReportSender  # every job's progress, in one call per worker and interval
    claims_stopped: asyncio.Event  # set once no Claim is in flight any more, for good


class _LoopSink:
    """Hands snapshots and evidence entries from any thread to the reporter on the event loop, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, reporter: JobReporter) -> None:
        self._loop, self._reporter = loop, reporter

    def publish(self, snapshot: Snapshot) -> None:
        # A closed loop means the worker has exited and nobody listens any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._reporter.update, snapshot)

    def record(self, entry: Entry) -> None:
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._reporter.record, entry)


def stages_of(lease: worker_pb2.Lease, spec: HandlerSpec) -> tuple[StageDef, ...]:
    """The plan the server snapshotted at claim time; the handler's own if it sent none."""
    if not lease.stages:
        return spec.stages
    return stages_from_proto(lease.stages)


class JobRunner:
    """One attempt of one job, from lease to ending."""

    def __init__(self, deps: RunnerDeps, lease: worker_pb2.Lease, spec: HandlerSpec) -> None:
        self._deps, self._lease, self._spec = deps, lease, spec
        self.job_no = lease.job_no
        self._stop_early: StopReason | None = None
        self._state: AttemptState | None = None

    def request_stop(self, reason: StopReason) -> None:
        if self._state is not None:
            self._state.request_stop(reason)
        else:
            self._stop_early = max(reason, self._stop_early or reason)

    async def run(self) -> EndKind:
        """Run the attempt to its end; returns how it ended."""
        lease = self._lease
        stages = stages_of(lease, self._spec)
        tmp = Path(tempfile.mkdtemp(prefix=f"jobwire-{lease.job_no}-a{lease.attempt}-", dir=self._deps.tmp_root))
        reporter = JobReporter(
            self._deps.reports,
            job_no=lease.job_no,
            token=lease.worker_token,
            first_stage=stages[0].code,
            on_stop=self.request_stop,
        )
        state = AttemptState(self._info(stages, tmp), _LoopSink(asyncio.get_running_loop(), reporter))
        self._state = state
        if self._stop_early is not None:
            state.request_stop(self._stop_early)
        interval = lease.heartbeat_interval.ToTimedelta().total_seconds()
        self._deps.keeper.add(lease.job_no, lease.worker_token, interval=interval, on_stop=state.request_stop)
        time_limit = _stop_at_deadline(state)
        try:
            ending = await self._invoke(state)
            await _Finisher(self._deps, lease, state, reporter).finish(ending)
            return ending.kind
        finally:
            if time_limit is not None:
                time_limit.cancel()
            self._deps.keeper.remove(lease.job_no, lease.worker_token)
            await reporter.close()
            await _remove_folder(tmp)  # an ending call removed it already (see _end), unless none was made

    def _info(self, stages: tuple[StageDef, ...], tmp: Path) -> JobInfo:
        lease = self._lease
        return JobInfo(
            job_no=lease.job_no,
            job_type=lease.job_type,
            tenant=lease.tenant,
            payload=lease.payload,
            attempt=lease.attempt,
            last_checkpoint=lease.checkpoint if lease.has_checkpoint else None,
            stages=stages,
            tmp_dir=tmp,
            deadline=lease.attempt_deadline.ToDatetime(tzinfo=UTC) if lease.HasField("attempt_deadline") else None,
            review=review_of(lease),
        )

    async def _invoke(self, state: AttemptState) -> Ending:
        tracer = tracing.tracer()
        if tracer is None:
            return await self._call(state)
        lease = self._lease
        # A child of the Submit's span (the lease carries its traceparent): one trace from the
        # backend's request to this handler, across machines.
        with tracer.start_as_current_span(
            f"jobwire.job {lease.job_type}",
            context=tracing.parent_context(lease.traceparent),
            kind=SpanKind.CONSUMER,
            attributes={"jobwire.job_no": lease.job_no, "jobwire.attempt": lease.attempt},
        ) as span:
            ending = await self._call(state)
            span.set_attribute("jobwire.ending", ending.kind.value)
            if ending.failure is not None:
                span.set_status(StatusCode.ERROR, ending.failure.category.value)
            return ending

    async def _call(self, state: AttemptState) -> Ending:
        ctx = JobContext(state)
        result: object = None
        error: BaseException | None = None
        try:
            if self._spec.is_async:
                result = await run_async_handler(cast(AsyncHandler, self._spec.fn), ctx, state)
            else:
                result = await self._deps.run_sync(cast(SyncHandler, self._spec.fn), ctx)
        except BaseException as exc:  # noqa: BLE001 - every outcome is reported, none lost
            error = exc
        if cancelled_from_outside(error):
            # Abandoned by the worker (grace period over): no safe point was reached.
            return Ending(kind=EndKind.ABANDON)
        return decide(stop=state.stop, delivered=state.delivered, result=result, error=error)


async def _remove_folder(path: Path) -> None:
    """Remove an attempt's temporary folder: at once when it is empty (most are: no thread
    hop, a tenth of a no-op job's worker CPU), else with its contents on a thread."""
    try:
        path.rmdir()
    except FileNotFoundError:
        return
    except OSError:
        await asyncio.to_thread(remove_tree, path)


def _stop_at_deadline(state: AttemptState) -> asyncio.TimerHandle | None:
    """Stop the handler when its attempt's time runs out by this machine's clock.

    The server ends the attempt by the database clock whatever happens here; this only
    spares the handler work nobody will take.
    """
    deadline = state.info.deadline
    if deadline is None:
        return None
    delay = max(0.0, (deadline - datetime.now(UTC)).total_seconds())
    return asyncio.get_running_loop().call_later(delay, state.request_stop, StopReason.TIMED_OUT)


class _Finisher:
    """Acts on an Ending: the RPC that ends the lease, retried while it may succeed."""

    def __init__(self, deps: RunnerDeps, lease: worker_pb2.Lease, state: AttemptState, reporter: JobReporter) -> None:
        self._deps, self._lease, self._state, self._reporter = deps, lease, state, reporter

    async def finish(self, ending: Ending) -> None:
        if ending.kind is EndKind.COMPLETE:
            await self._complete(ending.result)
        elif ending.kind is EndKind.FAIL:
            assert ending.failure is not None
            await self._fail(ending.failure)
        elif ending.kind is EndKind.CONFIRM_CANCEL:
            await self._end(
                "ConfirmCancel",
                self._deps.stub.ConfirmCancel,
                worker_pb2.ConfirmCancelRequest(job_no=self._lease.job_no, worker_token=self._lease.worker_token),
                done="cancelled at a safe point",
            )
        elif ending.kind is EndKind.RELEASE:
            await self._release()
        elif ending.kind is EndKind.AWAIT_REVIEW:
            assert ending.review is not None
            await self._await_review(ending.review)
        elif ending.kind is EndKind.DISCARD:
            self._log("lease lost; result discarded")
        elif ending.kind is EndKind.TIMED_OUT:
            self._log("timed out: stopped past the attempt's deadline, nothing delivered; the server ends the attempt")
        else:  # ABANDON: no safe point reached; the lease expires and the server decides
            self._log("abandoned without a safe point; the lease will expire")

    async def _complete(self, result: object) -> None:
        state = self._state
        if self._deps.store is None:
            await self._hand_over(result)
            return
        try:
            delivered = await self._showing(
                asyncio.to_thread(
                    self._deps.store.deliver,
                    result,
                    tenant=self._lease.tenant,
                    job_no=self._lease.job_no,
                    attempt=self._lease.attempt,
                    tmp_dir=state.info.tmp_dir,
                )
            )
        except Exception as exc:  # noqa: BLE001 - an undeliverable result is reported as a failure
            await self._fail(failure_of(exc))
            return
        if state.stop in (StopReason.LOST, StopReason.TIMED_OUT):
            self._deps.store.discard(delivered.path)
            return
        await self._reporter.flush(FLUSH_TIMEOUT_S)
        a = delivered.artifact
        artifact = job_pb2.Artifact(
            uri=a.uri, size_bytes=a.size_bytes, sha256=a.sha256, content_type=a.content_type, summary=a.summary
        )
        request = worker_pb2.CompleteRequest(
            job_no=self._lease.job_no, worker_token=self._lease.worker_token, result=artifact
        )
        outcome = await self._end(
            "Complete", self._deps.stub.Complete, request, done=f"READY, {a.size_bytes} bytes delivered to {a.uri}"
        )
        if outcome in (_Outcome.LOST, _Outcome.REFUSED):
            # Refused for good (not merely unreachable): the file must not look delivered.
            self._deps.store.discard(delivered.path)
        if outcome is _Outcome.REFUSED:
            refused = Failure(category=ErrorCategory.RESULT_INVALID, message="the result was refused", retryable=False)
            await self._fail(refused)

    async def _hand_over(self, result: object) -> None:
        """The default: the server keeps the bytes (inline or uploaded), then Complete names them."""
        try:
            request = await self._showing(
                complete_request(self._deps.stub, self._lease, result, self._state.info.tmp_dir)
            )
        except grpc.RpcError as exc:
            if is_lease_lost(exc):
                self._log("lease lost during the upload; result discarded")
                return
            await self._fail(failure_of(DependencyFailed(f"the result could not be uploaded: {describe(exc)}")))
            return
        except Exception as exc:  # noqa: BLE001 - an undeliverable result is reported as a failure
            await self._fail(failure_of(exc))
            return
        if self._state.stop in (StopReason.LOST, StopReason.TIMED_OUT):
            return
        await self._reporter.flush(FLUSH_TIMEOUT_S)
        a = request.result
        how = "inline" if not request.upload_id else "uploaded"
        outcome = await self._end(
            "Complete", self._deps.stub.Complete, request, done=f"READY, {a.size_bytes} bytes {how}"
        )
        if outcome is _Outcome.REFUSED:
            refused = Failure(category=ErrorCategory.RESULT_INVALID, message="the result was refused", retryable=False)
            await self._fail(refused)

    async def _showing(self, delivery: Awaitable[T]) -> T:
        """`delivery`, with the plan's DELIVERING stage shown if it lasts over one report interval.

        Shown, it is reported at once, and the flush before Complete waits for its answer. A
        delivery that ends sooner ends the job at once: nobody could have seen the stage, and
        a report and a server transaction per job fewer is a quarter more no-op jobs a second
        (bench/noop.py).
        """
        shown = asyncio.get_running_loop().call_later(REPORT_INTERVAL_S, self._show_delivery)
        try:
            return await delivery
        finally:
            shown.cancel()

    def _show_delivery(self) -> None:
        begin_delivery(self._state)
        self._reporter.send_now()

    async def _fail(self, failure: Failure) -> None:
        await self._reporter.flush(FLUSH_TIMEOUT_S)
        request = worker_pb2.FailRequest(
            job_no=self._lease.job_no,
            worker_token=self._lease.worker_token,
            category=job_pb2.JobError.Category.Value(failure.category.value),
            message=failure.message,
            retryable=failure.retryable,
            detail=failure.detail,
        )
        again = "retryable" if failure.retryable else "not retryable"
        # The detail's first line is the exception itself (`ValueError: no header row`); the
        # message is the plain sentence users see, which rarely says what went wrong.
        cause = failure.detail.partition("\n")[0]
        why = f"{failure.message} [{cause}]" if cause and failure.message not in cause else failure.message
        await self._end(
            "Fail",
            self._deps.stub.Fail,
            request,
            done=f"failed {failure.category.value} ({again}): {why}",
            level=logging.WARNING,
            fields={"error_category": failure.category.value},
        )

    async def _release(self) -> None:
        await self._reporter.flush(FLUSH_TIMEOUT_S)
        # A long-poll Claim still in flight would take the released job straight back.
        await self._deps.claims_stopped.wait()
        request = worker_pb2.ReleaseRequest(
            job_no=self._lease.job_no, worker_token=self._lease.worker_token, note="worker shutting down"
        )
        checkpoint = self._state.checkpoint
        if checkpoint is not None:
            request.checkpoint = checkpoint
        kept = "with its checkpoint" if checkpoint is not None else "without a checkpoint"
        await self._end("Release", self._deps.stub.Release, request, done=f"released {kept}")

    async def _await_review(self, review: ReviewRequest) -> None:
        await self._reporter.flush(FLUSH_TIMEOUT_S)
        request = worker_pb2.AwaitReviewRequest(
            job_no=self._lease.job_no, worker_token=self._lease.worker_token, assignee=review.assignee,
            items=review.items,
        )  # fmt: skip
        if self._state.checkpoint is not None:
            request.checkpoint = self._state.checkpoint
        await self._end(
            "AwaitReview", self._deps.stub.AwaitReview, request, done=f"waiting for review by {review.assignee}"
        )

    def _log(self, what: str, level: int = logging.INFO, fields: dict[str, str] | None = None) -> None:
        log.log(level, "job %s attempt %d: %s", self._lease.job_no, self._lease.attempt, what, extra=fields)

    async def _end(
        self,
        what: str,
        method: Callable[..., Awaitable[Any]],
        request: Any,
        *,
        done: str,
        level: int = logging.INFO,
        fields: dict[str, str] | None = None,
    ) -> _Outcome:
        """Make the ending call, retrying while the server may be reachable again.

        `done` is logged once the server accepted it: the log says how the job really ended
        (a result refused as invalid is logged as the failure it became, not as COMPLETE).
        """
        label = f"{what} {self._lease.job_no}"
        # Whoever sees the job end must not find this attempt's temporary output still there.
        await _remove_folder(self._state.info.tmp_dir)
        try:
            await call_retrying(
                lambda: method(request, timeout=CALL_TIMEOUT_S), what=label, give_up_at=self._deps.give_up_at
            )
        except grpc.RpcError as exc:
            if is_lease_lost(exc):
                log.warning("%s: lease lost (%s); the job is no longer ours", label, describe(exc))
                return _Outcome.LOST
            log.error("%s failed: %s", label, describe(exc))
            return _Outcome.UNREACHABLE if is_transient(exc) else _Outcome.REFUSED
        self._log(done, level, fields)
        return _Outcome.OK


class _Outcome(enum.Enum):
    OK = "OK"
    LOST = "LOST"  # WORKER_LEASE_LOST: someone else decides the job now
    REFUSED = "REFUSED"  # a definite no for another reason
    UNREACHABLE = "UNREACHABLE"  # gave up retrying; the call may or may not have landed


def review_of(lease: worker_pb2.Lease) -> Review | None:
    if not lease.HasField("review"):
        return None
    r = lease.review
    return Review(decision=Decision(job_pb2.Review.Decision.Name(r.decision)), note=r.note, resolved_by=r.resolved_by)
