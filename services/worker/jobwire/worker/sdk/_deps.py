"""What every job runner of one worker shares (jobwire.worker.sdk._runner, _finisher)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from jobwire.worker.sdk._context import JobContext
from jobwire.worker.sdk._handlers import SyncHandler
from jobwire.worker.sdk._lease_keeper import LeaseKeeper
from jobwire.worker.sdk._reporter import ReportSender
from jobwire.worker.sdk._result import ResultStore
from jobwire.worker.sdk._rpc import WorkerStub


@dataclass(frozen=True, kw_only=True)
class RunnerDeps:
    """What every job runner of one worker shares; built once by the Worker."""

    stub: WorkerStub
    keeper: LeaseKeeper
    store: ResultStore | None  # None: the server keeps results (the default); else this worker publishes them
    tmp_root: Path | None
    run_sync: Callable[[SyncHandler, JobContext], Awaitable[object]]
    give_up_at: Callable[[], float | None]
    reports: ReportSender  # every job's progress, in one call per worker and interval
    claims_stopped: asyncio.Event  # set once no Claim is in flight any more, for good
