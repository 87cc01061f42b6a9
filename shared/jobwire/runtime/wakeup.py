"""In-process wake-ups for long-polling claims: new work wakes the claims that can take it.

A claim waits on every (tenant, queue, job type) it asks for, and news of a runnable job
wakes one claim of that key: the one waiting longest. Waking every waiting claim of the
queue made each submit cost one claim query per idle worker (fifty idle workers, five
submits a second of another type: 325 needless statements a second, bench/idle.py); now
a job costs one woken claim per process that hears of it.

A woken claim that leaves without claiming (its caller went away, its claim failed)
passes the wake on, so a job never waits with nobody woken for it. News that arrives
twice (the submit itself, a sibling's relay, then the event tail) wakes at most one more
claim, which finds nothing and waits again.

A claim that a queue's limits held back (jobwire.db.queue_limits) also waits on that queue:
a job of the queue ending here or in another process (the event tail), or the queue being
resumed or given more room here, wakes it (`notify_held`). Only limited queues have such
waiters, so endings of other queues wake nobody.

A relay passes the news to the sibling processes of a family (jobwire.runtime.family) at once;
other replicas learn of it from the change feed (worker.server's runnable-work watcher).

A shared fleet's claim (tenant EVERY_TENANT) waits on its queues for every tenant: news
wakes a claim of the job's own tenant first, else a shared one; room in a tenant's limited
queue wakes that tenant's held claims and the shared ones. Every piece of news is also
`heard` by the store's turns (jobwire.process_state.turns), so shared claims know which tenants
have work without asking the database.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import TypeVar

from jobwire.domain.commands import EVERY_TENANT

Key = tuple[str, str, str]  # tenant, queue, job type
Relay = Callable[[str, str, str], None]


class Waiter:
    """One waiting claim: woken at most once, by the key it can serve."""

    __slots__ = ("event", "woken_by")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.woken_by: Key | None = None


class Wakeup:
    def __init__(self) -> None:
        # Per key, its waiters in the order they began to wait (a dict keeps insertion order).
        self._waiters: dict[Key, dict[Waiter, None]] = {}
        # Per (tenant, queue), the claims its limits held back.
        self._held: dict[tuple[str, str], dict[Waiter, None]] = {}
        self.relay: Relay | None = None  # tells sibling processes too
        self.on_first_waiter: Callable[[], None] | None = None  # news is wanted soon (the event tail)
        self.heard: Relay | None = None  # every piece of news, woken or not (the store's turns)

    @property
    def waiting(self) -> bool:
        return bool(self._waiters)

    def holds(self, tenant: str) -> bool:
        """Whether some claim that may take `tenant`'s jobs waits here for room in a limited queue."""
        return any(t in (tenant, EVERY_TENANT) for t, _ in self._held)

    def notify_held(self, tenant: str, queue: str, *, every: bool = True) -> None:
        """`queue` may lease again (resumed, room freed): wake its held-back claims here, or one (`every=False`)."""
        for owner in (tenant, EVERY_TENANT):
            for waiter in self._held.get((owner, queue), ()):
                if waiter.woken_by is None:
                    waiter.woken_by = (owner, queue, "")  # no job type: passing it on wakes nobody
                    waiter.event.set()
                    if not every:
                        return

    def waiting_for(self, tenant: str, queue: str, job_type: str) -> int:
        """How many claims wait here for a job of this kind."""
        return len(self._waiters.get((tenant, queue, job_type), ()))

    def notify(self, tenant: str, queue: str, job_type: str, *, relay: bool = True) -> None:
        """A job of `job_type` can run in `queue`: wake one claim for it here (and, with `relay`, in each sibling)."""
        if self.heard is not None:
            self.heard(tenant, queue, job_type)
        self._wake_one(tenant, queue, job_type)
        if relay and self.relay is not None:
            self.relay(tenant, queue, job_type)

    def pass_on(self, waiter: Waiter) -> None:
        """`waiter` was woken but will not claim: wake another claim of the same work instead."""
        if waiter.woken_by is not None:
            self._wake_one(*waiter.woken_by)

    def _wake_one(self, tenant: str, queue: str, job_type: str) -> None:
        """Wake the claim of `tenant` waiting longest for this work, else a shared fleet's."""
        if not self._wake((tenant, queue, job_type)) and tenant != EVERY_TENANT:
            self._wake((EVERY_TENANT, queue, job_type))

    def _wake(self, key: Key) -> bool:
        for waiter in self._waiters.get(key, ()):
            if waiter.woken_by is None:
                waiter.woken_by = key
                waiter.event.set()
                return True
        return False

    async def wait(
        self, tenant: str, queues: Iterable[str], job_types: Iterable[str], timeout: float, held: Iterable[str] = ()
    ) -> Waiter:
        """Wait up to `timeout` seconds for work, or for room in the `held` queues; the waiter
        says whether it was woken (`woken_by`)."""
        waiter = Waiter()
        keys = [(tenant, q, t) for q in queues for t in job_types]
        rooms = [(tenant, q) for q in held]
        if not self._waiters and self.on_first_waiter is not None:
            self.on_first_waiter()
        _join(self._waiters, keys, waiter)
        _join(self._held, rooms, waiter)
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that comes
            # with the wake, and a caller that left would claim anyway.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await waiter.event.wait()
        except asyncio.CancelledError:
            self.pass_on(waiter)  # woken, perhaps, just as its caller left
            raise
        finally:
            _leave(self._waiters, keys, waiter)
            _leave(self._held, rooms, waiter)
        return waiter


K = TypeVar("K")


def _join(table: dict[K, dict[Waiter, None]], keys: Iterable[K], waiter: Waiter) -> None:
    for key in keys:
        table.setdefault(key, {})[waiter] = None


def _leave(table: dict[K, dict[Waiter, None]], keys: Iterable[K], waiter: Waiter) -> None:
    for key in keys:
        waiters = table.get(key)
        if waiters is not None:
            waiters.pop(waiter, None)
            if not waiters:
                del table[key]
