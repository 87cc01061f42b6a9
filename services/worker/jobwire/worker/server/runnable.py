"""Wake-ups for waiting claims from every process: a job became QUEUED somewhere.

Without this, a Claim learns of work submitted through another process (another jobapi
replica, the split deployment) only by polling, and database load grows with the number
of idle workers, which DESIGN §8 rules out. The process's event tail (jobwire.runtime.tail)
hands this watcher every event; for each job that became QUEUED it wakes a waiting claim
of this process that can take it (jobwire.runtime.wakeup): at once if the job is runnable, or
when its run_after comes (a retry's backoff, a submit for later), timed by the database
clock. So waiting claims poll nobody; the claim loop keeps only a slow safety poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from jobwire.db.feed import FeedRow
from jobwire.domain.states import LEASED, Status
from jobwire.runtime.tail import EventTail
from jobwire.runtime.wakeup import Wakeup

log = logging.getLogger(__name__)
MARGIN_S = 0.005  # wake a claim this long after run_after has passed on the database clock


class RunnableWatcher:
    def __init__(self, tail: EventTail, wakeup: Wakeup, now: Callable[[], datetime]) -> None:
        self._wakeup = wakeup
        self._now = now  # the database clock, never ahead of it (jobwire.db.clock)
        tail.subscribe(self.notify, listening=lambda: wakeup.waiting)
        wakeup.on_first_waiter = tail.wake

    def notify(self, rows: Sequence[FeedRow], seq: int) -> None:
        for row in rows:
            if row.to_status == Status.QUEUED:  # the snapshot (for queue and time) only for the few that are
                self._queued(row)
            if row.to_status not in LEASED and self._wakeup.holds(row.tenant):
                self._room(row)  # perhaps a job left its lease in a limited queue: one held claim may take its place

    def _room(self, row: FeedRow) -> None:
        try:
            queue = row.record.queue
        except (ValueError, KeyError, TypeError):
            log.warning("runnable-work watcher: cannot read event %d", row.id)
            return
        self._wakeup.notify_held(row.tenant, queue, every=False)

    def _queued(self, row: FeedRow) -> None:
        try:
            job = row.record  # decoded once for every subscriber of the tail
            queue, job_type, run_after = job.queue, job.job_type, job.run_after
        except (ValueError, KeyError, TypeError):
            log.warning("runnable-work watcher: cannot read event %d", row.id)
            return
        # Every process reads the tail itself: no need to relay what it read.
        wait = (run_after - self._now()).total_seconds() if run_after else 0.0
        if wait <= 0:
            self._wakeup.notify(row.tenant, queue, job_type, relay=False)
        else:
            asyncio.get_running_loop().call_later(
                wait + MARGIN_S, lambda: self._wakeup.notify(row.tenant, queue, job_type, relay=False)
            )
