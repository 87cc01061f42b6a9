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

A relay passes the news to the sibling processes of a family (jobwire.runtime.family) at once;
other replicas learn of it from the change feed (worker.server's runnable-work watcher).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

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
        self.relay: Relay | None = None  # tells sibling processes too
        self.on_first_waiter: Callable[[], None] | None = None  # news is wanted soon (the event tail)

    @property
    def waiting(self) -> bool:
        return bool(self._waiters)

    def waiting_for(self, tenant: str, queue: str, job_type: str) -> int:
        """How many claims wait here for a job of this kind."""
        return len(self._waiters.get((tenant, queue, job_type), ()))

    def notify(self, tenant: str, queue: str, job_type: str, *, relay: bool = True) -> None:
        """A job of `job_type` can run in `queue`: wake one claim for it here (and, with `relay`, in each sibling)."""
        self._wake((tenant, queue, job_type))
        if relay and self.relay is not None:
            self.relay(tenant, queue, job_type)

    def pass_on(self, waiter: Waiter) -> None:
        """`waiter` was woken but will not claim: wake another claim of the same work instead."""
        if waiter.woken_by is not None:
            self._wake(waiter.woken_by)

    def _wake(self, key: Key) -> None:
        for waiter in self._waiters.get(key, ()):
            if waiter.woken_by is None:
                waiter.woken_by = key
                waiter.event.set()
                return

    async def wait(self, tenant: str, queues: Iterable[str], job_types: Iterable[str], timeout: float) -> Waiter:
        """Wait up to `timeout` seconds for work; the waiter says whether it was woken (`woken_by`)."""
        waiter = Waiter()
        keys = [(tenant, q, t) for q in queues for t in job_types]
        if not self._waiters and self.on_first_waiter is not None:
            self.on_first_waiter()
        for key in keys:
            self._waiters.setdefault(key, {})[waiter] = None
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
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.pop(waiter, None)
                    if not waiters:
                        del self._waiters[key]
        return waiter
