"""In-process wake-ups for long-polling claims: a submit wakes the claimers of its queue.

Inside one process (the embedded server, or a jobapi and worker sharing a process) a
submit wakes the waiting claim at once instead of after a poll interval. A relay passes
the news on to the sibling processes of a family (jobwire.family) just as fast; other
replicas learn of it from the change feed (worker.server's runnable-work watcher).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterable

Relay = Callable[[str, str], None]


class Wakeup:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, str], set[asyncio.Event]] = defaultdict(set)
        self.relay: Relay | None = None  # tells sibling processes too
        self.on_first_waiter: Callable[[], None] | None = None  # news is wanted soon (the event tail)

    @property
    def waiting(self) -> bool:
        return bool(self._waiters)

    def notify(self, tenant: str, queue: str, *, relay: bool = True) -> None:
        """Wake this process's claims of `queue` (and, with `relay`, its siblings')."""
        for event in self._waiters.get((tenant, queue), ()):
            event.set()
        if relay and self.relay is not None:
            self.relay(tenant, queue)

    async def wait(self, tenant: str, queues: Iterable[str], timeout: float) -> bool:
        """True when woken before `timeout` seconds."""
        event = asyncio.Event()
        keys = [(tenant, q) for q in queues]
        if not self._waiters and self.on_first_waiter is not None:
            self.on_first_waiter()
        for key in keys:
            self._waiters[key].add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                self._waiters[key].discard(event)
                if not self._waiters[key]:
                    del self._waiters[key]
