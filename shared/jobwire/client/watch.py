"""The resumable watch loops behind JobClient.watch() and watch_batch() (and their asyncio
twins), and when a batch watch is over.

A stream may break at any moment (a server restart, a proxy timeout, a lost network). The
loop reopens it with `after_version` = the last version it delivered, so the server replays
exactly what was missed and the caller sees every transition once.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Protocol

import grpc

from jobwire.client.convert import is_terminal
from jobwire.client.errors import ClientError, UnavailableError, from_rpc_error
from jobwire.client.retry import AsyncSleep, RetrySettings, Sleep
from jobwire.client.views import Job
from jobwire.v1 import job_pb2

# A server that keeps ending streams cleanly without the terminal update the job has (a
# bug, or a replica far behind) would make us reconnect forever; after this many such ends
# the terminal job read by Get is delivered instead.
MAX_EMPTY_ENDS = 3


class UpdateStream(Protocol):
    """What a server-streaming call returns: updates, and a way to hang up."""

    def __iter__(self) -> Iterator[job_pb2.JobUpdate]: ...

    def cancel(self) -> bool: ...


class AsyncUpdateStream(Protocol):
    """What a grpc.aio server-streaming call returns."""

    def __aiter__(self) -> AsyncIterator[job_pb2.JobUpdate]: ...

    def cancel(self) -> bool: ...


OpenStream = Callable[[int], UpdateStream]  # after_version -> stream
AsyncOpenStream = Callable[[int], AsyncUpdateStream]
GetJob = Callable[[], Job]
AsyncGetJob = Callable[[], Awaitable[Job]]
# (consecutive failures, the pause before the next try, what broke): lets a person know
OnReconnect = Callable[[int, float, BaseException | None], None]


class _DroppedError(Exception):
    """The stream broke in a way a reconnect may fix."""

    def __init__(self, cause: BaseException | None) -> None:
        super().__init__("stream dropped")
        self.cause = cause


class _Reconnects(abc.ABC):
    """A stream opened again and again: the failed connections in a row, the pause before the
    next, and when to give up (RetrySettings.watch_backoff, watch_max_reconnects)."""

    def __init__(self, settings: RetrySettings) -> None:
        self.settings = settings
        self.failures = 0  # consecutive reconnects without news
        self.done = False

    @abc.abstractmethod
    def fresh(self, job: Job) -> bool:
        """Whether to deliver `job` (news: the failures in a row start again); sets `done`."""

    def broken(self, error: grpc.RpcError) -> Exception:
        """What to raise for a stream that failed with `error`: a reconnect, or the answer."""
        if not self.settings.retryable(error):
            return from_rpc_error(error)
        return _DroppedError(error)

    def pause(self, cause: BaseException | None, on_reconnect: OnReconnect | None) -> float:
        """Count one more failed connection and tell how long to wait before the next."""
        self.failures += 1
        self._give_up_if_exhausted(cause)
        delay = self.settings.watch_backoff.delay(self.failures)
        if on_reconnect is not None:
            on_reconnect(self.failures, delay, cause)
        return delay

    def _give_up_if_exhausted(self, cause: BaseException | None) -> None:
        limit = self.settings.watch_max_reconnects
        if limit is None or self.failures <= limit:
            return
        if isinstance(cause, grpc.RpcError):
            raise from_rpc_error(cause) from cause
        if isinstance(cause, ClientError):
            raise cause
        raise UnavailableError(grpc.StatusCode.UNAVAILABLE, "the watch kept ending without news")


class _Watch(_Reconnects):
    """State of one watch across its reconnects: every decision the blocking and the
    asyncio loops share; the loops only read streams, call Get and pause."""

    def __init__(self, after_version: int, settings: RetrySettings) -> None:
        super().__init__(settings)
        self.last = after_version
        self.empty_ends = 0

    def fresh(self, job: Job) -> bool:
        """Whether to deliver `job`: a version newer than the last one delivered."""
        # The server resumes after `last`, so nothing older should come; dropping it anyway
        # keeps "no duplicates" true against a misbehaving replica.
        if job.version <= self.last:
            return False
        self.last, self.failures, self.empty_ends = job.version, 0, 0
        self.done = is_terminal(job)
        return True

    def get_failed(self, error: ClientError) -> None:
        """The Get after a clean end failed: a retryable code is a drop, raised as one."""
        if error.code in self.settings.retry_codes:
            raise _DroppedError(error) from error

    def ended_cleanly(self, job: Job) -> Job | None:
        """After a clean end without a terminal update, `job` is what Get read: are we done?

        A stream ends cleanly at once when `after_version` already is the terminal version,
        and a draining server may end streams cleanly too; Get tells the two apart.
        Returns a terminal job to deliver as the last one, or None.
        """
        if not is_terminal(job):
            return None
        if job.version <= self.last:
            self.done = True
            return None
        self.empty_ends += 1
        if self.empty_ends >= MAX_EMPTY_ENDS:
            self.done = True
            return job
        return None


def watch_job(
    open_stream: OpenStream,
    get_job: GetJob,
    after_version: int,
    settings: RetrySettings,
    sleep: Sleep,
    on_reconnect: OnReconnect | None = None,
) -> Generator[Job, None, None]:
    """Yield each new version of a job until it is terminal, reconnecting on drops.

    `on_reconnect` is told before each pause, so a watcher is never silent while it retries.

    Raises:
        ClientError: a non-retryable answer (NOT_FOUND, PERMISSION_DENIED, ...), or the
            last failure after `settings.watch_max_reconnects` failed reconnects.
    """
    state = _Watch(after_version, settings)
    while True:
        cause: BaseException | None = None
        try:
            yield from _one_stream(state, lambda: open_stream(state.last))
            if not state.done:
                final = state.ended_cleanly(_get(state, get_job))
                if final is not None:
                    yield final
            if state.done:
                return
        except _DroppedError as drop:
            cause = drop.cause
        sleep(state.pause(cause, on_reconnect))


def _one_stream(state: _Reconnects, open_stream: Callable[[], UpdateStream]) -> Iterator[Job]:
    """The fresh jobs on one stream; stops once the watch is done; hangs up on exit."""
    try:
        stream = open_stream()
        try:
            for update in stream:
                job = Job(update.job)
                if state.fresh(job):
                    yield job
                    if state.done:
                        return
        finally:
            stream.cancel()  # frees the server's stream if the caller stopped early
    except grpc.RpcError as error:
        raise state.broken(error) from error


def _get(state: _Watch, get_job: GetJob) -> Job:
    try:
        return get_job()
    except ClientError as error:
        state.get_failed(error)
        raise


async def async_watch_job(
    open_stream: AsyncOpenStream,
    get_job: AsyncGetJob,
    after_version: int,
    settings: RetrySettings,
    sleep: AsyncSleep,
    on_reconnect: OnReconnect | None = None,
) -> AsyncGenerator[Job, None]:
    """`watch_job` over grpc.aio: the same decisions, awaited."""
    state = _Watch(after_version, settings)
    while True:
        cause: BaseException | None = None
        try:
            async for job in _one_async_stream(state, lambda: open_stream(state.last)):
                yield job
            if not state.done:
                final = state.ended_cleanly(await _async_get(state, get_job))
                if final is not None:
                    yield final
            if state.done:
                return
        except _DroppedError as drop:
            cause = drop.cause
        await sleep(state.pause(cause, on_reconnect))


async def _one_async_stream(state: _Reconnects, open_stream: Callable[[], AsyncUpdateStream]) -> AsyncIterator[Job]:
    try:
        stream = open_stream()
        try:
            async for update in stream:
                job = Job(update.job)
                if state.fresh(job):
                    yield job
                    if state.done:
                        return
        finally:
            stream.cancel()
    except grpc.RpcError as error:
        raise state.broken(error) from error


async def _async_get(state: _Watch, get_job: AsyncGetJob) -> Job:
    try:
        return await get_job()
    except ClientError as error:
        state.get_failed(error)
        raise


class BatchEnd:
    """When a batch watch is over: once each of the batch's `total` jobs has ended.

    `total` comes from GetBatch, asked before the stream opens; the stream then sends every
    job as it is first, so a job that ended in between arrives ended and is counted.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.ended: set[str] = set()

    def over_after(self, job: Job) -> bool:
        """Note `job`'s new state; whether every job of the batch has now ended."""
        if is_terminal(job):
            self.ended.add(job.job_no)
        else:
            self.ended.discard(job.job_no)  # retried since it failed: running again
        return len(self.ended) >= self.total


class _BatchWatch(_Reconnects):
    """A batch watch across its reconnects: the version of each job delivered, and whether
    every job has ended. WatchJobs sends each job as it is first, so a stream opened again
    catches up with what changed meanwhile; a version already delivered is not again."""

    def __init__(self, total: int, settings: RetrySettings) -> None:
        super().__init__(settings)
        self.end = BatchEnd(total)
        self.versions: dict[str, int] = {}

    def fresh(self, job: Job) -> bool:
        if job.version <= self.versions.get(job.job_no, 0):
            return False
        self.versions[job.job_no] = job.version
        self.failures = 0
        self.done = self.end.over_after(job)
        return True


def watch_batch(
    open_stream: Callable[[], UpdateStream], total: int, settings: RetrySettings, sleep: Sleep
) -> Generator[Job, None, None]:
    """Each job of a batch of `total` as it is, then every change, until every job has ended.

    A stream that breaks (a restart, a server's connection age) or ends early (a draining
    server) is opened again after a pause; each job's versions come once, in order.
    """
    state = _BatchWatch(total, settings)
    while True:
        cause: BaseException | None = None
        try:
            yield from _one_stream(state, open_stream)
            if state.done:
                return
        except _DroppedError as drop:
            cause = drop.cause
        sleep(state.pause(cause, None))


async def async_watch_batch(
    open_stream: Callable[[], AsyncUpdateStream], total: int, settings: RetrySettings, sleep: AsyncSleep
) -> AsyncGenerator[Job, None]:
    """`watch_batch` over grpc.aio."""
    state = _BatchWatch(total, settings)
    while True:
        cause: BaseException | None = None
        try:
            async for job in _one_async_stream(state, open_stream):
                yield job
            if state.done:
                return
        except _DroppedError as drop:
            cause = drop.cause
        await sleep(state.pause(cause, None))
