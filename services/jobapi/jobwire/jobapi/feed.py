"""The change feed: one reader task per process, fanning job changes out in memory.

A single task polls `job_event` (jobwire.db.feed) every `poll_seconds` on its own thread
and hands each visible event to the streams subscribed to that job or to its owner. The
database sees one statement per poll whether ten or ten thousand streams watch; each event
is decoded once and encoded once per locale, however many streams receive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from jobwire.db.feed import FeedReader, FeedRow
from jobwire.db.reads import Row
from jobwire.db.rows import record_from_row, row_from_snapshot
from jobwire.domain.job import JobRecord
from jobwire.domain.states import Status
from jobwire.rpc import convert
from jobwire.v1 import job_pb2

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR_S = 1.0
# With no stream listening, poll only this often (a subscribe wakes the feed at once):
# an idle server then costs the database one statement a second, not twenty.
IDLE_POLL_S = 1.0
UNSEQUENCED = sys.maxsize  # read from the store, not delivered by a poll
K = TypeVar("K")


class Update:
    """One version of one job, as every stream will send it."""

    __slots__ = ("_messages", "job_id", "owner", "record", "seq")

    def __init__(self, job_id: int, record: JobRecord, seq: int = UNSEQUENCED) -> None:
        self.job_id = job_id
        self.record = record
        self.owner = record.owner
        self.seq = seq  # the feed poll that delivered it; see ChangeFeed.sync
        self._messages: dict[str, job_pb2.JobUpdate] = {}

    @classmethod
    def from_feed(cls, row: FeedRow, seq: int = UNSEQUENCED) -> Update:
        return cls(row.job_id, record_from_row(row_from_snapshot(row.snapshot)), seq)

    @classmethod
    def from_row(cls, row: Row, position: int | None) -> Update:
        return cls(row["id"], record_from_row(row, queue_position=position))

    @property
    def job_no(self) -> str:
        return self.record.job_no

    @property
    def version(self) -> int:
        return self.record.version

    @property
    def terminal(self) -> bool:
        return self.record.status.terminal

    @property
    def phase(self) -> tuple[Status, str | None, int, bool]:
        """What must never be coalesced away: status, stage, attempt, stalled."""
        r = self.record
        return r.status, r.stage, r.attempt, r.stalled

    def message(self, locale: str) -> job_pb2.JobUpdate:
        """The encoded update, built once per locale and shared by every stream."""
        found = self._messages.get(locale)
        if found is None:
            found = self._messages[locale] = job_pb2.JobUpdate(job=convert.job_to_proto(self.record, locale))
        return found


class Sink(Protocol):
    """A stream's inbox. `offer` must not block: it runs inside the feed's dispatch."""

    def offer(self, update: Update) -> None: ...


Unsubscribe = Callable[[], None]


class ChangeFeed:
    """Polls the database on one thread and fans updates out to subscribed sinks."""

    def __init__(self, reader: FeedReader, poll_seconds: float) -> None:
        self._reader = reader
        self._poll_s = poll_seconds
        self._by_job: dict[tuple[str, str], set[Sink]] = defaultdict(set)
        self._by_owner: dict[str, dict[str, set[Sink]]] = defaultdict(lambda: defaultdict(set))  # tenant, owner
        # One thread of its own: the feed never waits behind RPCs on the shared DB pool.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobwire-feed")
        self._ready = asyncio.Event()
        self.polls = 0  # polls completed
        self._polling = False
        self._synced: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()

    async def ready(self) -> None:
        """Wait until the feed has its start position: events after it are delivered."""
        await self._ready.wait()

    async def sync(self) -> int:
        """Wait for a poll that started after this call; return its number.

        Every event committed before the call has then been dispatched (bar rows still in
        flight), so an update with `seq` at or below the number is older than anything
        read from the database after this returns.
        """
        target = self.polls + (2 if self._polling else 1)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._synced.append((target, done))
        self._wake.set()
        await done
        return target

    def subscribe_job(self, tenant: str, job_no: str, sink: Sink) -> Unsubscribe:
        key = (tenant, job_no)
        self._by_job[key].add(sink)
        self._wake.set()
        return lambda: _discard(self._by_job, key, sink)

    def subscribe_owner(self, tenant: str, owner: str, sink: Sink) -> Unsubscribe:
        self._by_owner[tenant][owner].add(sink)
        self._wake.set()

        def remove() -> None:
            owners = self._by_owner.get(tenant)
            if owners is not None:
                _discard(owners, owner, sink)
                if not owners:
                    del self._by_owner[tenant]

        return remove

    async def run(self) -> None:
        """The reader task: poll, dispatch, sleep; survive database outages."""
        try:
            await self._start()
            while True:
                self._polling = True
                rows = await self._poll()
                self._polling = False
                self.dispatch(rows)
                self._release_synced()
                if rows is None:
                    await asyncio.sleep(RETRY_AFTER_ERROR_S)
                elif len(rows) < self._reader.batch:
                    await self._pause()
        finally:
            self._thread.submit(self._reader.close)
            self._thread.shutdown(wait=False)

    async def _pause(self) -> None:
        listening = self._by_job or self._by_owner or self._synced
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self._poll_s if listening else IDLE_POLL_S)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await loop.run_in_executor(self._thread, self._reader.start)
                self._ready.set()
                return
            except Exception:
                log.warning("change feed: cannot read its start position yet", exc_info=True)
                await asyncio.sleep(RETRY_AFTER_ERROR_S)

    async def _poll(self) -> list[FeedRow] | None:
        try:
            rows = await asyncio.get_running_loop().run_in_executor(self._thread, self._reader.poll)
        except Exception:
            log.warning("change feed: poll failed; retrying", exc_info=True)
            return None
        self.polls += 1
        return rows

    def dispatch(self, rows: Iterable[FeedRow] | None) -> None:
        for row in rows or ():
            for_job = self._by_job.get((row.tenant, row.job_no))
            owners = self._by_owner.get(row.tenant)
            if not for_job and not owners:
                continue  # nobody watches: not even decoded
            try:
                update = Update.from_feed(row, self.polls)
            except (ValueError, KeyError, TypeError):
                # One bad snapshot must not stop the feed for every stream; a stream that
                # needs this version sees the hole and replays it (or fails) on its own.
                log.exception("change feed: cannot decode event %d of %s", row.id, row.job_no)
                continue
            sinks = set(for_job or ())
            if owners:
                sinks |= owners.get(update.owner, set())
            for sink in sinks:
                sink.offer(update)

    def _release_synced(self) -> None:
        waiting = []
        for target, done in self._synced:
            if target > self.polls:
                waiting.append((target, done))
            elif not done.done():
                done.set_result(None)
        self._synced = waiting


def _discard(index: dict[K, set[Sink]], key: K, sink: Sink) -> None:
    sinks = index.get(key)
    if sinks is not None:
        sinks.discard(sink)
        if not sinks:
            del index[key]
