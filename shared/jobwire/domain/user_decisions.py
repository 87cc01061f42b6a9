"""What a person's request does to a job, decided on values; the store writes the answer.

The store's op for a user action reads the job's row into these values, asks here, and
writes what comes back through the transition table (jobwire.db.changes). A refusal is a
JobwireError whose words say what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobwire.domain.endings import Ending
from jobwire.domain.errors import InvalidTransition, NotRetryable
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import JobFailure
from jobwire.domain.states import Status

FORCE_HINT = "an admin may force a retry (jobctl retry --force)"


@dataclass(frozen=True, kw_only=True)
class Retried:
    """A FAILED job queued again by a person's Retry.

    Attributes:
        ending: QUEUED at once, recorded as RETRIED.
        attempt_base: The attempts that no longer count: a Retry grants a fresh budget of
            max_attempts, while attempt numbers keep counting.
        detail: The RETRIED event's detail: who forced it and what the error was; None for
            an ordinary retry.
    """

    ending: Ending
    attempt_base: int
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
    ending = Ending(status=Status.QUEUED, kind=EventKind.RETRIED, run_after=now)
    if forced_by is not None:
        was = "unknown" if error is None else error.category.value + ("" if not error.retryable else ", retryable")
        return Retried(ending=ending, attempt_base=attempt, detail=f"forced by admin {forced_by}: error was {was}")
    if error is None or not error.retryable:
        what = f"({error.category.value}) " if error is not None else ""
        raise NotRetryable(f"the job's error {what}is not retryable; {FORCE_HINT}")
    return Retried(ending=ending, attempt_base=attempt)
