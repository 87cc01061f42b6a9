"""The event tail's pace: fast while polls bring rows, backing off when they do not, rare when nobody listens."""

from __future__ import annotations

import asyncio
import time

from jobwire.db.feed import FeedRow
from jobwire.runtime.tail import BUSY_BACKOFF_S, EventTail


class CountingReader:
    """A FeedReader stand-in: counts polls and returns a row while `busy`."""

    batch = 1000

    def __init__(self) -> None:
        self.polls = 0
        self.busy = False

    def start(self) -> None:
        pass

    def poll(self) -> list[FeedRow]:
        self.polls += 1
        if not self.busy:
            return []
        row = FeedRow(id=self.polls, job_id=1, tenant="t", job_no="PT-1", version=self.polls, kind="PROGRESS",
                      to_status="RUNNING", snapshot="{}")  # fmt: skip
        return [row]

    def close(self) -> None:
        pass


async def _polls_in(reader: CountingReader, seconds: float) -> int:
    before = reader.polls
    await asyncio.sleep(seconds)
    return reader.polls - before


async def test_pace_follows_news_and_listeners() -> None:
    reader = CountingReader()
    listening = {"now": True}
    tail = EventTail(reader, poll_seconds=0.02)  # type: ignore[arg-type]
    delivered: list[int] = []
    tail.subscribe(lambda rows, seq: delivered.append(len(rows)), listening=lambda: listening["now"])
    task = asyncio.create_task(tail.run())
    try:
        reader.busy = True
        busy = await _polls_in(reader, 1.0)
        assert busy >= 25, busy  # a poll every 20 ms while rows come (timers are coarse here)
        reader.busy = False
        await asyncio.sleep(0.5)  # the backoff reaches its ceiling
        quiet = await _polls_in(reader, 1.0)
        assert quiet <= 1.0 / BUSY_BACKOFF_S + 1, quiet
        listening["now"] = False
        await asyncio.sleep(1.1)
        idle = await _polls_in(reader, 2.0)
        assert idle <= 3, idle  # once a second
        started = time.monotonic()
        tail.wake()  # a listener arrives: a poll at once
        before = reader.polls
        while reader.polls == before:
            await asyncio.sleep(0.005)
        assert time.monotonic() - started < 0.2
        assert delivered and set(delivered) == {1}
    finally:
        task.cancel()
