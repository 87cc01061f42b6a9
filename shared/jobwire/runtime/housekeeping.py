"""Housekeeping that every server process runs: the lease reaper, the timeout and dependency sweeps, then retention.

Every `JOBWIRE_REAPER_INTERVAL_SECONDS` (jittered, so replicas do not tick in step) the
reaper marks expired leases stalled and applies the lease-lost policies past
`JOBWIRE_STALL_GRACE_SECONDS`; the timeout sweeps end jobs and attempts past their time
limits and find jobs without progress; the dependency sweep settles waiting jobs whose
dependencies ended without settling them (a crash lost the settler's work:
jobwire.runtime.settling), to the end of a chain; then retention purges terminal jobs past their time,
workers not seen (and queues and job types not claimed for) in
`JOBWIRE_RETENTION_WORKER_DAYS`, and old commit markers
(jobwire.db.commit_markers). Last, one reading of the database for the metrics' gauges
(`JobStore.census`: one GROUP BY), so they are as fresh as a round and a scrape never
queries. All run on the runtime's database thread pool. Every
action is a guarded UPDATE or DELETE, so any number of replicas may do this at once. A
database outage is logged and waited out: the loop never dies of an error. An interval of
0 turns housekeeping off.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from sqlalchemy.engine import Connection

from jobwire.db.retention import ArtifactDeleter, Retention, keep_files
from jobwire.db.store import JobStore
from jobwire.rpc.job_metrics import JobMetrics
from jobwire.runtime import settling
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.result_store import ResultStore
from jobwire.runtime.rounds import Rounds
from jobwire.runtime.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
UPLOAD_SWEEP_S = 600.0


def reaper_id() -> str:
    """Names this process in the evidence its reaper writes."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


def load_deleter(spec: str) -> ArtifactDeleter:
    """The artifact deleter named "module:function" (JOBWIRE_ARTIFACT_DELETER); none keeps files."""
    if not spec:
        return keep_files
    module, _, name = spec.partition(":")
    target = getattr(importlib.import_module(module), name or "delete", None)
    if not callable(target):
        raise ValueError(f"JOBWIRE_ARTIFACT_DELETER={spec!r} does not name a function")
    return target  # type: ignore[no-any-return]


class Housekeeping:
    """The reaper, timeout and retention loop of one server process."""

    def __init__(
        self,
        store: JobStore,
        blocking: Blocking,
        settings: Settings,
        *,
        deleter: ArtifactDeleter,
        metrics: JobMetrics,
        results: ResultStore | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.live_after = timedelta(seconds=settings.no_worker_after_seconds)
        self.blocking = blocking
        self.interval = settings.reaper_interval_seconds
        self.grace = timedelta(seconds=settings.stall_grace)
        self.retention = Retention.days(
            ready=settings.retention_ready_days,
            cancelled=settings.retention_cancelled_days,
            failed=settings.retention_failed_days,
        )
        self.results = results
        self.deleter = results.deleter(deleter) if results is not None else deleter
        self.upload_ttl = settings.upload_ttl_seconds
        # Listing the result store costs more than a round's queries: at most this often.
        self.upload_sweep_every = min(UPLOAD_SWEEP_S, self.upload_ttl)
        self._next_upload_sweep = 0.0
        self.forget_workers_after = timedelta(days=settings.retention_worker_days)
        self.by = reaper_id()
        self.rounds = Rounds(log, "housekeeping")

    async def run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(self.interval * random.uniform(0.8, 1.2))

    async def _read(self, query: Callable[[Connection], T]) -> T:
        return await self.blocking(self.store.db.read, query)

    async def tick(self) -> None:
        """One round: reap, sweep timeouts, then purge. Errors are logged; the next round tries again."""
        with self.rounds.round():
            reaped = await self.store.reap_leases(self.grace, by=self.by, read=self._read)
            swept = await self.store.sweep_timeouts(by=self.by, read=self._read)
            settled = await settling.sweep(self.store, self._read, quiet=timedelta(seconds=self.interval))
            purged = await self.blocking(self.store.purge_expired, self.retention, self.deleter)
            await self.blocking(self.store.purge_workers, self.forget_workers_after)
            await self.blocking(self.store.purge_commit_markers)
            abandoned = await self.blocking(self.remove_abandoned_uploads)
            self.metrics.census(await self.blocking(self.store.census, self.live_after))
            if reaped:
                log.info("reaper: %s", reaped)
            if swept:
                log.info("timeouts: %s", swept)
            if settled:
                log.info("dependencies: %d waiting jobs settled", settled)
            if purged.jobs or purged.kept:
                log.info("retention: %s", purged)
            if abandoned:
                log.info("results: %d uploads no Complete named removed", abandoned)

    def remove_abandoned_uploads(self) -> int:
        """Uploads older than JOBWIRE_UPLOAD_TTL_SECONDS that no artifact names (blocking)."""
        now = time.monotonic()
        if self.results is None or now < self._next_upload_sweep:
            return 0
        self._next_upload_sweep = now + self.upload_sweep_every
        stale = self.results.stale_keys(self.upload_ttl)
        kept = self.store.stored_keys(stale)
        for key in stale:
            if key not in kept:
                self.results.remove_now(key)
        return len(stale) - len(kept)


def start(
    store: JobStore, blocking: Blocking, settings: Settings, metrics: JobMetrics, results: ResultStore | None = None
) -> asyncio.Task[None] | None:
    """Housekeeping as a background task for its host to stop; None when the interval is 0."""
    if settings.reaper_interval_seconds <= 0:
        return None
    keeper = Housekeeping(
        store, blocking, settings, deleter=load_deleter(settings.artifact_deleter), metrics=metrics, results=results
    )
    return asyncio.get_running_loop().create_task(keeper.run(), name="jobwire-housekeeping")
