"""WatchStatus and WatchJobs: a bounded inbox per stream, and the rules of what it sends.

Shaped like grpc's health Watch: a stream registers an inbox with the change feed, the
feed writes to it only when something changed, and the inbox is removed in `finally`.

What a stream promises:
* versions of a job strictly increase on a stream and none repeats;
* no status transition, stage change, attempt change or stall is ever dropped; progress
  within one of those phases may be coalesced to the newest for a reader that is behind;
* memory per stream is bounded: past `INBOX_LIMIT` pending updates the oldest are dropped
  and replayed from `job_event` when the reader catches up. Versions are dense (+1 per
  change), so an update that does not follow the last one sent is a hole and the stream
  fills it from `job_event` the same way. A feed that somehow missed a row costs latency,
  not a transition.

What a stream costs is held in its tenant's shares (jobwire.runtime.shares) while it runs:
one of JOBWIRE_MAX_STREAMS, and as many of JOBWIRE_MAX_WATCHED_JOBS as the jobs it watches.
A WatchStatus watches one job; a WatchJobs of job numbers or of a batch, as many as it names
(up to MAX_WATCHED_JOBS); an owner's WatchJobs follows every job the owner has and will
have, so it weighs MAX_WATCHED_JOBS from the start, whatever the owner has now, and never
more. 300 streams of 1,000 jobs each once took a server from 269 to 582 MB and another
tenant's WatchStatus past its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from jobwire.db.feed import OWNER_PAGE
from jobwire.db.store import JobStore
from jobwire.domain.errors import InvalidArgument, JobNotFound, JobwireError, OutOfRange, ResourceExhausted
from jobwire.jobapi.feed import ChangeFeed, Unsubscribe, Update
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.shares import TenantShares
from jobwire.v1 import job_pb2

P = ParamSpec("P")
T = TypeVar("T")

INBOX_LIMIT = 256
MAX_WATCHED_JOBS = 1_000
SYNC_TIMEOUT_S = 2.0


class ServerStopping(JobwireError):
    """The server is shutting down; reconnect (with after_version) to resume the watch."""

    code = "UNAVAILABLE"
    reason = "SERVER_STOPPING"


class TooManyStreams(ResourceExhausted):
    """This server has as many watch streams as it may serve you; try again later or elsewhere."""

    reason = "TOO_MANY_STREAMS"


class TooManyWatchedJobs(ResourceExhausted):
    """This server watches as many jobs for you as it may; watch fewer jobs, or close other streams."""

    reason = "TOO_MANY_WATCHED_JOBS"


@dataclass(slots=True)
class Pending:
    update: Update
    first: int  # the oldest version this item stands for: newer progress replaced older


@dataclass(frozen=True, slots=True)
class Lost:
    """Updates of a job dropped from a full inbox: replay them after `after`."""

    job_no: str
    job_id: int
    after: int


class Inbox:
    """One stream's pending updates: bounded, progress within a phase coalesced."""

    def __init__(self, limit: int = INBOX_LIMIT) -> None:
        self._limit = limit
        self._items: deque[Pending] = deque()
        self._tail: dict[str, Pending] = {}  # a job's newest item while it is still pending
        self._offered: dict[str, int] = {}  # a job's newest version offered
        self._lost: dict[str, Lost] = {}
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._error: JobwireError | None = None
        self.coalesced = 0

    def offer(self, update: Update) -> None:
        """Take an update from the feed (never blocks)."""
        no = update.job_no
        last = self._offered.get(no)
        if self._error is not None or (last is not None and update.version <= last):
            return
        self._offered[no] = update.version
        tail = self._tail.get(no)
        # Never across a version the feed did not deliver: it may have been a stall or a
        # stage, and the reader must get it replayed rather than folded away.
        follows = last is not None and update.version == last + 1
        if tail is not None and follows and tail.update.phase == update.phase:
            tail.update = update  # same phase: only progress moved, the newest is enough
            self.coalesced += 1
        else:
            item = Pending(update, update.version)
            self._items.append(item)
            self._tail[no] = item
            if len(self._items) > self._limit:
                self._drop_oldest()
        self._wake.set()

    def _drop_oldest(self) -> None:
        old = self._items.popleft()
        no = old.update.job_no
        if self._tail.get(no) is old:
            del self._tail[no]
        known = self._lost.get(no)
        after = old.first - 1 if known is None else min(known.after, old.first - 1)
        self._lost[no] = Lost(no, old.update.job_id, after)

    async def next(self) -> Pending | Lost:
        """The next thing to send; raises the error the inbox was closed with."""
        while True:
            if self._error is not None:
                raise self._error
            if self._lost:
                return self._lost.pop(next(iter(self._lost)))
            if self._items:
                item = self._items.popleft()
                if self._tail.get(item.update.job_no) is item:
                    del self._tail[item.update.job_no]
                return item
            self._wake.clear()
            await self._wake.wait()

    @property
    def backlog(self) -> int:
        """Things waiting to be sent: pending updates and jobs to replay."""
        return len(self._items) + len(self._lost)

    def close(self, error: JobwireError) -> None:
        self._error = error
        self._wake.set()
        self._closed.set()

    async def until(self, waiting: Awaitable[T]) -> T:
        """Await `waiting` unless the inbox is closed first (then raise why)."""
        task = asyncio.ensure_future(waiting)
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait((task, closed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled():
            return task.result()
        raise self._error or asyncio.CancelledError()


class StreamRegistry:
    """Every open stream of this process: the caps, and ending them all on shutdown."""

    def __init__(
        self,
        max_streams: int,
        *,
        max_watched_jobs: int,
        tenants: int = 1,
        inbox_limit: int = INBOX_LIMIT,
    ) -> None:
        self.max_streams = max_streams
        self._inbox_limit = inbox_limit
        self._open: set[Inbox] = set()
        self.streams = TenantShares(max_streams, tenants)
        self.watched = TenantShares(max_watched_jobs, tenants)
        self._stopping = False

    @property
    def active(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def inbox(self, tenant: str, jobs: int) -> Iterator[Inbox]:
        """A stream's inbox while the block runs, holding one stream and `jobs` watched jobs of the tenant's shares."""
        if self._stopping:
            raise ServerStopping()
        with self.streams.hold(tenant, TooManyStreams), self.watched.hold(tenant, self._too_many(jobs), jobs):
            box = Inbox(self._inbox_limit)
            self._open.add(box)
            try:
                yield box
            finally:
                self._open.discard(box)

    def _too_many(self, jobs: int) -> Callable[[], TooManyWatchedJobs]:
        share = self.watched.per_tenant
        if jobs > share:
            return lambda: TooManyWatchedJobs(
                f"this stream would watch {jobs} jobs, more than the {share} this server watches for you at once;"
                " watch fewer jobs per stream"
            )
        return TooManyWatchedJobs

    def stop(self) -> None:
        """End every stream with UNAVAILABLE, so clients resume on another replica."""
        self._stopping = True
        for box in list(self._open):
            box.close(ServerStopping())


class _Sent:
    """What one stream has sent: the last version per job, and the encoding locale."""

    def __init__(self, locale: str, barrier: int = 0) -> None:
        self.locale = locale
        self.last: dict[str, int] = {}
        # For a job this stream has not sent yet there is no version to compare with:
        # updates from feed polls up to `barrier` predate the stream's first read of the
        # database (an owner's job that finished just before), so they are history.
        self.barrier = barrier

    def fresh(self, update: Update) -> bool:
        last = self.last.get(update.job_no)
        return update.seq > self.barrier if last is None else update.version > last

    def mark(self, update: Update) -> job_pb2.JobUpdate:
        self.last[update.job_no] = update.version
        return update.message(self.locale)


class Watches:
    """The use cases behind WatchStatus and WatchJobs."""

    def __init__(self, feed: ChangeFeed, store: JobStore, blocking: Blocking, registry: StreamRegistry) -> None:
        self.feed = feed
        self.store = store
        self.blocking = blocking
        self.registry = registry

    async def status(
        self, tenant: str, job_no: str, after_version: int, locale: str
    ) -> AsyncGenerator[job_pb2.JobUpdate, None]:
        """The job now (or what was missed after `after_version`), then each change, until terminal."""
        with self.registry.inbox(tenant, 1) as box:
            await box.until(self.feed.ready())
            unsubscribe = self.feed.subscribe_job(tenant, job_no, box)
            try:
                start = await self._read(
                    self.store.watch_start, tenant, job_no, after_version, no_worker_after=self.feed.no_worker_after
                )
                if start is None:
                    raise JobNotFound()
                current = Update.located(start.current)
                if after_version > current.version:
                    # The caller claims a version the job never had: a silent stream until the
                    # job caught up (never, once it ended) would hide the mistake.
                    raise OutOfRange("after_version", f"is ahead of the job, which is at version {current.version}")
                sent = _Sent(locale)
                if after_version > 0:
                    sent.last[job_no] = after_version
                for update in [*await self.feed.updates(start.missed), current]:
                    if sent.fresh(update):
                        yield sent.mark(update)
                        if update.terminal:
                            return
                if current.terminal:
                    return  # resumed at the terminal version: nothing more will come
                async for message in self._drain(box, sent, end_on_terminal=True):
                    yield message
            finally:
                unsubscribe()

    async def jobs(
        self, tenant: str, owner: str, job_nos: Sequence[str], locale: str
    ) -> AsyncIterator[job_pb2.JobUpdate]:
        """Each job's current state, then every change (an owner's new jobs too), until the client leaves."""
        wanted = _one_scope(owner, job_nos)
        with self.registry.inbox(tenant, MAX_WATCHED_JOBS if owner else len(wanted)) as box:
            await box.until(self.feed.ready())
            unsubscribes = self._subscribe_scope(tenant, owner, wanted, box)
            try:
                # Only an owner's stream meets jobs it never read; it needs the barrier.
                barrier = await box.until(self._barrier()) if owner else 0
                sent = _Sent(locale, barrier)
                if owner:
                    # Page by page, each sent before the next is read: the first message
                    # waits for one page, not for every job the owner has.
                    after = 0
                    while True:
                        page = await self._read(
                            self.store.owner_jobs, tenant, owner, after, no_worker_after=self.feed.no_worker_after
                        )
                        for located in page:
                            yield sent.mark(Update.located(located))
                        if len(page) < OWNER_PAGE:
                            break
                        after = page[-1].job_id
                else:
                    initial = await self._read(
                        self.store.jobs_by_number, tenant, wanted, no_worker_after=self.feed.no_worker_after
                    )
                    if len(initial) != len(wanted):
                        raise JobNotFound()
                    for located in initial:
                        yield sent.mark(Update.located(located))
                async for message in self._drain(box, sent, end_on_terminal=False):
                    yield message
            finally:
                for unsubscribe in unsubscribes:
                    unsubscribe()

    async def _barrier(self) -> int:
        try:
            return await asyncio.wait_for(self.feed.sync(), SYNC_TIMEOUT_S)
        except TimeoutError:
            # The feed cannot poll (database down?): the polls it did finish are older than
            # our read all the same, and a stream that starts beats one that hangs.
            return self.feed.polls

    def _subscribe_scope(self, tenant: str, owner: str, job_nos: Sequence[str], box: Inbox) -> list[Unsubscribe]:
        if owner:
            return [self.feed.subscribe_owner(tenant, owner, box)]
        return [self.feed.subscribe_job(tenant, no, box) for no in job_nos]

    async def _drain(self, box: Inbox, sent: _Sent, *, end_on_terminal: bool) -> AsyncIterator[job_pb2.JobUpdate]:
        while True:
            work = await box.next()
            for update in await self._in_order(work, sent):
                if sent.fresh(update):
                    yield sent.mark(update)
                    if end_on_terminal and update.terminal:
                        return

    async def _in_order(self, work: Pending | Lost, sent: _Sent) -> list[Update]:
        """The updates to send for `work`, with any hole before it filled from job_event."""
        if isinstance(work, Lost):
            after = sent.last.get(work.job_no, work.after)
            return await self._replay(work.job_id, after, None)
        update = work.update
        last = sent.last.get(update.job_no)
        if last is None or work.first <= last + 1:
            return [update]
        return [*await self._replay(update.job_id, last, work.first - 1), update]

    async def _replay(self, job_id: int, after: int, upto: int | None) -> list[Update]:
        rows = await self._read(self.store.replay, job_id, after, upto)
        return await self.feed.updates(rows)

    async def _read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A store read on the database thread pool."""
        return await self.blocking(fn, *args, **kwargs)


def _one_scope(owner: str, job_nos: Sequence[str]) -> list[str]:
    """WatchJobs watches an owner or a list of jobs: exactly one of them."""
    if owner and job_nos:
        raise InvalidArgument("job_nos", "give an owner or job numbers, not both")
    if not owner and not job_nos:
        raise InvalidArgument("owner", "give an owner or job numbers to watch")
    wanted = list(dict.fromkeys(job_nos))
    if len(wanted) > MAX_WATCHED_JOBS:
        raise InvalidArgument("job_nos", f"at most {MAX_WATCHED_JOBS} jobs per stream")
    return wanted
