"""What the database holds now, for the gauges: jobs by tenant, queue and status, the runnable ones, live workers.

Housekeeping reads one `Census` per round (jobwire.db.reads.census) and the metrics show
the latest (jobwire.rpc.metrics): a scrape never asks the database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCount:
    """The jobs of one tenant, queue and status.

    Args:
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


@dataclass(frozen=True, kw_only=True)
class Census:
    counts: Sequence[JobCount]
    live_workers: Mapping[str, int]  # by tenant: workers seen within the NO_WORKER window
