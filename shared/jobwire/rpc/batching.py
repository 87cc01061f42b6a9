"""Group commit: calls that arrive while the database is busy share the next transaction.

A call goes to the database at once when a lane is free, so an idle server adds no wait
and no timer. While every lane is busy, calls queue; when a lane frees, it takes all of
them (up to `max_items`) as one batch: one transaction, one COMMIT, each caller with its
own answer. Under load, batches grow by themselves and the cost per call falls.

A batch succeeds or fails as a whole (the store reruns a transaction that can be rerun):
an error that escapes reaches every caller in it. A caller that stops waiting (deadline,
disconnect) does not take its call out of a batch already running.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

I = TypeVar("I")  # noqa: E741 - an item
R = TypeVar("R")


class Batcher(Generic[I, R]):
    """`await batcher(item)` runs `run([..., item, ...])` on a lane thread and returns item's result."""

    def __init__(self, run: Callable[[Sequence[I]], Sequence[R]], *, lanes: int, max_items: int, name: str) -> None:
        self._run = run
        self._lanes = lanes
        self._max = max_items
        self._pool = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix=name)
        self._pending: list[tuple[I, asyncio.Future[R]]] = []
        self._busy = 0
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
        loop = asyncio.get_running_loop()
        while self._busy < self._lanes and self._pending:
            batch, self._pending = self._pending[: self._max], self._pending[self._max :]
            self._busy += 1
            self.batches += 1
            self.items += len(batch)
            running = loop.run_in_executor(self._pool, self._run, [item for item, _ in batch])
            running.add_done_callback(functools.partial(self._finished, batch))

    def _finished(self, batch: list[tuple[I, asyncio.Future[R]]], running: asyncio.Future[Sequence[R]]) -> None:
        self._busy -= 1
        error = running.exception() if not running.cancelled() else asyncio.CancelledError()
        results: Sequence[R] = () if error is not None else running.result()
        for i, (_, done) in enumerate(batch):
            if done.done():
                continue  # its caller stopped waiting
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(results[i])
        self._dispatch()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
