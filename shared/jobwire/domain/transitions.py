"""What the metrics count of a job's life: each committed change that matters to an operator, as one `Move`.

The store hands these to its observer (jobwire.rpc.metrics) only once a transaction has
committed, so each move is counted exactly once whoever made it: a worker's call, a
user's, a sweep of housekeeping, or a dependency settled in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from jobwire.domain.evidence import EventKind
from jobwire.domain.states import Status


class Move(StrEnum):
    """A counted change; its value names the counter (jobwire_jobs_<value>_total)."""

    SUBMITTED = "submitted"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RETRIED = "retried"  # back to QUEUED for another attempt: a retryable failure, a revoked lease, a Retry, a Requeue
    LEASE_EXPIRED = "lease_expired"  # the reaper found a lease past its expiry and marked it stalled


@dataclass(frozen=True, slots=True)
class Transition:
    """One counted move of one job.

    Args:
        category: A failure's error category (FAILED only), else "".
        waited_s: The first claim only: seconds from submit to that claim.
        ran_s: An end from a leased status only: seconds from the first claim to the end.
    """

    move: Move
    queue: str
    job_type: str
    category: str = ""
    waited_s: float | None = None
    ran_s: float | None = None


_ENDS = {Status.READY: Move.COMPLETED, Status.FAILED: Move.FAILED, Status.CANCELLED: Move.CANCELLED}
_RETRIED_FROM = frozenset({Status.RUNNING, Status.FAILED})


def move_of(kind: EventKind, before: Status, after: Status) -> Move | None:
    """The counted move an event of `kind` from `before` to `after` is, None for one not counted.

    A worker's Release (RUNNING to QUEUED) is no retry: the worker gave the job back unrun.
    """
    if kind is EventKind.CLAIMED:
        return Move.CLAIMED
    if kind is EventKind.LEASE_EXPIRED:
        return Move.LEASE_EXPIRED
    if after is before:
        return None
    if after in _ENDS:
        return _ENDS[after]
    if after is Status.QUEUED and before in _RETRIED_FROM and kind is not EventKind.RELEASED:
        return Move.RETRIED
    return None
