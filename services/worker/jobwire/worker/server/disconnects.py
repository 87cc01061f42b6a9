"""A worker's Session ended holding leases: its worker is taken for dead, after a short grace.

Today's other way to learn a worker died is its lease running out, then the stall grace
(one more lease, for a worker that was only paused), then the reaper's next round: a
worker killed -9 had its job run again 62-64 s later (a 30 s lease). A Session's end says
more than silence does: the stream broke, was cancelled or was closed with leases still
held. So, from the process that saw it end:

1. at once, each lease it held ends within JOBWIRE_SESSION_GRACE_SECONDS (3 s), with a
   WORKER_DISCONNECTED event (jobwire.db.disconnects.MarkDisconnected): a worker that only
   lost its connection names its tokens again from a new session (a Heartbeat, a report)
   and its leases run on; one that did so before this mark has its new session renew them
   when it hears of the mark (jobwire.worker.server.session_push);
2. at the grace's end (a timer here, not the reaper's next round), the reaper's own steps
   for those leases alone, with no stall grace: RETRY requeues (a new epoch, the old token
   refused), INSPECT is marked stalled, a pending cancel ends CANCELLED.

Silence is no such evidence. A worker stopped (SIGSTOP, a debugger) or hung answers no
keepalive ping, and the server closes its connection 20 s after its last word (as it does
a vanished host's): a session that heard nothing from its worker for that long when it
ended is left out, and its leases expire at their end and the stall grace, as before, so a
stopped worker that resumes in time keeps them. A server that stops marks nothing: its
sessions end, their workers do not. Should this process die between 1 and 2, the chore
leader's reaper handles the leases as any expired ones, from their shortened end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from jobwire.db.changes import JobOp
from jobwire.db.disconnects import Disconnected, MarkDisconnected, expire
from jobwire.db.reaper import apply_each
from jobwire.db.store import Call, Work
from jobwire.observe import logs
from jobwire.rpc.batching import Batcher
from jobwire.rpc.metrics import Metrics
from jobwire.worker.server.holdings import Held

log = logging.getLogger(__name__)
# After the grace: the store's clock must be past the lease's new end for the reaper's mark.
MARGIN_S = 0.1


class Disconnects:
    """Marks the leases of ended sessions, and handles them as expired at their grace's end."""

    def __init__(
        self,
        commits: Batcher[Work, Any],
        *,
        now: Callable[[], datetime],
        grace_s: float,
        metrics: Metrics,
        by: str,
    ) -> None:
        self._commits = commits
        self._now = now  # the store's clock
        self._grace = timedelta(seconds=grace_s)
        self._metrics = metrics
        self._by = by  # names this process in the evidence, as the reaper's does
        self._pending: set[asyncio.Task[None]] = set()
        self._stopping = False

    def ended(self, leases: Sequence[Held], why: str) -> None:
        """A session ended (`why`) holding `leases`."""
        if self._stopping or not leases:
            return
        task = asyncio.get_running_loop().create_task(self._take_for_dead(list(leases), why))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def stop(self) -> None:
        """The server stops: its sessions end, their workers do not. What waits for its grace
        is left to the reaper."""
        self._stopping = True
        for task in list(self._pending):
            task.cancel()

    async def _take_for_dead(self, leases: list[Held], why: str) -> None:
        try:
            marked = await self._mark(leases, why)
            if not marked:
                return
            log.info(
                "a worker session ended (%s) holding %s: each ends as an expired lease in %.1fs unless its worker"
                " names it again", why, _named(marked), self._grace.total_seconds(),
            )  # fmt: skip
            await asyncio.sleep(max(0.0, max((g.ends_at - self._now()).total_seconds() for g in marked)) + MARGIN_S)
            acted = await expire(self._run, marked, by=self._by)
            if acted:
                log.info("leases of an ended session expired (their worker did not come back): %s", _named(acted))
            self._metrics.disconnected("expired", len(acted))
            self._metrics.disconnected("untouched", len(marked) - len(acted))
        except Exception:  # whatever it was, the reaper handles them as any expired lease
            log.warning("disconnected session: %d lease(s) left to the reaper", len(leases), exc_info=True)

    async def _mark(self, leases: list[Held], why: str) -> list[Disconnected]:
        ops = [
            MarkDisconnected(tenant=held.tenant, job_no=held.job_no, token=held.token, heard_at=held.heard_at,
                             grace=self._grace, why=why)
            for held in leases
        ]  # fmt: skip
        marked = [m for m in await apply_each(self._run, ops) if isinstance(m, Disconnected)]
        self._metrics.disconnected("marked", len(marked))
        return marked

    async def _run(self, ops: Sequence[JobOp[Any]]) -> list[Any]:
        return list(await self._commits(Call(ops)))


def _named(leases: Sequence[Disconnected]) -> str:
    return logs.jobs_named([(g.tenant, g.job_no) for g in leases])
