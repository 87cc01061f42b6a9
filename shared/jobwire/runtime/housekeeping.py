"""Housekeeping: the lease reaper, the timeout and dependency sweeps, retention, the census.

One serving process of all replicas runs it: the chore leader (jobwire.runtime.leadership,
lease `housekeeping`). Each chore keeps its own rhythm, every
`JOBWIRE_REAPER_INTERVAL_SECONDS` unless said otherwise:

- the reaper marks expired leases stalled and applies the lease-lost policies past
  `JOBWIRE_STALL_GRACE_SECONDS`;
- the timeout sweeps end jobs and attempts past their time limits and find jobs without
  progress;
- the dependency sweep settles waiting jobs whose dependencies ended without settling them
  (a crash lost the settler's work: jobwire.runtime.settling), to the end of a chain;
- retention purges terminal jobs past their time, workers not seen (and queues and job
  types not claimed for) in `JOBWIRE_RETENTION_WORKER_DAYS`, and old commit markers
  (jobwire.db.commit_markers);
- uploads no Complete named are removed past `JOBWIRE_UPLOAD_TTL_SECONDS`, looked for at
  most every 10 minutes (listing the result store costs more than the rest);
- the census reads the database for the metrics' gauges (`JobStore.census`: one GROUP BY),
  so a scrape never queries. A process that stops running housekeeping shows 0 in them:
  summed over replicas, they are the leader's.

The reaper's and the sweeps' changes go through the store's writer on the event loop, as
every call's do; their reads, retention and the upload sweep run on the database thread
pool. Every action is a guarded UPDATE or DELETE,
so a moment of two processes at it (a handover) is harmless. A database outage is logged
and waited out: a chore never dies of an error. An interval of 0 turns housekeeping off.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from sqlalchemy.engine import Connection

from jobwire.db.retention import ArtifactDeleter, Retention, keep_files
from jobwire.db.store import JobStore
from jobwire.domain.census import Census
from jobwire.rpc.job_metrics import JobMetrics
from jobwire.runtime import settling
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.leadership import process_name
from jobwire.runtime.result_store import ResultStore
from jobwire.runtime.rounds import Rounds
from jobwire.runtime.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
UPLOAD_SWEEP_S = 600.0
NO_CENSUS = Census(counts=(), live_workers={})


@dataclass(frozen=True)
class Chore:
    """One of housekeeping's jobs, and the seconds between its rounds."""

    name: str
    every_s: float
    round: Callable[[], Awaitable[None]]


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
    """The reaper, timeout, dependency, retention and census chores of the process that keeps house."""

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
        self.forget_workers_after = timedelta(days=settings.retention_worker_days)
        self.by = process_name()  # in the evidence the reaper and the sweeps write
        self.rounds = Rounds(log, "housekeeping")  # one for all chores: an outage is logged once
        every = self.interval
        self.chores: Sequence[Chore] = (
            Chore("reaper", every, self.reap),
            Chore("timeouts", every, self.sweep_timeouts),
            Chore("dependencies", every, self.settle_dependencies),
            Chore("retention", every, self.purge),
            Chore("uploads", min(UPLOAD_SWEEP_S, self.upload_ttl), self.remove_abandoned_uploads),
            Chore("census", every, self.census),
        )

    async def run(self) -> None:
        """Every chore on its own rhythm until cancelled (this process no longer keeps house)."""
        try:
            async with asyncio.TaskGroup() as chores:
                for chore in self.chores:
                    chores.create_task(self._repeat(chore), name=f"jobwire-housekeeping-{chore.name}")
        finally:
            self.metrics.census(NO_CENSUS)  # the readings are the next leader's to show

    async def _repeat(self, chore: Chore) -> None:
        while True:
            with self.rounds.round():
                await chore.round()
            await asyncio.sleep(chore.every_s)

    async def tick(self) -> None:
        """One round of every chore now, in order (a test's round). Errors are logged."""
        with self.rounds.round():
            for chore in self.chores:
                await chore.round()

    async def _read(self, query: Callable[[Connection], T]) -> T:
        return await self.blocking(self.store.db.read, query)

    async def reap(self) -> None:
        reaped = await self.store.reap_leases(self.grace, by=self.by, read=self._read)
        if reaped:
            log.info("reaper: %s", reaped)

    async def sweep_timeouts(self) -> None:
        swept = await self.store.sweep_timeouts(by=self.by, read=self._read)
        if swept:
            log.info("timeouts: %s", swept)

    async def settle_dependencies(self) -> None:
        settled = await settling.sweep(self.store, self._read, quiet=timedelta(seconds=self.interval))
        if settled:
            log.info("dependencies: %d waiting jobs settled", settled)

    async def purge(self) -> None:
        purged = await self.blocking(self.store.purge_expired, self.retention, self.deleter)
        await self.blocking(self.store.purge_workers, self.forget_workers_after)
        await self.blocking(self.store.purge_commit_markers)
        if purged.jobs or purged.kept:
            log.info("retention: %s", purged)

    async def remove_abandoned_uploads(self) -> None:
        abandoned = await self.blocking(self._remove_abandoned_uploads)
        if abandoned:
            log.info("results: %d uploads no Complete named removed", abandoned)

    def _remove_abandoned_uploads(self) -> int:
        """Uploads older than JOBWIRE_UPLOAD_TTL_SECONDS that no artifact names (blocking)."""
        if self.results is None:
            return 0
        stale = self.results.stale_keys(self.upload_ttl)
        kept = self.store.stored_keys(stale)
        for key in stale:
            if key not in kept:
                self.results.remove_now(key)
        return len(stale) - len(kept)

    async def census(self) -> None:
        self.metrics.census(await self.blocking(self.store.census, self.live_after))


def keeper(
    store: JobStore, blocking: Blocking, settings: Settings, metrics: JobMetrics, results: ResultStore | None = None
) -> Housekeeping | None:
    """Housekeeping for the chore leader to run; None when the interval is 0."""
    if settings.reaper_interval_seconds <= 0:
        return None
    return Housekeeping(
        store, blocking, settings, deleter=load_deleter(settings.artifact_deleter), metrics=metrics, results=results
    )
