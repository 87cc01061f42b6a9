"""Jobs that wait for other jobs, decided on values: what a new job waits for, and what a
waiting job becomes when one of its dependencies ends.

A job waits while any dependency is not READY; one that ended FAILED or CANCELLED means it
can never run: a new job naming it is refused, a waiting one is cancelled with it. The
store counts and locks (jobwire.db.dependencies) and writes what is decided here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobwire.domain.errors import DependencyEnded, InvalidArgument
from jobwire.domain.evidence import EventKind
from jobwire.domain.states import Status

ENDED = frozenset({Status.FAILED, Status.CANCELLED})


def waiting_on(dependencies: Sequence[tuple[str, Status | None]]) -> int:
    """How many of a new job's dependencies it must wait for, each given as (job number, its
    status, None when the submitting tenant has no job of that number), in the order named.

    Raises:
        InvalidArgument: A number names no job of the tenant (numbers are per tenant: another
            tenant's job of that number is not this one's to name).
        DependencyEnded: One ended FAILED or CANCELLED: the new job could never run.
    """
    for job_no, status in dependencies:
        if status is None:
            raise InvalidArgument("depends_on", f"{job_no} is not a job of yours")
        if status in ENDED:
            raise DependencyEnded(job_no, status.value)
    return sum(status is not Status.READY for _, status in dependencies)


@dataclass(frozen=True, kw_only=True)
class Settled:
    """A waiting job after a dependency ended: still QUEUED waiting on fewer, or CANCELLED with it."""

    status: Status
    kind: EventKind  # DEPENDENCY_READY or DEPENDENCY_FAILED
    waiting_on: int
    detail: str


def on_dependency_ended(
    current: Status, waiting_on: int, unfinished: int, ended_by: tuple[str, Status] | None
) -> Settled | None:
    """What a QUEUED job waiting on `waiting_on` dependencies becomes, counted again now.

    Args:
        current: The job's status; only a QUEUED one still waiting is settled.
        waiting_on: The dependencies it was waiting for.
        unfinished: Those not READY now.
        ended_by: A dependency that ended FAILED or CANCELLED (its number and status), if any.

    Returns:
        None when nothing changes: it no longer waits, or no wait ended since it was counted.
    """
    if current is not Status.QUEUED or not waiting_on:
        return None
    if ended_by is not None:
        job_no, status = ended_by
        why = f"dependency {job_no} ended {status.value}; cancelled with it"
        return Settled(status=Status.CANCELLED, kind=EventKind.DEPENDENCY_FAILED, waiting_on=0, detail=why)
    if unfinished >= waiting_on:
        return None
    why = (
        f"{waiting_on - unfinished} more READY; waiting for {unfinished}"
        if unfinished
        else ("every dependency is READY; runnable")
    )
    return Settled(status=Status.QUEUED, kind=EventKind.DEPENDENCY_READY, waiting_on=unfinished, detail=why)
