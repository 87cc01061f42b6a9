"""The uploads of leases that ended, removed just after the COMMIT that ended them.

Whatever ends a lease commits through the store: a worker's Fail, Release, ConfirmCancel,
AwaitReview or Complete, an operator's Requeue, the reaper's revocation, a timeout, a dead
session's expiry. The store tells this process's remover which leases each transaction
ended (`JobStore.leases_ended`), and their uploads go, all but the one a Complete named: so
the process that ended a lease removes its uploads, whichever it is (housekeeping's leader
for the reaper's), a moment after the COMMIT. What a crash loses between the two, or what
is past MAX_PENDING, waits for housekeeping's abandoned-upload sweep
(JOBWIRE_UPLOAD_TTL_SECONDS).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from jobwire.db.store import JobStore
from jobwire.domain.kept_results import EndedLease
from jobwire.runtime.result_store import ResultStore
from jobwire.runtime.rounds import Rounds

log = logging.getLogger(__name__)
# Ended leases waiting for their removal: a result store slower than the endings (a remote
# one under a burst) must not grow this process's memory without bound.
MAX_PENDING = 100_000


class LeaseUploads:
    """This process's remover of ended leases' uploads; the store tells it what ended."""

    def __init__(self, results: ResultStore) -> None:
        self.results = results
        self._pending: list[EndedLease] = []
        self._kicked = asyncio.Event()
        self._rounds = Rounds(log, "removing ended leases' uploads")
        self._overflowing = False

    def ended(self, leases: Sequence[EndedLease]) -> None:
        """Remove the uploads of `leases` soon (the store calls this after a COMMIT)."""
        room = MAX_PENDING - len(self._pending)
        if len(leases) > room and not self._overflowing:  # said once until the backlog is taken
            log.warning("%d ended leases wait for their uploads' removal: more are left to the sweep", MAX_PENDING)
            self._overflowing = True
        self._pending.extend(leases[:room])
        self._kicked.set()

    async def run(self) -> None:
        while True:
            await self._kicked.wait()
            self._kicked.clear()
            taken, self._pending, self._overflowing = self._pending, [], False
            with self._rounds.round():  # a failure leaves its uploads to the sweep
                removed = await self.results.blocking(self.results.remove_ended_now, taken)
                log.debug("results: %d files of %d ended leases removed", removed, len(taken))


def start(store: JobStore, results: ResultStore) -> asyncio.Task[None]:
    """The remover as a background task for its host to stop; the store tells it what ended."""
    remover = LeaseUploads(results)
    store.leases_ended = remover.ended
    return asyncio.get_running_loop().create_task(remover.run(), name="jobwire-lease-uploads")
