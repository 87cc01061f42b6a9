"""What JobClient and AdminClient share: a channel, a timeout, retries, closing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc

from jobwire.client.channel import ChannelConfig, sync_channel
from jobwire.client.retry import RetrySettings, Sleep, call_with_retry

T = TypeVar("T")
P = TypeVar("P")  # a List call's reply: its items and next_page_token
DEFAULT_TIMEOUT_S = 30.0


class BaseClient:
    """A blocking jobwire client over one channel. Thread-safe, like the channel itself.

    Args:
        config: where jobwire is; ignored when `channel` is given.
        channel: an open channel to share (the client then does not close it).
        timeout: the deadline of each unary call, in seconds.
        retry: how many times and how patiently to retry.
        locale: the default locale of labels in returned jobs (`en`, `zh-CN`).
        sleep: the pause function between retries (tests pass a fake).
    """

    def __init__(
        self,
        config: ChannelConfig | None = None,
        *,
        channel: grpc.Channel | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        retry: RetrySettings | None = None,
        locale: str = "en",
        sleep: Sleep = time.sleep,
    ) -> None:
        if channel is not None:
            self._channel, self._owns_channel = channel, False
        elif config is not None:
            self._channel, self._owns_channel = sync_channel(config), True
        else:
            raise ValueError("pass a ChannelConfig or an open channel")
        self.timeout = timeout
        self.retry_settings = retry or RetrySettings()
        self.locale = locale
        self._sleep = sleep
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
    def channel(self) -> grpc.Channel:
        return self._channel

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

    def _bind(self) -> None:
        """Create the service stubs on `self.channel` (subclasses)."""

    def _locale(self, locale: str | None) -> str:
        return self.locale if locale is None else locale

    def _unary(self, call: Callable[[], T], *, idempotent: bool) -> T:
        return call_with_retry(call, self.retry_settings, idempotent=idempotent, sleep=self._sleep)

    def _pages(self, method: Callable[..., P], request: Any) -> Iterator[P]:
        """Each reply of a paged List call, fetched as the iterator advances."""
        while True:
            page = self._unary(lambda: method(request, timeout=self.timeout), idempotent=True)
            yield page
            token: str = page.next_page_token  # type: ignore[attr-defined]
            if not token:
                return
            request.page_token = token
