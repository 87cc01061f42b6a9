"""One serving process of all replicas runs a set of chores: the holder of its lease row.

Housekeeping and the schedule loop read the database every few seconds whether or not
there is work; run by every process of every replica, N replicas paid N times for it.
Each is now the duty of one `Leadership`: the process that holds the lease of its name
in the database (jobwire.db.chore_leases) runs it, every other process only stands by.

- The holder renews every third of `JOBWIRE_CHORE_LEASE_SECONDS`, one UPDATE fenced by
  its holder id. A renewal refused (another holds the lease), failed (the database did not
  answer) or not done in time (by this process's monotonic clock, counted from before it
  asked, so never later than the lease's end) stops the duty at once.
- A candidate that does not hold it reads who does and until when (one SELECT), and asks
  again at that end, or after a third of the lease if sooner (a holder that resigned
  leaves the row free at once). So a holder killed without a word is replaced within one
  lease, and an idle standby costs the database one statement per third of a lease.
- A clean stop ends the duty, then deletes the row (resigns): the next candidate to ask
  takes over without waiting out the lease.

Leadership is about cost, not safety: every chore is guarded UPDATEs and DELETEs that any
number of processes may run at once, so the moment two overlap at a handover (a holder
paused past its lease, then resumed) is harmless.

The gauge `jobwire_chore_leader{chores=...}` is 1 in the process that runs them, and each
gain and loss is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from jobwire.db.chore_leases import Term
from jobwire.db.store import JobStore
from jobwire.domain.errors import StoreUnavailable
from jobwire.rpc.metrics import Metrics
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.rounds import Rounds

log = logging.getLogger(__name__)
RENEWALS_PER_LEASE = 3  # a holder renews (and a standby asks) every third of the lease
WAKE_MARGIN_S = 0.01  # a sleep may end a clock tick early: ask just after the lease's end, not at it
Duty = Callable[[], Coroutine[Any, Any, None]]


def process_name() -> str:
    """Names this process: host, pid and a token, so two servers of one test process differ,
    and so do two containers of one pod (one hostname, each its own pid 1)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Leadership:
    """Runs `duty` while this process holds the lease `name` of all replicas."""

    def __init__(
        self, name: str, duty: Duty, *, store: JobStore, blocking: Blocking, metrics: Metrics, lease_s: float
    ) -> None:
        self.name = name
        self.duty = duty
        self.store = store
        self.blocking = blocking
        self.metrics = metrics
        self.holder = process_name()
        self.lease_s = lease_s
        self.ask_every_s = lease_s / RENEWALS_PER_LEASE
        self.rounds = Rounds(log, f"chore leader ({name})")
        self._running: asyncio.Task[None] | None = None  # the duty, while this process holds the lease
        self._holds_until = 0.0  # monotonic time by which the lease must be renewed

    @property
    def leading(self) -> bool:
        return self._running is not None

    async def run(self) -> None:
        """Stand for the lease until cancelled; then end the duty and resign."""
        self.metrics.chore_leader(self.name, leading=False)
        try:
            while True:
                await asyncio.sleep(await self.campaign())
        finally:
            if self.leading:
                await self._step_down("this process is stopping")
                await self._resign()

    async def campaign(self) -> float:
        """One attempt: keep, win or learn who holds the lease; start or stop the duty by it.
        The seconds until the next attempt."""
        asked_at = time.monotonic()
        term: Term | None = None
        with self.rounds.round():
            term = await self._elect()
        if term is not None and term.holder == self.holder:
            self._holds_until = asked_at + self.lease_s
            if not self.leading:
                self._take_up()
            return self.ask_every_s
        if self.leading:
            await self._step_down("the lease went to another process" if term else "the lease could not be renewed")
        if term is None:
            return self.ask_every_s
        ends_in = (term.expires_at - term.now).total_seconds()
        return min(self.ask_every_s, max(ends_in, 0.0) + WAKE_MARGIN_S)

    async def _elect(self) -> Term:
        ask = self.blocking(
            self.store.elect_chore_leader, self.name, self.holder, timedelta(seconds=self.lease_s), holding=self.leading
        )
        if not self.leading:
            return await ask
        # Past the lease's end another may hold it: give up asking by then. asyncio.timeout, not
        # wait_for: Python 3.11's wait_for can swallow a stop's cancellation that comes as the
        # answer does, and the loop would campaign (and run the chores) on after its stop.
        try:
            async with asyncio.timeout(max(self._holds_until - time.monotonic(), 0.0)):
                return await ask
        except TimeoutError:
            raise StoreUnavailable() from None  # the database did not answer within the lease

    def _take_up(self) -> None:
        self._running = asyncio.get_running_loop().create_task(self.duty(), name=f"jobwire-{self.name}")
        self.metrics.chore_leader(self.name, leading=True)
        log.info("chore leader: this process now runs %s for all replicas (%s)", self.name, self.holder)

    async def _step_down(self, why: str) -> None:
        running, self._running = self._running, None
        assert running is not None
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        self.metrics.chore_leader(self.name, leading=False)
        log.info("chore leader: this process no longer runs %s: %s", self.name, why)

    async def _resign(self) -> None:
        """Free the lease for the next candidate; if the database does not answer, it ends on its own."""
        with contextlib.suppress(Exception):
            await self.blocking(self.store.resign_chore_leader, self.name, self.holder)


def lead(
    name: str, duty: Duty, *, store: JobStore, blocking: Blocking, metrics: Metrics, lease_s: float
) -> asyncio.Task[None]:
    """Stand for the lease `name` as a background task for the host to stop (which resigns it)."""
    leadership = Leadership(name, duty, store=store, blocking=blocking, metrics=metrics, lease_s=lease_s)
    return asyncio.get_running_loop().create_task(leadership.run(), name=f"jobwire-{name}-leadership")
