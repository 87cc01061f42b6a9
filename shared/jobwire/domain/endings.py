"""How a leased job ends when it does not complete: decided here, on values; the store writes it.

A worker's Fail, the reaper's lost lease and an attempt past its time limit all ask "do
attempts remain?", and a pending cancel turns each into CANCELLED, a worker's Release and
AwaitReview too. The answers live here once, free of SQL: the store reads the row, asks
these functions, and writes what they decide through the transition table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from jobwire.domain.errors import CancelNotRequested
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import ErrorCategory, JobFailure
from jobwire.domain.retry import OnLeaseLost, RetryPolicy
from jobwire.domain.states import Status
from jobwire.domain.timeouts import OnNoProgress

WORKER_LOST_MESSAGE = "The worker running this job stopped responding."
ATTEMPT_TIMEOUT_MESSAGE = "An attempt took longer than its time limit."
NO_PROGRESS_MESSAGE = "The job made no progress for longer than its time limit."
JOB_TIMEOUT_MESSAGE = "The job did not finish within its time limit."


@dataclass(frozen=True, kw_only=True)
class Attempts:
    """Attempts started against the job's budget.

    `base` counts the attempts not charged: those before a user's Retry (which grants a fresh
    budget) and those a worker released or an operator requeued.
    """

    attempt: int
    base: int
    budget: int

    @property
    def charged(self) -> int:
        return self.attempt - self.base

    @property
    def remain(self) -> bool:
        return self.charged < self.budget


@dataclass(frozen=True, kw_only=True)
class Ending:
    """Where a job goes, the event that says so, and what the user is told."""

    status: Status
    kind: EventKind
    run_after: datetime | None = None  # back in the queue: not claimed before this
    error: JobFailure | None = None
    # The attempts that no longer count (Attempts.base), when the decision changes them: an
    # attempt given back (Release, Requeue, an approved review) or a fresh budget (Retry).
    attempt_base: int | None = None


def on_fail(current: Status, failure: JobFailure, attempts: Attempts, policy: RetryPolicy, now: datetime) -> Ending:
    """A worker reported its attempt failed: retry after a backoff while attempts remain, else FAILED."""
    if current is Status.CANCEL_REQUESTED:
        # The user asked it to stop; a failure on the way out is still the end they asked for.
        return Ending(status=Status.CANCELLED, kind=EventKind.CANCELLED)
    if failure.retryable and attempts.remain:
        delay = timedelta(seconds=policy.backoff_after(attempts.charged))
        return Ending(status=Status.QUEUED, kind=EventKind.RETRY_SCHEDULED, run_after=now + delay, error=failure)
    return Ending(status=Status.FAILED, kind=EventKind.FAILED, error=failure)


def on_release(current: Status, attempts: Attempts, now: datetime) -> Ending:
    """A worker stopped gracefully: back to QUEUED at once, the attempt given back; CANCELLED if asked to stop."""
    if current is Status.CANCEL_REQUESTED:
        return Ending(status=Status.CANCELLED, kind=EventKind.CANCELLED)  # a pending cancel wins
    return Ending(status=Status.QUEUED, kind=EventKind.RELEASED, run_after=now, attempt_base=attempts.base + 1)


def on_await_review(current: Status) -> Ending:
    """A worker asked a person to decide: WAITING; CANCELLED if asked to stop (nobody reviews a job that is ending)."""
    if current is Status.CANCEL_REQUESTED:
        return Ending(status=Status.CANCELLED, kind=EventKind.CANCELLED)  # a pending cancel wins
    return Ending(status=Status.WAITING, kind=EventKind.AWAITING_REVIEW)


def on_confirm_cancel(current: Status) -> Ending:
    """A worker confirms it stopped as asked: CANCELLED, only when a cancel was requested.

    Raises:
        CancelNotRequested: Nobody asked the job to stop.
    """
    if current is not Status.CANCEL_REQUESTED:
        raise CancelNotRequested()
    return Ending(status=Status.CANCELLED, kind=EventKind.CANCELLED)


def on_lease_lost(current: Status, policy: OnLeaseLost, attempts: Attempts, stage: str, now: datetime) -> Ending | None:
    """A lease stayed expired past its grace; None leaves the job RUNNING and stalled for an operator (INSPECT)."""
    if current is Status.CANCEL_REQUESTED:
        return Ending(status=Status.CANCELLED, kind=EventKind.LEASE_REVOKED_CANCELLED)  # nobody is executing it
    if policy is not OnLeaseLost.RETRY:
        return None
    if attempts.remain:
        # The lost attempt stays charged; the checkpoint stays for the next one.
        return Ending(status=Status.QUEUED, kind=EventKind.LEASE_REVOKED_REQUEUED, run_after=now)
    lost = JobFailure(category=ErrorCategory.WORKER_LOST, stage=stage, message=WORKER_LOST_MESSAGE, retryable=True)
    return Ending(status=Status.FAILED, kind=EventKind.LEASE_REVOKED_FAILED, error=lost)


def on_attempt_timeout(current: Status, attempts: Attempts, policy: RetryPolicy, stage: str, now: datetime) -> Ending:
    """An attempt ran past its attempt_timeout: a retryable TIMEOUT failure, as if its worker had said so."""
    return _timed_out(current, attempts, policy, stage, now, EventKind.ATTEMPT_TIMED_OUT, ATTEMPT_TIMEOUT_MESSAGE)


def on_no_progress(
    current: Status, on: OnNoProgress, attempts: Attempts, policy: RetryPolicy, stage: str, now: datetime
) -> Ending | None:
    """No progress for the stage_timeout; None leaves the job RUNNING as a finding for an operator (INSPECT)."""
    if on is not OnNoProgress.FAIL:
        return None
    return _timed_out(current, attempts, policy, stage, now, EventKind.NO_PROGRESS, NO_PROGRESS_MESSAGE)


def on_job_timeout(stage: str) -> Ending:
    """Past the job's own time limit: FAILED whatever its status; a retry would only time out again."""
    failure = JobFailure(category=ErrorCategory.TIMEOUT, stage=stage, message=JOB_TIMEOUT_MESSAGE, retryable=False)
    return Ending(status=Status.FAILED, kind=EventKind.JOB_TIMED_OUT, error=failure)


def _timed_out(
    current: Status, attempts: Attempts, policy: RetryPolicy, stage: str, now: datetime, kind: EventKind, message: str
) -> Ending:
    failure = JobFailure(category=ErrorCategory.TIMEOUT, stage=stage, message=message, retryable=True)
    return replace(on_fail(current, failure, attempts, policy, now), kind=kind)
