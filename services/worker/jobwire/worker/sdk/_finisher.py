"""End a leased job's attempt as its Ending says: deliver the result and Complete, or Fail,
Release, AwaitReview, ConfirmCancel; each ending call retried while it may succeed, and the
temporary folder removed once the lease is over.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc

from jobwire.domain.job import ErrorCategory
from jobwire.domain.review import ReviewRequest
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk._attempt import AttemptState, StopReason
from jobwire.worker.sdk._deps import RunnerDeps
from jobwire.worker.sdk._endings import Ending, EndKind, begin_delivery
from jobwire.worker.sdk._errors import DependencyFailed, Failure, failure_of
from jobwire.worker.sdk._reporter import REPORT_INTERVAL_S, JobReporter
from jobwire.worker.sdk._result import remove_tree
from jobwire.worker.sdk._rpc import CALL_TIMEOUT_S, call_retrying, describe, is_lease_lost, is_transient
from jobwire.worker.sdk._upload import complete_request

log = logging.getLogger("jobwire.worker")
FLUSH_TIMEOUT_S = 5.0
T = TypeVar("T")


async def remove_folder(path: Path) -> None:
    """Remove an attempt's temporary folder: at once when it is empty (most are: no thread
    hop, a tenth of a no-op job's worker CPU), else with its contents on a thread."""
    try:
        path.rmdir()
    except FileNotFoundError:
        return
    except OSError:
        await asyncio.to_thread(remove_tree, path)


class Finisher:
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
        await remove_folder(self._state.info.tmp_dir)
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
