"""Client-side retries: bounded for unary calls, patient for watches, always with jitter.

Only UNAVAILABLE is retried by default: it means "not reached" or "database down, retry
later". Every other code is an answer, and asking again would get the same one.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from jobwire.client.errors import from_rpc_error, status_code

T = TypeVar("T")
Sleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Exponential backoff with jitter.

    Attributes:
        initial: the first delay, in seconds.
        maximum: the cap on any delay, in seconds.
        multiplier: growth per consecutive failure.
        jitter: the fraction of each delay that is random. 1.0 is "full jitter": after a
            server restart, thousands of watchers spread their reconnects instead of
            arriving in one wave.
    """

    initial: float = 0.2
    maximum: float = 10.0
    multiplier: float = 2.0
    jitter: float = 1.0

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """The pause before the next try after `failures` consecutive failures (>= 1)."""
        base = min(self.maximum, self.initial * self.multiplier ** max(0, failures - 1))
        return base * (1.0 - self.jitter * rand())


class Pauses:
    """The pauses of one retry loop: `next()` after each failure in a row, `reset()` after a success."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self._failures = 0

    def next(self) -> float:
        self._failures += 1
        return self.backoff.delay(self._failures)

    def reset(self) -> None:
        self._failures = 0


@dataclass(frozen=True, kw_only=True)
class RetrySettings:
    """How hard JobClient and AdminClient try before giving up.

    Attributes:
        unary_attempts: tries per unary call, the first included (1 disables retries).
        unary_backoff: pauses between unary tries.
        watch_backoff: pauses between watch reconnects; reset by every message received.
        watch_max_reconnects: consecutive failed reconnects before watch() raises;
            None keeps trying for as long as the caller keeps iterating.
        retry_codes: the codes worth another try.
    """

    unary_attempts: int = 4
    unary_backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.1, maximum=2.0))
    watch_backoff: Backoff = field(default_factory=Backoff)
    watch_max_reconnects: int | None = None
    retry_codes: frozenset[grpc.StatusCode] = frozenset({grpc.StatusCode.UNAVAILABLE})

    def retryable(self, error: grpc.RpcError) -> bool:
        return status_code(error) in self.retry_codes


def retry_pause(error: grpc.RpcError, failures: int, settings: RetrySettings, *, idempotent: bool) -> float:
    """After the `failures`-th failure in a row: the pause before the next try.

    The one retry decision of the blocking and the asyncio clients.

    Raises:
        ClientError: `error`, decoded, when it is not worth another try.
    """
    attempts = settings.unary_attempts if idempotent else 1
    if failures >= attempts or not settings.retryable(error):
        raise from_rpc_error(error) from error
    return settings.unary_backoff.delay(failures)


def call_with_retry(
    call: Callable[[], T],
    settings: RetrySettings,
    *,
    idempotent: bool,
    sleep: Sleep = time.sleep,
) -> T:
    """Run `call`, trying again on a retryable code when the call is safe to repeat.

    Raises:
        ClientError: the last failure, decoded (its cause is the grpc.RpcError).
    """
    failures = 0
    while True:
        try:
            return call()
        except grpc.RpcError as error:
            failures += 1
            pause = retry_pause(error, failures, settings, idempotent=idempotent)
        sleep(pause)


async def async_call_with_retry(
    call: Callable[[], Awaitable[T]],
    settings: RetrySettings,
    *,
    idempotent: bool,
    sleep: AsyncSleep = asyncio.sleep,
) -> T:
    """`call_with_retry` for a coroutine-making `call`, pausing with `await sleep(...)`."""
    failures = 0
    while True:
        try:
            return await call()
        except grpc.RpcError as error:
            failures += 1
            pause = retry_pause(error, failures, settings, idempotent=idempotent)
        await sleep(pause)
