"""Dependents settled after their dependency's transaction: a chunk per transaction, at once.

An ending settles at most `JobStore.chunk` of its waiting dependents in its own transaction
(jobwire.db.dependencies); the rest of a wide fan-out or a deep chain comes to this
process's `Settler` as `Pending` work, told by the store after the COMMIT. The settler
settles it one chunk per transaction, and between two chunks lets every other waiting
transaction go first: on SQLite a transaction holds the database, and the event loop, for
every tenant, so another tenant's Submit waits for one chunk, not for 50,000 dependents.
Work is taken in turns (what a chunk leaves goes to the back), so one storm does not hold up
another ending's few dependents.

The pending work lives in memory only: after a crash, housekeeping's `sweep` finds it again
from the database's own counts and settles it the same way, to the end within its round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from datetime import timedelta

from jobwire.db.dependencies import Pending
from jobwire.db.reaper import Read
from jobwire.db.store import JobStore
from jobwire.runtime.rounds import Rounds

log = logging.getLogger(__name__)
RETRY_S = 1.0  # after a failed chunk (the database is away): its work waits this long


async def drain(store: JobStore, queue: deque[Pending]) -> int:
    """Settle `queue` and all it leads to, one chunk per transaction; how many jobs changed.

    A chunk that fails stays at the head of `queue`.
    """
    changed = 0
    while queue:
        began = time.monotonic()
        done, left = await store.settle_dependents(queue[0])
        queue.popleft()
        queue.extend(left)
        changed += done
        # As long as the chunk took: a call that arrived meanwhile needs a few turns of the
        # event loop (and, for a Submit, two transactions) before it asks for the database,
        # and would find the next chunk holding it at each if the settler only yielded once.
        await asyncio.sleep(time.monotonic() - began)
    return changed


async def sweep(store: JobStore, read: Read, quiet: timedelta) -> int:
    """Housekeeping's: settle every dependent an ending left that nobody has settled for
    `quiet` (a crash lost its settler's work), looking again until nothing is due; how many
    jobs changed. Work a live settler is doing, in this process or another, is left to it."""
    changed = 0
    while due := await store.dependencies_due(read=read, quiet=quiet):
        done = await drain(store, deque(due))
        if not done:
            break  # another process settled them meanwhile: the next round looks again
        changed += done
    return changed


class Settler:
    """This process's settler: what its endings left of their dependents, settled at once."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._queue: deque[Pending] = deque()
        self._kicked = asyncio.Event()
        self._rounds = Rounds(log, "settling dependents")

    def kick(self, left: Sequence[Pending]) -> None:
        """Settle `left` (the store calls this after an ending's COMMIT)."""
        self._queue.extend(left)
        self._kicked.set()

    async def run(self) -> None:
        while True:
            await self._kicked.wait()
            self._kicked.clear()
            with self._rounds.round():
                changed = await drain(self.store, self._queue)
                log.debug("dependencies: %d waiting jobs settled after their dependency's transaction", changed)
            if self._queue:  # the round failed: its work is kept for the next try
                await asyncio.sleep(RETRY_S)
                self._kicked.set()


def start(store: JobStore) -> asyncio.Task[None]:
    """The settler as a background task for its host to stop; the store kicks it."""
    settler = Settler(store)
    store.unsettled = settler.kick
    return asyncio.get_running_loop().create_task(settler.run(), name="jobwire-settler")
