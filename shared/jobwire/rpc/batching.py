"""Group commit: calls that arrive while the database is busy share the next transaction.

A call goes to the database at once when a lane is free, so an idle server adds no wait
and no timer. While every lane is busy, calls queue; when a lane frees, it takes all of
them (up to `max_items`) as one batch: one transaction, one COMMIT, each caller with its
own answer. Under load, batches grow by themselves and the cost per call falls.

Lanes are concurrent transactions on the event loop (the write path does its I/O there).
A batch succeeds or fails as a whole (the store reruns a transaction that can be rerun):
an error that escapes reaches every caller in it. A caller that stops waiting (deadline,
disconnect) does not take its call out of a batch already running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

I = TypeVar("I")  # noqa: E741 - an item
R = TypeVar("R")


class Batcher(Generic[I, R]):
    """`await batcher(item)` runs `run([..., item, ...])` in a lane and returns item's result."""

    def __init__(self, run: Callable[[Sequence[I]], Awaitable[Sequence[R]]], *, lanes: int, max_items: int) -> None:
        self._run = run
        self._lanes = lanes
        self._max = max_items
        self._busy = 0
        self._pending: list[tuple[I, asyncio.Future[R]]] = []
        self._running: set[asyncio.Task[None]] = set()
        self.batches = 0  # batches run, for metrics and tests
        self.items = 0  # items run

    async def __call__(self, item: I) -> R:
        done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, done))
        self._dispatch()
        return await done

    @property
    def waiting(self) -> int:
        """Calls queued for the next batch."""
        return len(self._pending)

    def _dispatch(self) -> None:
        while self._busy < self._lanes and self._pending:
            batch, self._pending = self._pending[: self._max], self._pending[self._max :]
            self._busy += 1
            self.batches += 1
            self.items += len(batch)
            task = asyncio.get_running_loop().create_task(self._lane(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _lane(self, batch: list[tuple[I, asyncio.Future[R]]]) -> None:
        try:
            results = await self._run([item for item, _ in batch])
        except BaseException as error:
            for _, done in batch:
                if not done.done():
                    done.set_exception(error if isinstance(error, Exception) else asyncio.CancelledError())
            if not isinstance(error, Exception):
                raise
        else:
            for (_, done), result in zip(batch, results, strict=True):
                if not done.done():  # its caller may have stopped waiting
                    done.set_result(result)
        finally:
            self._busy -= 1
            self._dispatch()

    async def shutdown(self) -> None:
        """Let the batches in flight finish (their callers are waiting for them)."""
        if self._running:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._running, return_exceptions=True)
