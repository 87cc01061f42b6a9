"""Running blocking calls off the event loop: the store's on a pool sized to the DB pool, result files on their own."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class Blocking:
    """`await blocking(fn, *args)` runs fn on a bounded thread pool."""

    def __init__(self, threads: int, name: str = "jobwire-db") -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)

    async def __call__(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        call: Callable[[], T] = functools.partial(fn, *args, **kwargs)
        return await loop.run_in_executor(self._pool, call)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
