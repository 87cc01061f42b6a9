"""What one signed-in person may hold open: live streams and the jobs they watch, and the
ListJobs reads their open jobs pages share.

A live stream costs the job service a WatchJobs stream of N jobs (weighing N there too) and,
for a jobs page, a ListJobs every few seconds. 100 open jobs pages of one person, each
re-reading ListJobs every 3 s, once pinned both cores of a server and another person's first
page took 18.3 s. So a person (their token) holds at most `max_streams` live streams watching
at most `max_watched` jobs in all, a stream over either is refused (429: the browser's
EventSource stops asking), and the pages of one person that show one filter share one
ListJobs read at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


class OverBudget(Exception):
    """This person already holds as many live streams, or watches as many jobs, as they may."""


@dataclass
class _Held:
    streams: int = 0
    watched: int = 0


@dataclass
class LiveBudget:
    """Live streams and watched jobs per person (keyed by their token's digest)."""

    max_streams: int
    max_watched: int
    _held: dict[str, _Held] = field(default_factory=dict)

    @contextlib.contextmanager
    def hold(self, person: str, watched: int) -> Iterator[None]:
        """Hold one stream of `watched` jobs while the block runs; OverBudget past either cap."""
        held = self._held.setdefault(person, _Held())
        if held.streams + 1 > self.max_streams or held.watched + watched > self.max_watched:
            if not held.streams:
                del self._held[person]
            raise OverBudget()
        held.streams += 1
        held.watched += watched
        try:
            yield
        finally:
            held.streams -= 1
            held.watched -= watched
            if not held.streams:
                del self._held[person]


def person_of(token: str) -> str:
    """The key a person's budget and shared reads are kept under: never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


class SharedReads(Generic[T]):
    """One read per key in flight or fresh (younger than `fresh_s`), shared by every caller.

    The read runs on the first caller's channel; if it fails, another caller reads for itself
    (the first page may have closed, taking its channel with it), so one page's going never
    fails the others.
    """

    def __init__(self, fresh_s: float) -> None:
        self._fresh_s = fresh_s
        self._reads: dict[Hashable, tuple[float, asyncio.Future[T]]] = {}

    async def read(self, key: Hashable, fetch: Callable[[], Awaitable[T]]) -> T:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for stale in [k for k, (at, f) in self._reads.items() if f.done() and now - at >= self._fresh_s]:
            del self._reads[stale]  # bounded by the reads of the last `fresh_s`
        found = self._reads.get(key)
        if found is not None:
            try:
                return await asyncio.shield(found[1])
            except Exception:  # noqa: BLE001 - the other page's read failed: read for ourselves
                return await fetch()
        read = asyncio.ensure_future(fetch())
        self._reads[key] = (now, read)
        read.add_done_callback(lambda done: self._forget_failed(key, done))
        return await asyncio.shield(read)

    def _forget_failed(self, key: Hashable, read: asyncio.Future[T]) -> None:
        # A failed read is shared with nobody after: the next caller reads again.
        if (read.cancelled() or read.exception() is not None) and self._reads.get(key, (0.0, None))[1] is read:
            del self._reads[key]
