"""A queue as the console's overview shows it: what it holds now, its limits, and its last minutes.

The store reads these (jobwire.db.queue_reads); AdminService.ListQueues only encodes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.flow import QueueLimits

DEFAULT_MINUTES = 60
MAX_MINUTES = 1440  # a day of minutes: 1,440 points a queue, a reply of a few hundred KiB at 200 queues
MAX_QUEUES = 200  # per reply, by name; one more is asked for by name


def window(minutes: int) -> int:
    """The activity window a request asks for, in minutes (0: the default hour)."""
    if not 0 <= minutes <= MAX_MINUTES:
        raise InvalidArgument("minutes", f"must be between 0 (the last {DEFAULT_MINUTES}) and {MAX_MINUTES}")
    return minutes or DEFAULT_MINUTES


def window_start(now: datetime, minutes: int) -> datetime:
    """The first minute of a window of `minutes` whole minutes whose last is the one running at `now`."""
    return now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)


@dataclass(frozen=True, kw_only=True)
class Minute:
    """One minute of a queue's activity, from its job rows (created_at, finished_at and status)."""

    start: datetime
    submitted: int = 0
    finished: int = 0  # ended READY in this minute
    failed: int = 0  # ended FAILED in this minute


@dataclass(frozen=True, kw_only=True)
class QueueSummary:
    queue: str
    queued: int = 0
    running: int = 0  # leased: RUNNING or CANCEL_REQUESTED
    waiting: int = 0  # WAITING for a person's review
    oldest_runnable_s: float | None = None  # since the longest-runnable job's run_after; None: none runnable
    limits: QueueLimits = field(default_factory=QueueLimits)
    minutes: Sequence[Minute] = field(default_factory=tuple)

    @property
    def finished(self) -> int:
        return sum(m.finished for m in self.minutes)

    @property
    def failed(self) -> int:
        return sum(m.failed for m in self.minutes)


@dataclass(frozen=True, kw_only=True)
class QueueOverview:
    queues: Sequence[QueueSummary]
    read_at: datetime  # the database clock of the read
    omitted: int = 0  # queues past MAX_QUEUES by name
