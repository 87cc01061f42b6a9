"""Use cases behind ScheduleService: reads and writes of schedules through the store, scoped
by the caller's tenant and queues (a schedule's queue is its template's).

The rows live in the store (jobwire.db.schedules); firing them is jobwire.jobapi.firing's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import partial

from jobwire.db.store import JobStore
from jobwire.domain.job import JobRecord
from jobwire.domain.schedules import ScheduleRecord
from jobwire.rpc.auth import Principal
from jobwire.runtime.blocking import Blocking


class Schedules:
    def __init__(self, store: JobStore, blocking: Blocking, *, max_per_tenant: int, no_worker_after: timedelta) -> None:
        self.store = store
        self.blocking = blocking
        self.max_per_tenant = max_per_tenant  # JOBWIRE_MAX_SCHEDULES_PER_TENANT
        self.no_worker_after = no_worker_after  # JOBWIRE_NO_WORKER_AFTER: where a listed QUEUED job stands

    def now(self) -> datetime:
        """The database clock (no round trip): a new schedule's created_at, from which it counts."""
        return self.store.now().replace(microsecond=0)

    async def create(self, new: ScheduleRecord) -> ScheduleRecord:
        """Keep `new` (its template already decoded as Submit would); it fires first at next_fire_at.
        A tenant at its limit of schedules is refused (RESOURCE_EXHAUSTED) and nothing is written."""
        return await self.blocking(self.store.create_schedule, new, self.max_per_tenant)

    async def get(self, who: Principal, schedule_id: str) -> ScheduleRecord:
        return await self.blocking(self.store.get_schedule, who.scope, schedule_id)

    async def list(self, who: Principal, page_size: int, page_token: str) -> tuple[list[ScheduleRecord], str]:
        return await self.blocking(self.store.list_schedules, who.scope, page_size, page_token)

    async def jobs(
        self, who: Principal, schedule_id: str, page_size: int, page_token: str
    ) -> tuple[Sequence[JobRecord], str]:  # `list` is a method's name here
        read = partial(self.store.schedule_jobs, no_worker_after=self.no_worker_after)
        return await self.blocking(read, who.scope, schedule_id, page_size, page_token)

    async def pause(self, who: Principal, schedule_id: str) -> ScheduleRecord:
        return await self.blocking(self.store.set_schedule_paused, who.scope, schedule_id, None)

    async def resume(self, who: Principal, schedule_id: str) -> ScheduleRecord:
        """Fire next at the first fire time after now: firings due while paused are not made up."""
        found = await self.get(who, schedule_id)
        upcoming = found.timing.next_after(self.store.now())
        return await self.blocking(partial(self.store.set_schedule_paused, who.scope, schedule_id, upcoming))

    async def delete(self, who: Principal, schedule_id: str) -> None:
        await self.blocking(self.store.delete_schedule, who.scope, schedule_id)
