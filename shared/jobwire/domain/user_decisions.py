"""What a person's request does to a job, decided on values; the store writes the answer.

Cancel, Retry (forced by an admin or not), a reviewer's Resolve and an operator's Requeue.
The store's op for a user action reads the job's row into these values, asks here, and
writes what comes back through the transition table (jobwire.db.changes). A refusal is a
JobwireError whose words say what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobwire.domain.endings import Attempts, Ending
from jobwire.domain.errors import InvalidTransition, JobNotCancellable, NotRetryable, NotWaiting
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import JobFailure
from jobwire.domain.lease import Holding, alive
from jobwire.domain.review import Decision, Review, rejection
from jobwire.domain.states import Status

FORCE_HINT = "an admin may force a retry (jobctl retry --force)"


def on_cancel(current: Status, cancellable: bool) -> Ending | None:
    """A person's Cancel: QUEUED and WAITING end at once, RUNNING is asked to stop at its next
    safe point; None when it is already cancelled or asked to be (Cancel is idempotent).

    Args:
        current: The job's status.
        cancellable: Whether the stage a RUNNING job is in may be cancelled (its plan says).

    Raises:
        JobNotCancellable: The job ended otherwise, or runs a stage that cannot be cancelled.
    """
    if current in (Status.CANCEL_REQUESTED, Status.CANCELLED):
        return None
    if current in (Status.QUEUED, Status.WAITING):
        return Ending(status=Status.CANCELLED, kind=EventKind.CANCELLED)
    if current is Status.RUNNING:
        if not cancellable:
            raise JobNotCancellable("the job is in a stage that cannot be cancelled")
        return Ending(status=Status.CANCEL_REQUESTED, kind=EventKind.CANCEL_REQUESTED)
    raise JobNotCancellable(f"a {current.value} job cannot be cancelled")


@dataclass(frozen=True, kw_only=True)
class Retried:
    """A FAILED job queued again by a person's Retry.

    Attributes:
        ending: QUEUED at once, recorded as RETRIED, with a fresh budget of max_attempts
            (its attempt_base: the attempts made no longer count, while numbers keep counting).
        detail: The RETRIED event's detail: who forced it and what the error was; None for
            an ordinary retry.
    """

    ending: Ending
    detail: str | None = None


def on_retry(
    current: Status, error: JobFailure | None, attempt: int, now: datetime, *, forced_by: str | None = None
) -> Retried:
    """May this job be retried, and what does it become.

    Args:
        current: The job's status; only FAILED may be retried.
        error: Its failure; only a retryable one may be retried, unless forced.
        attempt: Its attempt number now.
        now: The database clock.
        forced_by: The name of the admin forcing it (the caller's role was checked), or None.

    Raises:
        InvalidTransition: The job is not FAILED (reason NOT_RETRYABLE).
        NotRetryable: Its error is not retryable and nobody forced it.
    """
    if current is not Status.FAILED:
        raise InvalidTransition(f"a {current.value} job cannot be retried: only a FAILED one", reason="NOT_RETRYABLE")
    ending = Ending(status=Status.QUEUED, kind=EventKind.RETRIED, run_after=now, attempt_base=attempt)
    if forced_by is not None:
        was = "unknown" if error is None else error.category.value + ("" if not error.retryable else ", retryable")
        return Retried(ending=ending, detail=f"forced by admin {forced_by}: error was {was}")
    if error is None or not error.retryable:
        what = f"({error.category.value}) " if error is not None else ""
        raise NotRetryable(f"the job's error {what}is not retryable; {FORCE_HINT}")
    return Retried(ending=ending)


def on_resolve(current: Status, review: Review, attempts: Attempts, stage: str, now: datetime) -> Ending:
    """A reviewer decided on a WAITING job: APPROVE queues it at once with the attempt that
    asked for the review given back (as a Release), REJECT ends it FAILED with their note.

    Raises:
        NotWaiting: The job is not waiting for review.
    """
    if current is not Status.WAITING:
        raise NotWaiting(f"a {current.value} job is not waiting for review")
    if review.decision is Decision.APPROVE:
        return Ending(
            status=Status.QUEUED, kind=EventKind.REVIEW_APPROVED, run_after=now, attempt_base=attempts.base + 1
        )
    return Ending(status=Status.FAILED, kind=EventKind.REVIEW_REJECTED, error=rejection(review.note, stage))


def on_requeue(current: Status, holding: Holding, attempts: Attempts, now: datetime) -> Ending:
    """An operator's Requeue of a stalled RUNNING job: QUEUED at once, the attempt not charged.

    A lease that is still alive at `now` is refused: its worker would run on until its next
    heartbeat while another worker starts the job, so side effects would happen twice.

    Raises:
        InvalidTransition: The job is not RUNNING, or its lease is alive (reason LEASE_ACTIVE).
    """
    if current is not Status.RUNNING:
        raise InvalidTransition(f"a {current.value} job cannot be requeued")
    if alive(holding, now):
        raise InvalidTransition(
            "the job's lease is alive; cancel it or wait for the lease to expire", reason="LEASE_ACTIVE"
        )
    return Ending(status=Status.QUEUED, kind=EventKind.REQUEUED, run_after=now, attempt_base=attempts.base + 1)


def requeue_detail(by: str, reason: str) -> str | None:
    """What a requeue's event says: who decided (as a forced retry's does), then why."""
    said = [f"requeued by admin {by}" if by else "", reason]
    return ": ".join(part for part in said if part) or None
