"""The resumable watch loop behind JobClient.watch().

A stream may break at any moment (a server restart, a proxy timeout, a lost network). The
loop reopens it with `after_version` = the last version it delivered, so the server replays
exactly what was missed (DESIGN.md §6) and the caller sees every transition once.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Protocol

import grpc

from jobwire.client.convert import is_terminal
from jobwire.client.errors import ClientError, UnavailableError, from_rpc_error
from jobwire.client.retry import RetrySettings, Sleep
from jobwire.v1 import job_pb2

# A server that keeps ending streams cleanly without the terminal update the job has (a
# bug, or a replica far behind) would make us reconnect forever; after this many such ends
# the terminal job read by Get is delivered instead.
MAX_EMPTY_ENDS = 3


class UpdateStream(Protocol):
    """What a server-streaming call returns: updates, and a way to hang up."""

    def __iter__(self) -> Iterator[job_pb2.JobUpdate]: ...

    def cancel(self) -> bool: ...


OpenStream = Callable[[int], UpdateStream]  # after_version -> stream
GetJob = Callable[[], job_pb2.Job]
# (consecutive failures, the pause before the next try, what broke): lets a person know
OnReconnect = Callable[[int, float, BaseException | None], None]


class _DroppedError(Exception):
    """The stream broke in a way a reconnect may fix."""

    def __init__(self, cause: BaseException | None) -> None:
        super().__init__("stream dropped")
        self.cause = cause


class _Watch:
    """State of one watch across its reconnects."""

    def __init__(self, after_version: int, settings: RetrySettings) -> None:
        self.last = after_version
        self.settings = settings
        self.failures = 0  # consecutive reconnects without news
        self.empty_ends = 0
        self.done = False

    def stream(self, open_stream: OpenStream) -> Iterator[job_pb2.Job]:
        """The new versions on one stream; stops after a terminal one; hangs up on exit."""
        try:
            stream = open_stream(self.last)
            try:
                for update in stream:
                    job = update.job
                    # The server resumes after `last`, so nothing older should come; dropping
                    # it anyway keeps "no duplicates" true against a misbehaving replica.
                    if job.version <= self.last:
                        continue
                    self.last, self.failures, self.empty_ends = job.version, 0, 0
                    self.done = is_terminal(job)
                    yield job
                    if self.done:
                        return
            finally:
                stream.cancel()  # frees the server's stream if the caller stopped early
        except grpc.RpcError as error:
            if not self.settings.retryable(error):
                raise from_rpc_error(error) from error
            raise _DroppedError(error) from error

    def ended_cleanly(self, get_job: GetJob) -> job_pb2.Job | None:
        """After a clean end without a terminal update: check with Get whether we are done.

        A stream ends cleanly at once when `after_version` already is the terminal version,
        and a draining server may end streams cleanly too; Get tells the two apart.
        Returns a terminal job to deliver as the last one, or None.
        """
        try:
            job = get_job()
        except ClientError as error:
            if error.code in self.settings.retry_codes:
                raise _DroppedError(error) from error
            raise
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

    def give_up_if_exhausted(self, cause: BaseException | None) -> None:
        limit = self.settings.watch_max_reconnects
        if limit is None or self.failures <= limit:
            return
        if isinstance(cause, grpc.RpcError):
            raise from_rpc_error(cause) from cause
        if isinstance(cause, ClientError):
            raise cause
        raise UnavailableError(grpc.StatusCode.UNAVAILABLE, "the watch kept ending without news")


def watch_job(
    open_stream: OpenStream,
    get_job: GetJob,
    *,
    after_version: int,
    settings: RetrySettings,
    sleep: Sleep,
    on_reconnect: OnReconnect | None = None,
) -> Generator[job_pb2.Job, None, None]:
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
            yield from state.stream(open_stream)
            if state.done:
                return
            final = state.ended_cleanly(get_job)
            if final is not None:
                yield final
            if state.done:
                return
        except _DroppedError as drop:
            cause = drop.cause
        state.failures += 1
        state.give_up_if_exhausted(cause)
        delay = settings.watch_backoff.delay(state.failures)
        if on_reconnect is not None:
            on_reconnect(state.failures, delay, cause)
        sleep(delay)
