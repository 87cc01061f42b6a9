"""Wake-ups for waiting claims from every process: a job became QUEUED somewhere.

Without this, a Claim learns of work submitted through another process (another jobapi
replica, the split deployment) only by polling, and database load grows with the number
of idle workers, which DESIGN §8 rules out. One reader per worker-service process tails
job_event (jobwire.db.feed) and wakes this process's waiting claims for the queue of
every job that became QUEUED. The claim loop keeps only a slow fallback poll, for retries
whose backoff ends later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from jobwire.db.feed import FeedReader, FeedRow
from jobwire.rpc.wakeup import Wakeup

log = logging.getLogger(__name__)
T = TypeVar("T")
IDLE_POLL_S = 1.0  # nobody waits for work: look rarely
RETRY_AFTER_ERROR_S = 1.0


class RunnableWatcher:
    def __init__(self, reader: FeedReader, wakeup: Wakeup, poll_s: float) -> None:
        self._reader = reader
        self._wakeup = wakeup
        self._poll_s = poll_s
        # One thread of its own: the reader holds one connection and is not thread-safe.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobwire-runnable")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._call(loop, self._reader.start)
            while True:
                rows = await self._call(loop, self._reader.poll)
                for row in rows:
                    self._notify(row)
                pause = self._poll_s if self._wakeup.waiting else IDLE_POLL_S
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.first_waiter(), pause)
        finally:
            self._thread.submit(self._reader.close)
            self._thread.shutdown(wait=False)

    async def _call(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> T:
        while True:
            try:
                return await loop.run_in_executor(self._thread, fn)
            except Exception:
                log.warning("runnable-work watcher: database read failed; retrying", exc_info=True)
                await asyncio.sleep(RETRY_AFTER_ERROR_S)

    def _notify(self, row: FeedRow) -> None:
        if row.to_status == "QUEUED":  # the snapshot (for the queue) only for the few that are
            job = json.loads(row.snapshot)
            # Every process reads the feed itself: no need to relay what it read.
            self._wakeup.notify(row.tenant, str(job.get("queue")), relay=False)
