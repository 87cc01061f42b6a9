"""Use cases behind ScheduleService: reads and writes of schedules through the store, scoped
by the caller's tenant and queues (a schedule's queue is its template's).

The rows live in the store (jobwire.db.schedules); firing them is jobwire.jobapi.firing's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TypeVar

from jobwire.db.store import JobStore
from jobwire.domain.schedules import ScheduleRecord
from jobwire.rpc.auth import Principal
from jobwire.runtime.blocking import Blocking

T = TypeVar("T")


class Schedules:
    def __init__(self, store: JobStore, blocking: Blocking, *, max_per_tenant: int) -> None:
        self.store = store
        self.blocking = blocking
        self.max_per_tenant = max_per_tenant  # JOBWIRE_MAX_SCHEDULES_PER_TENANT

    def now(self) -> datetime:
        """The database clock (no round trip): a new schedule's created_at, from which it counts."""
        return self.store.now().replace(microsecond=0)

    async def create(self, new: ScheduleRecord) -> ScheduleRecord:
        """Keep `new` (its template already decoded as Submit would); it fires first at next_fire_at.
        A tenant at its limit of schedules is refused (RESOURCE_EXHAUSTED) and nothing is written."""
        return await self.blocking(self.store.create_schedule, new, self.max_per_tenant)

    async def with_store(self, call: Callable[[JobStore], T]) -> T:
        """`call` with the store, on the blocking pool: a read or write of schedules that needs
        nothing but the store, made by the servicer, which imports no database code."""
        return await self.blocking(call, self.store)

    async def resume(self, who: Principal, schedule_id: str) -> ScheduleRecord:
        """Fire next at the first fire time after now: firings due while paused are not made up."""
        found = await self.blocking(self.store.get_schedule, who.scope, schedule_id)
        upcoming = found.timing.next_after(self.store.now())
        return await self.blocking(partial(self.store.set_schedule_paused, who.scope, schedule_id, upcoming))
