"""In-process wake-ups for long-polling claims: a submit wakes the claimers of its queue.

Claimers in other processes learn of new work by polling (worker.server's claim loop);
inside one process (the embedded server, or a jobapi and worker sharing a process) a
submit wakes the waiting claim at once instead of after a poll interval.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable


class Wakeup:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, str], set[asyncio.Event]] = defaultdict(set)
        self._arrived = asyncio.Event()

    @property
    def waiting(self) -> bool:
        return bool(self._waiters)

    async def first_waiter(self) -> None:
        """Return when a claim starts waiting (for pollers that idle while nobody waits)."""
        self._arrived.clear()
        await self._arrived.wait()

    def notify(self, tenant: str, queue: str) -> None:
        for event in self._waiters.get((tenant, queue), ()):
            event.set()

    async def wait(self, tenant: str, queues: Iterable[str], timeout: float) -> bool:
        """True when woken before `timeout` seconds."""
        event = asyncio.Event()
        keys = [(tenant, q) for q in queues]
        for key in keys:
            self._waiters[key].add(event)
        self._arrived.set()
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
