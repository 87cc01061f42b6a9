"""Use cases behind WorkerService: long-polling claims, reports, endings, wake-ups."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import datetime

from jobwire.db.leases import Claimant, Failure
from jobwire.db.store import JobStore
from jobwire.db.writes import Row
from jobwire.domain.job import Artifact, JobRecord
from jobwire.domain.states import Status
from jobwire.rpc.blocking import Blocking
from jobwire.rpc.wakeup import Wakeup

log = logging.getLogger(__name__)

# Waiting claims are woken by submits in this process (Wakeup) and by the runnable-work
# watcher for every other process; this slow poll only catches retries whose backoff
# ends while a claim waits.
POLL_INTERVAL_S = 5.0
# ListWorkers needs "last seen", not every poll: one write per worker this often.
SEEN_EVERY_S = 5.0


class Leasing:
    def __init__(self, store: JobStore, blocking: Blocking, wakeup: Wakeup) -> None:
        self.store = store
        self.blocking = blocking
        self.wakeup = wakeup
        self._seen: dict[tuple[str, str], float] = {}
        self._handing_back: set[asyncio.Future[JobRecord]] = set()

    async def claim(self, who: Claimant, max_jobs: int, wait_s: float) -> list[Row]:
        """Leases for up to `max_jobs` jobs, waiting up to `wait_s` for the first."""
        deadline = time.monotonic() + wait_s
        while True:
            rows = await self._claim_once(who, max_jobs)
            remaining = deadline - time.monotonic()
            if rows or remaining <= 0:
                return rows
            await self.wakeup.wait(who.tenant, who.queues, min(remaining, POLL_INTERVAL_S))

    async def _claim_once(self, who: Claimant, max_jobs: int) -> list[Row]:
        attempt = asyncio.ensure_future(self.blocking(self.store.claim, who, max_jobs, self._note_seen(who)))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            # The caller left (deadline, disconnect, shutdown) while its claim runs on a
            # database thread and may still commit: hand those leases back, or the jobs
            # would wait, stalled, for a worker that never heard of them.
            attempt.add_done_callback(self._hand_back)
            raise

    def _hand_back(self, attempt: asyncio.Future[list[Row]]) -> None:
        if attempt.cancelled() or attempt.exception() is not None:
            return
        for row in attempt.result():
            release = asyncio.ensure_future(
                self.blocking(
                    self.store.release, row["tenant"], row["job_no"], row["worker_token"], None,
                    "claim not delivered: the caller left",
                )
            )  # fmt: skip
            self._handing_back.add(release)
            release.add_done_callback(self._handed_back)

    def _handed_back(self, release: asyncio.Future[JobRecord]) -> None:
        self._handing_back.discard(release)
        if not release.cancelled() and release.exception() is not None:
            log.warning("could not hand back an undelivered lease", exc_info=release.exception())

    def _note_seen(self, who: Claimant) -> bool:
        key, now = (who.tenant, who.worker_id), time.monotonic()
        if now - self._seen.get(key, -SEEN_EVERY_S) < SEEN_EVERY_S:
            return False
        self._seen[key] = now
        return True

    async def heartbeat(
        self, tenant: str, worker_id: str, held: Sequence[tuple[str, str]]
    ) -> list[tuple[str, str, datetime | None]]:
        return await self.blocking(self.store.heartbeat, tenant, worker_id, held)

    async def report(self, tenant: str, job_no: str, token: str, **fields: object) -> Row:
        return await self.blocking(self.store.report, tenant, job_no, token, **fields)

    async def complete(self, tenant: str, job_no: str, token: str, result: Artifact) -> JobRecord:
        return await self.blocking(self.store.complete, tenant, job_no, token, result)

    async def fail(self, tenant: str, job_no: str, token: str, failure: Failure) -> JobRecord:
        return self._requeued(await self.blocking(self.store.fail, tenant, job_no, token, failure))

    async def confirm_cancel(self, tenant: str, job_no: str, token: str, note: str) -> JobRecord:
        return await self.blocking(self.store.confirm_cancel, tenant, job_no, token, note)

    async def release(self, tenant: str, job_no: str, token: str, checkpoint: bytes | None, note: str) -> JobRecord:
        return self._requeued(await self.blocking(self.store.release, tenant, job_no, token, checkpoint, note))

    def _requeued(self, job: JobRecord) -> JobRecord:
        if job.status is Status.QUEUED:
            # A retry with a backoff is not runnable yet; the poll finds it when it is.
            asyncio.get_running_loop().call_soon(self.wakeup.notify, job.tenant, job.queue)
        return job
