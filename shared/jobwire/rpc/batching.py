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
import bisect
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
        self._max = max_items
        # A thread of its own per lane, and the first free lane always taken: a batch then
        # runs on the thread (and the pooled connection) the previous one warmed. Handing
        # work to whichever thread of a pool wakes cost more CPU than the work (measured).
        self._lanes = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-{i}") for i in range(lanes)]
        self._free = list(range(lanes))
        self._pending: list[tuple[I, asyncio.Future[R]]] = []
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
        while self._free and self._pending:
            batch, self._pending = self._pending[: self._max], self._pending[self._max :]
            lane = self._free.pop(0)
            self.batches += 1
            self.items += len(batch)
            running = loop.run_in_executor(self._lanes[lane], self._run, [item for item, _ in batch])
            running.add_done_callback(functools.partial(self._finished, lane, batch))

    def _finished(
        self, lane: int, batch: list[tuple[I, asyncio.Future[R]]], running: asyncio.Future[Sequence[R]]
    ) -> None:
        bisect.insort(self._free, lane)
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
        for lane in self._lanes:
            lane.shutdown(wait=True, cancel_futures=True)
