"""What the database holds now, for the gauges: jobs by tenant, queue and status, the runnable ones, the
ones no worker serves (NO_WORKER), live workers.

Housekeeping reads one `Census` per round (jobwire.db.reads.census) and the metrics show
the latest (jobwire.rpc.metrics): a scrape never asks the database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jobwire.domain.commands import EVERY_TENANT


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCount:
    """The jobs of one tenant, queue and status (and job type, for QUEUED ones).

    Args:
        job_type: For QUEUED jobs, their job type (whether a worker serves it is NO_WORKER);
            "" for any other status.
        runnable: Of them, those a claim could take now: QUEUED, past their run_after,
            waiting for no dependency (0 for any other status).
        oldest_runnable_s: How long the longest-runnable of those has been runnable
            (since its run_after), None when none is.
    """

    tenant: str
    queue: str
    status: str
    jobs: int
    runnable: int = 0
    oldest_runnable_s: float | None = None
    job_type: str = ""


@dataclass(frozen=True, kw_only=True)
class Census:
    counts: Sequence[JobCount]
    live_workers: Mapping[str, int]  # by tenant: workers seen within the NO_WORKER window
    # (tenant, queue, job type) a worker claimed for within that window; tenant "*": a shared fleet
    served: frozenset[tuple[str, str, str]] = field(default_factory=frozenset)

    def unserved(self, count: JobCount) -> int:
        """How many of `count`'s jobs are QUEUED for a kind no worker serves (jobwire.domain.serving)."""
        if count.status != "QUEUED":
            return 0
        own, shared = (count.tenant, count.queue, count.job_type), (EVERY_TENANT, count.queue, count.job_type)
        return 0 if own in self.served or shared in self.served else count.jobs
