"""The change feed: the process's one event tail (jobwire.runtime.tail), fanned out to streams in memory.

Each visible event goes to the streams subscribed to its job or to its owner. The database
sees one statement per poll whether ten or ten thousand streams watch; each event is
decoded once and encoded once per locale, however many streams receive it.

A QUEUED version tells where the job stands (no worker serves it, its queue holds it back,
the dependencies it waits for), as Get would: facts no event records. The feed reads them
once per batch of events, before any stream gets one (JobStore.restand keeps each queue's
facts a second), never once per stream. What was read back from job_event (a resumed
watch, a hole) stands the same way (`updates`).
"""

from __future__ import annotations

import logging
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Protocol, TypeVar

from jobwire.db.feed import FeedRow, Located
from jobwire.db.store import JobStore
from jobwire.domain.job import JobRecord
from jobwire.domain.states import Status
from jobwire.rpc import convert
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.tail import EventTail
from jobwire.v1 import job_pb2

log = logging.getLogger(__name__)

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
        return cls(row.job_id, row.record, seq)

    @classmethod
    def located(cls, job: Located) -> Update:
        return cls(job.job_id, job.record)

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
    """Fans the process's event tail out to the streams subscribed to a job or an owner."""

    def __init__(self, tail: EventTail, store: JobStore, blocking: Blocking, *, no_worker_after: timedelta) -> None:
        self._tail = tail
        self._store = store
        self._blocking = blocking
        self.no_worker_after = no_worker_after  # JOBWIRE_NO_WORKER_AFTER
        self._by_job: dict[tuple[str, str], set[Sink]] = defaultdict(set)
        self._by_owner: dict[str, dict[str, set[Sink]]] = defaultdict(lambda: defaultdict(set))  # tenant, owner
        tail.subscribe(self.dispatch, listening=self._watched, snapshots=self._watched)

    def _watched(self) -> bool:
        return bool(self._by_job or self._by_owner)

    async def ready(self) -> None:
        """Wait until the tail has its start position: events after it are delivered."""
        await self._tail.ready()

    async def sync(self) -> int:
        """Wait for a poll that started after this call (see EventTail.sync); its number."""
        return await self._tail.sync()

    @property
    def polls(self) -> int:
        return self._tail.polls

    def subscribe_job(self, tenant: str, job_no: str, sink: Sink) -> Unsubscribe:
        key = (tenant, job_no)
        self._by_job[key].add(sink)
        self._tail.wake()
        return lambda: _discard(self._by_job, key, sink)

    def subscribe_owner(self, tenant: str, owner: str, sink: Sink) -> Unsubscribe:
        self._by_owner[tenant][owner].add(sink)
        self._tail.wake()

        def remove() -> None:
            owners = self._by_owner.get(tenant)
            if owners is not None:
                _discard(owners, owner, sink)
                if not owners:
                    del self._by_owner[tenant]

        return remove

    def dispatch(self, rows: Sequence[FeedRow], seq: int) -> Awaitable[None] | None:
        """Each row to the sinks that watch its job or its owner; `seq`: the poll that read it.

        With a QUEUED version among them, or one read without its snapshot, the rest is left
        to do once where it stands, or the snapshot, is read.
        """
        if any(row.snapshot is None and self._watches(row) for row in rows):
            return self._dispatch_read(rows, seq)
        return self._dispatch(rows, seq)

    def _watches(self, row: FeedRow) -> bool:
        return bool(self._by_job.get((row.tenant, row.job_no)) or self._by_owner.get(row.tenant))

    async def _dispatch_read(self, rows: Sequence[FeedRow], seq: int) -> None:
        """A poll that began before this process's first stream did read no progress snapshot:
        those of the rows a stream may want are read back first, in one read (rare: the first
        poll of a stream)."""
        wanted = [row.id for row in rows if row.snapshot is None and self._watches(row)]
        try:
            read = {row.id: row for row in await self._blocking(self._store.events, wanted)}
        except Exception:  # each stream sees the hole at the job's next version and replays it
            log.warning("change feed: cannot read %d event(s) back", len(wanted), exc_info=True)
            read = {}
        left = self._dispatch([read.get(row.id, row) for row in rows], seq)
        if left is not None:
            await left

    def _dispatch(self, rows: Sequence[FeedRow], seq: int) -> Awaitable[None] | None:
        fanned: list[tuple[Update, set[Sink]]] = []
        for row in rows:
            for_job = self._by_job.get((row.tenant, row.job_no))
            owners = self._by_owner.get(row.tenant)
            if not for_job and not owners:
                continue  # nobody watches: not even decoded
            if row.snapshot is None:
                continue  # not read back: a stream that needs it sees the hole and replays it
            try:
                update = Update.from_feed(row, seq)
            except (ValueError, KeyError, TypeError):
                # One bad snapshot must not stop the feed for every stream; a stream that
                # needs this version sees the hole and replays it (or fails) on its own.
                log.exception("change feed: cannot decode event %d of %s", row.id, row.job_no)
                continue
            sinks = set(for_job or ())
            if owners:
                sinks |= owners.get(update.owner, set())
            if sinks:
                fanned.append((update, sinks))
        if any(update.record.status is Status.QUEUED for update, _ in fanned):
            return self._offer_standing(fanned)
        _offer(fanned)
        return None

    async def _offer_standing(self, fanned: Sequence[tuple[Update, set[Sink]]]) -> None:
        await self._stand([update for update, _ in fanned])
        _offer(fanned)

    async def updates(self, rows: Sequence[FeedRow]) -> list[Update]:
        """Rows read back from job_event (a resumed watch, a hole filled), standing as the feed's do."""
        updates = [Update.from_feed(row) for row in rows]
        await self._stand(updates)
        return updates

    async def _stand(self, updates: Sequence[Update]) -> None:
        """QUEUED updates told where they stand now (before any message of theirs is encoded)."""
        queued = [u for u in updates if u.record.status is Status.QUEUED]
        if not queued:
            return
        versions = [(u.job_id, u.record) for u in queued]
        try:
            stood = await self._blocking(self._store.restand, versions, no_worker_after=self.no_worker_after)
        except Exception:
            # The database is away: the versions go as recorded rather than not at all.
            log.warning("change feed: cannot read where %d queued job(s) stand", len(queued), exc_info=True)
            return
        for update, record in zip(queued, stood, strict=True):
            update.record = record


def _offer(fanned: Sequence[tuple[Update, set[Sink]]]) -> None:
    for update, sinks in fanned:
        for sink in sinks:
            sink.offer(update)


def _discard(index: dict[K, set[Sink]], key: K, sink: Sink) -> None:
    sinks = index.get(key)
    if sinks is not None:
        sinks.discard(sink)
        if not sinks:
            del index[key]
