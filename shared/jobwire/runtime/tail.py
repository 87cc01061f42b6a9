"""The one reader of `job_event` in a server process, for every part that needs its news.

Watch streams (jobapi's ChangeFeed) and waiting claims (worker.server's runnable-work
watcher) both learn of changes from the event table; one reader polls it for both (on MySQL
from a thread of its own, its reads block; SQLite is read on the loop) and hands each batch
of rows to every subscriber on the event loop. A subscriber that has more to do with a batch
first (the change feed reads where QUEUED jobs stand) hands back an awaitable: the next batch
waits for it, so every subscriber gets the batches in order. The reading rules (gaps, late
commits) are jobwire.db.feed's.

Pace: while someone listens (a stream is open, a claim waits, a caller wants a sync), a
poll follows every `poll_seconds` (50 ms) as long as polls bring rows, and backs off to
BUSY_BACKOFF_S when they come back empty; with nobody listening, once a second. A new
listener, or anything that expects news soon, wakes it at once. So an idle server with
fifty waiting workers costs the database four polls a second, not twenty, and a change
under load still reaches a watcher within one poll. A subscriber that must hear within a
poll whatever the quiet (a worker's Session holding a lease waits for its cancel) asks
for that (`prompt`): no backoff then, twenty polls a second while it asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from jobwire.db.feed import FeedReader, FeedRow

log = logging.getLogger(__name__)
T = TypeVar("T")

IDLE_POLL_S = 1.0  # nobody listens: look rarely
BUSY_BACKOFF_S = 0.25  # someone listens and nothing happens: at most this long between polls
RETRY_AFTER_ERROR_S = 1.0

# rows, the number of the poll that read them; what is left to do with them, if anything
Deliver = Callable[[Sequence[FeedRow], int], Awaitable[None] | None]


@dataclass(frozen=True)
class _Subscriber:
    deliver: Deliver
    listening: Callable[[], bool]
    prompt: Callable[[], bool]
    snapshots: Callable[[], bool]  # it decodes versions that leave a job leased (watch streams)


def _never() -> bool:
    return False


class EventTail:
    def __init__(self, reader: FeedReader, poll_seconds: float, *, on_loop: bool = False) -> None:
        self._reader = reader
        self._poll_s = poll_seconds
        self._subscribers: list[_Subscriber] = []
        # One thread of its own: the tail never waits behind queries on the shared pool. SQLite
        # is read `on_loop` instead, as it is written: a read in the process, microseconds a row,
        # where the thread gave the GIL up and took it back for every row it stepped through
        # while the loop ran the writes (8 sessions reporting: 19 us of CPU a row read back on
        # the thread, 9 on the loop).
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobwire-tail")
        self._on_loop = on_loop
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()
        self.polls = 0  # polls completed
        self._polling = False
        self._synced: list[tuple[int, asyncio.Future[None]]] = []
        self._quiet = 0  # empty polls in a row

    def subscribe(
        self,
        deliver: Deliver,
        *,
        listening: Callable[[], bool],
        prompt: Callable[[], bool] = _never,
        snapshots: Callable[[], bool] = _never,
    ) -> None:
        """Hand every batch to `deliver`; poll fast while `listening()` says someone waits, and
        every `poll_seconds` with no backoff while `prompt()` says news is wanted within a poll.
        A poll reads the snapshot of a version that leaves its job leased (a progress report's)
        only while `snapshots()` says some subscriber decodes those; else it is None."""
        self._subscribers.append(_Subscriber(deliver, listening, prompt, snapshots))

    def wake(self) -> None:
        """Poll now: news is expected (a stream opened, a claim started waiting)."""
        self._quiet = 0
        self._wake.set()

    async def ready(self) -> None:
        """Wait until the tail has its start position: events after it are delivered."""
        await self._ready.wait()

    async def sync(self) -> int:
        """Wait for a poll that started after this call; return its number.

        Every event committed before the call has then been delivered (bar rows still in
        flight), so a row read at or below the number is older than anything read from
        the database after this returns.
        """
        target = self.polls + (2 if self._polling else 1)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._synced.append((target, done))
        self.wake()
        await done
        return target

    async def run(self) -> None:
        """Poll, deliver, pause; survive database outages."""
        try:
            await self._start()
            while True:
                # Cleared as the poll starts, not as the pause does: news woken for while this
                # poll runs (a cancel committed after its read began) gets a poll of its own at once.
                self._wake.clear()
                self._polling = True
                rows = await self._poll()
                self._polling = False
                if rows:
                    await self._deliver(rows)
                self._release_synced()
                if rows is None:
                    await asyncio.sleep(RETRY_AFTER_ERROR_S)
                elif len(rows) < self._reader.batch:
                    self._quiet = 0 if rows else self._quiet + 1
                    await self._pause()
        finally:
            if self._on_loop:
                self._reader.close()
            else:
                self._thread.submit(self._reader.close)
            self._thread.shutdown(wait=False)

    async def _deliver(self, rows: Sequence[FeedRow]) -> None:
        left = [d for d in (s.deliver(rows, self.polls) for s in self._subscribers) if d is not None]
        for delivering in left:
            try:
                await delivering
            except Exception:
                # One subscriber's failure must not stop the feed for every other one.
                log.exception("event tail: a subscriber failed on poll %d", self.polls)

    async def _pause(self) -> None:
        listening = self._synced or any(s.listening() for s in self._subscribers)
        if any(s.prompt() for s in self._subscribers):
            pause = self._poll_s
        elif listening:
            pause = min(self._poll_s * 2**self._quiet, BUSY_BACKOFF_S)
        else:
            pause = IDLE_POLL_S
        # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow the stop's
        # cancellation when the wake comes at the same moment, and the tail would poll on.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(pause, self._poll_s)):
                await self._wake.wait()

    async def _start(self) -> None:
        while True:
            try:
                await self._read(self._reader.start)
                self._ready.set()
                return
            except Exception:
                log.warning("event tail: cannot read its start position yet", exc_info=True)
                await asyncio.sleep(RETRY_AFTER_ERROR_S)

    async def _poll(self) -> list[FeedRow] | None:
        try:
            full = any(s.snapshots() for s in self._subscribers)
            rows = await self._read(self._reader.poll, full)
        except Exception:
            log.warning("event tail: poll failed; retrying", exc_info=True)
            return None
        self.polls += 1
        return rows

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        if self._on_loop:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    def _release_synced(self) -> None:
        waiting = []
        for target, done in self._synced:
            if target > self.polls:
                waiting.append((target, done))
            elif not done.done():
                done.set_result(None)
        self._synced = waiting
