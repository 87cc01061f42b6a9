"""Use cases behind JobService and AdminService: permission checks, store calls, wake-ups."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jobwire.db import reads
from jobwire.db.inspect import FindingKind
from jobwire.db.store import JobStore
from jobwire.db.submit import NewJob
from jobwire.db.writes import Row
from jobwire.domain.job import JobRecord
from jobwire.domain.states import Status
from jobwire.rpc.auth import Principal
from jobwire.rpc.blocking import Blocking
from jobwire.rpc.wakeup import Wakeup


class Jobs:
    def __init__(self, store: JobStore, blocking: Blocking, wakeup: Wakeup) -> None:
        self.store = store
        self.blocking = blocking
        self.wakeup = wakeup

    async def submit(self, who: Principal, new: NewJob) -> tuple[JobRecord, bool]:
        who.check_queue(new.queue)
        job, created = await self.blocking(self.store.submit, new)
        if created:
            self.wakeup.notify(new.tenant, new.queue)
        return job, created

    async def get(self, who: Principal, job_no: str) -> JobRecord:
        return await self.blocking(self.store.get, who.tenant, job_no)

    async def cancel(self, who: Principal, job_no: str) -> JobRecord:
        return await self.blocking(self.store.cancel, who.tenant, job_no)

    async def retry(self, who: Principal, job_no: str) -> JobRecord:
        job = await self.blocking(self.store.retry, who.tenant, job_no)
        if job.status is Status.QUEUED:
            self.wakeup.notify(who.tenant, job.queue)
        return job

    async def list_jobs(self, where: reads.JobFilter, page_size: int, page_token: str) -> tuple[list[JobRecord], str]:
        return await self.blocking(self.store.list_jobs, where, page_size, page_token)

    async def requeue(self, who: Principal, job_no: str, reason: str) -> JobRecord:
        job = await self.blocking(self.store.requeue, who.tenant, job_no, reason)
        self.wakeup.notify(who.tenant, job.queue)
        return job

    async def list_events(self, who: Principal, job_no: str, page_size: int, page_token: str) -> tuple[list[Row], str]:
        return await self.blocking(self.store.list_events, who.tenant, job_no, page_size, page_token)

    async def inspect(
        self, who: Principal, stalled_after: timedelta, queue: str, kinds: list[FindingKind]
    ) -> list[tuple[FindingKind, Row]]:
        return await self.blocking(
            self.store.inspect, who.tenant, stalled_after=stalled_after, queue=queue, kinds=kinds
        )

    async def list_workers(self, who: Principal, queue: str) -> list[dict[str, Any]]:
        return await self.blocking(self.store.list_workers, who.tenant, queue)
