"""How a leased attempt ends when it does not complete: decided here, on values; the store writes it.

A worker's Fail and the reaper's lost lease both ask "do attempts remain?", and a pending
cancel turns either into CANCELLED. The answers live here once, free of SQL: the store reads
the row, asks these functions, and writes what they decide through the transition table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobwire.domain.evidence import EventKind
from jobwire.domain.job import ErrorCategory, JobFailure
from jobwire.domain.retry import OnLeaseLost, RetryPolicy
from jobwire.domain.states import Status

WORKER_LOST_MESSAGE = "The worker running this job stopped responding."


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
    """Where a leased job goes, the event that says so, and what the user is told."""

    status: Status
    kind: EventKind
    run_after: datetime | None = None  # back in the queue: not claimed before this
    error: JobFailure | None = None


def on_fail(current: Status, failure: JobFailure, attempts: Attempts, policy: RetryPolicy, now: datetime) -> Ending:
    """A worker reported its attempt failed: retry after a backoff while attempts remain, else FAILED."""
    if current is Status.CANCEL_REQUESTED:
        # The user asked it to stop; a failure on the way out is still the end they asked for.
        return Ending(status=Status.CANCELLED, kind=EventKind.CANCELLED)
    if failure.retryable and attempts.remain:
        delay = timedelta(seconds=policy.backoff_after(attempts.charged))
        return Ending(status=Status.QUEUED, kind=EventKind.RETRY_SCHEDULED, run_after=now + delay, error=failure)
    return Ending(status=Status.FAILED, kind=EventKind.FAILED, error=failure)


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
