"""What the jobwire clients share: a channel, a timeout, retries, closing.

`BaseClient` is blocking, `AsyncBaseClient` is asyncio; both send the calls built in
`job_calls` and differ only in how a call is carried and how a pause is taken.

Each class that adds a service's stub (`JobService`, `ScheduleMethods`, the admin clients)
makes it in `_bind` after `super()._bind()`, so a client that mixes several services
(JobClient: JobService and ScheduleService) gets every stub through its MRO.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, Unpack

import grpc
import grpc.aio

from jobwire.client import job_calls
from jobwire.client.channel import ChannelConfig, aio_channel, sync_channel
from jobwire.client.convert import Payload
from jobwire.client.job_calls import Call, SubmitOptions, locale_or
from jobwire.client.retry import AsyncSleep, RetrySettings, Sleep, async_call_with_retry, call_with_retry
from jobwire.v1 import job_pb2, job_pb2_grpc

T = TypeVar("T")
R = TypeVar("R")
P = TypeVar("P")  # a List call's reply: its items and next_page_token
C = TypeVar("C")  # the channel type
S = TypeVar("S")  # the sleep function type
DEFAULT_TIMEOUT_S = 30.0


class _Client(Generic[C, S]):
    """A jobwire client over one channel: the parts that do not depend on blocking or not.

    Args:
        config: where jobwire is; ignored when `channel` is given.
        channel: an open channel to share (the client then does not close it).
        timeout: the deadline of each unary call, in seconds.
        retry: how many times and how patiently to retry.
        locale: the default locale of labels in returned jobs (`en`, `zh-CN`).
        sleep: the pause function between retries (tests pass a fake).
    """

    _stub: Any  # the service stub on `channel`, set by the subclass's `_bind`

    def __init__(
        self,
        config: ChannelConfig | None = None,
        *,
        channel: C | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        retry: RetrySettings | None = None,
        locale: str = "en",
        sleep: S | None = None,
    ) -> None:
        if channel is not None:
            self._channel, self._owns_channel = channel, False
        elif config is not None:
            self._channel, self._owns_channel = self._open(config), True
        else:
            raise ValueError("pass a ChannelConfig or an open channel")
        self.timeout = timeout
        self.retry_settings = retry or RetrySettings()
        self.locale = locale
        self._sleep: S = sleep if sleep is not None else self._default_sleep()
        self._bind()

    @classmethod
    def connect(
        cls,
        target: str,
        token: str | None = None,
        *,
        tls: bool = False,
        tls_ca: str | Path | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        retry: RetrySettings | None = None,
        locale: str = "en",
    ) -> Self:
        """A client for `target` (`host:port`), with an optional bearer token and TLS."""
        config = ChannelConfig(
            target=target,
            token=token,
            tls=tls,
            tls_ca=Path(tls_ca) if tls_ca is not None else None,
        )
        return cls(config, timeout=timeout, retry=retry, locale=locale)

    @property
    def channel(self) -> C:
        return self._channel

    def _open(self, config: ChannelConfig) -> C:
        raise NotImplementedError

    def _default_sleep(self) -> S:
        raise NotImplementedError

    def _bind(self) -> None:
        """Create the service stubs on `self.channel`: each override calls `super()._bind()` first."""

    def _locale(self, locale: str | None) -> str:
        return locale_or(locale, self.locale)

    def _open_watch(self, job_no: str, locale: str) -> Callable[[int], Any]:
        """What opens a WatchStatus stream after a version, for the watch loop."""
        # No deadline: a watch lasts as long as the job; keepalive finds dead peers.
        return lambda after: self._stub.WatchStatus(job_calls.watch_request(job_no, after, locale))

    def _sender(self, call: Call[Any]) -> Callable[[], Any]:
        """What sends `call` once over the channel, with this client's deadline."""
        method = getattr(self._stub, call.method)
        return lambda: method(call.request, timeout=self.timeout)


class JobService(_Client[C, S]):
    """What both job clients hold beyond their transport: the stub and `submit_request`.

    A mixin, listed before the client's base class.
    """

    _stub: job_pb2_grpc.JobServiceStub

    def _bind(self) -> None:
        super()._bind()
        self._stub = job_pb2_grpc.JobServiceStub(self._channel)

    def submit_request(
        self, job_type: str, payload: Payload = None, **options: Unpack[SubmitOptions]
    ) -> job_pb2.SubmitRequest:
        """The SubmitRequest `submit` sends (`submit_batch` sends many); the arguments are `submit`'s."""
        return job_calls.submit_request(job_type, payload, self.locale, options)


class BaseClient(_Client[grpc.Channel, Sleep]):
    """A blocking jobwire client over one channel. Thread-safe, like the channel itself."""

    def _open(self, config: ChannelConfig) -> grpc.Channel:
        return sync_channel(config)

    def _default_sleep(self) -> Sleep:
        return time.sleep

    def close(self) -> None:
        """Close the channel if this client opened it."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _unary(self, call: Callable[[], T], *, idempotent: bool) -> T:
        return call_with_retry(call, self.retry_settings, idempotent=idempotent, sleep=self._sleep)

    def _call(self, call: Call[R]) -> R:
        """Send `call`, retried as it allows, and decode its reply."""
        return call.decode(self._unary(self._sender(call), idempotent=call.idempotent))

    def _pages(self, method: Callable[..., P], request: Any) -> Iterator[P]:
        """Each reply of a paged List call, fetched as the iterator advances."""
        while True:
            page = self._unary(lambda: method(request, timeout=self.timeout), idempotent=True)
            yield page
            if not _turn_page(page, request):
                return


class AsyncBaseClient(_Client[grpc.aio.Channel, AsyncSleep]):
    """An asyncio jobwire client over one channel; use it from one event loop."""

    def _open(self, config: ChannelConfig) -> grpc.aio.Channel:
        return aio_channel(config)

    def _default_sleep(self) -> AsyncSleep:
        return asyncio.sleep

    async def close(self) -> None:
        """Close the channel if this client opened it."""
        if self._owns_channel:
            await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _unary(self, call: Callable[[], Awaitable[T]], *, idempotent: bool) -> T:
        return await async_call_with_retry(call, self.retry_settings, idempotent=idempotent, sleep=self._sleep)

    async def _call(self, call: Call[R]) -> R:
        """Send `call`, retried as it allows, and decode its reply."""
        return call.decode(await self._unary(self._sender(call), idempotent=call.idempotent))

    @staticmethod
    async def _each(pages: AsyncIterator[P], items: Callable[[P], Iterable[T]]) -> AsyncIterator[T]:
        """The items of each page in turn (`items` picks them out of a page)."""
        async for page in pages:
            for item in items(page):
                yield item

    async def _pages(self, method: Callable[..., Awaitable[P]], request: Any) -> AsyncIterator[P]:
        """Each reply of a paged List call, fetched as the iteration advances."""
        while True:
            page = await self._unary(lambda: method(request, timeout=self.timeout), idempotent=True)
            yield page
            if not _turn_page(page, request):
                return


def _turn_page(page: Any, request: Any) -> bool:
    """Point `request` at the page after `page`; False when `page` was the last."""
    token: str = page.next_page_token
    request.page_token = token
    return bool(token)
