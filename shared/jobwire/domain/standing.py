"""Where a QUEUED job stands: what its line says that no version of it records.

Four facts, read when a job is read and never versioned: whether any worker serves its kind
(NO_WORKER, jobwire.domain.serving), whether its queue holds it back (paused or at a limit,
jobwire.domain.flow), the dependencies it still waits for, and its place in line: how many
jobs ahead of it a worker could claim now. `stand` puts them on a record. Every read that
shows a job and every stream message goes through it (jobwire.db.standing), so Get,
ListJobs and the watches tell one story about a job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jobwire.domain.flow import Held
from jobwire.domain.job import JobRecord
from jobwire.domain.states import Status


@dataclass(frozen=True, kw_only=True)
class QueueStanding:
    """What one tenant's queue tells its QUEUED jobs now."""

    # The job types a worker (the tenant's or a shared fleet's) claimed for lately.
    served: frozenset[str] = frozenset()
    held: Held | None = None  # why the queue leases nothing now, if it does not


@dataclass(frozen=True, kw_only=True)
class Standing:
    """One QUEUED job's facts as read."""

    queue: QueueStanding
    waiting_for: tuple[str, ...] = ()  # its dependencies not READY yet
    queue_position: int | None = None  # None: not read (a stream message after the first)


def stand(job: JobRecord, standing: Standing) -> JobRecord:
    """`job` telling where it stands, when QUEUED; a job of any other status stands nowhere."""
    if job.status is not Status.QUEUED:
        return job
    waiting = bool(standing.waiting_for)
    return replace(
        job,
        waiting_for=standing.waiting_for,
        no_worker=job.job_type not in standing.queue.served,
        # Not in line until its dependencies are READY: neither a place nor its queue's hold applies yet.
        held=None if waiting else standing.queue.held,
        queue_position=None if waiting else standing.queue_position,
    )
