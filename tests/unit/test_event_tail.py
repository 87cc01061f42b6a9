"""The event tail's pace: fast while polls bring rows, backing off when they do not, rare when nobody listens."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from served import eventually

from jobwire.db.feed import FeedRow
from jobwire.runtime import tail as tail_module
from jobwire.runtime.tail import BUSY_BACKOFF_S, EventTail


class CountingReader:
    """A FeedReader stand-in: counts polls and returns a row while `busy`."""

    batch = 1000

    def __init__(self) -> None:
        self.polls = 0
        self.busy = False
        self.threads: set[int] = set()  # where start, poll and close were called

    def start(self) -> None:
        self.threads.add(threading.get_ident())

    def poll(self, full: bool = True) -> list[FeedRow]:
        self.threads.add(threading.get_ident())
        self.polls += 1
        if not self.busy:
            return []
        row = FeedRow(id=self.polls, job_id=1, tenant="t", job_no="PT-1", version=self.polls, kind="PROGRESS",
                      to_status="RUNNING", snapshot="{}")  # fmt: skip
        return [row]

    def close(self) -> None:
        pass


async def _polls_in(tail: EventTail, seconds: float) -> int:
    """Polls the tail completes in `seconds`: only ever compared with a ceiling, which no load can break."""
    before = tail.polls
    await asyncio.sleep(seconds)  # time passing is what a pace test measures
    return tail.polls - before


def _polls_reach(tail: EventTail, count: int) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return tail.polls >= count

    return probe


@contextlib.asynccontextmanager
async def _tailing(
    reader: CountingReader,
    listening: Callable[[], bool],
    prompt: Callable[[], bool] = lambda: False,
    *,
    on_loop: bool = False,
) -> AsyncIterator[tuple[EventTail, list[int]]]:
    tail = EventTail(reader, poll_seconds=0.02, on_loop=on_loop)  # type: ignore[arg-type]
    delivered: list[int] = []
    tail.subscribe(lambda rows, seq: delivered.append(len(rows)), listening=listening, prompt=prompt)
    task = asyncio.create_task(tail.run())
    try:
        yield tail, delivered
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_while_rows_come_polls_follow_one_another(monkeypatch: pytest.MonkeyPatch) -> None:
    # No backoff and no idle pause within the test's reach: only the pace for news keeps polls coming.
    monkeypatch.setattr(tail_module, "BUSY_BACKOFF_S", 3600.0)
    monkeypatch.setattr(tail_module, "IDLE_POLL_S", 3600.0)
    reader = CountingReader()
    reader.busy = True
    async with _tailing(reader, lambda: True) as (tail, delivered):
        await eventually(_polls_reach(tail, 25), what="25 polls in a row while each brings a row")
        assert delivered and set(delivered) == {1}


async def test_a_listener_with_no_news_is_polled_for_at_the_backoff_ceiling() -> None:
    reader = CountingReader()
    async with _tailing(reader, lambda: True) as (tail, _):
        # 20 ms doubling per empty poll passes BUSY_BACKOFF_S (250 ms) within five polls.
        await eventually(_polls_reach(tail, 6), what="six empty polls")
        quiet = await _polls_in(tail, 1.0)
        assert quiet <= 1.0 / BUSY_BACKOFF_S + 1, quiet


async def test_a_subscriber_that_wants_news_within_a_poll_gets_no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker Session holding a lease waits for its cancel: polls follow at the poll interval
    though none brings a row (a backoff, even doubling from 20 ms, would never reach 25 polls)."""
    monkeypatch.setattr(tail_module, "BUSY_BACKOFF_S", 3600.0)
    monkeypatch.setattr(tail_module, "IDLE_POLL_S", 3600.0)
    reader = CountingReader()
    async with _tailing(reader, lambda: True, prompt=lambda: True) as (tail, delivered):
        await eventually(_polls_reach(tail, 25), what="25 empty polls in a row")
        assert delivered == []


async def test_with_nobody_listening_it_polls_once_a_second() -> None:
    reader = CountingReader()
    async with _tailing(reader, lambda: False) as (tail, _):
        await eventually(_polls_reach(tail, 1), what="the first poll")
        idle = await _polls_in(tail, 2.0)
        assert idle <= 3, idle  # IDLE_POLL_S: once a second


async def test_a_wake_polls_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tail_module, "IDLE_POLL_S", 3600.0)  # without the wake, no poll for an hour
    reader = CountingReader()
    async with _tailing(reader, lambda: False) as (tail, _):
        await eventually(_polls_reach(tail, 1), what="the first poll")
        # The count rises on the loop just before the tail parks in its pause, in the same step.
        before = tail.polls
        tail.wake()  # a listener arrives
        await eventually(_polls_reach(tail, before + 1), what="a poll after wake()")


class HeldReader(CountingReader):
    """A reader whose second poll waits, on the tail's thread, until `go` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.in_poll, self.go = threading.Event(), threading.Event()

    def poll(self, full: bool = True) -> list[FeedRow]:
        if self.polls == 1:
            self.in_poll.set()
            self.go.wait(10)
        return super().poll(full)


async def test_a_wake_during_a_poll_gets_a_poll_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel committed after a poll's read began is not in it: the wake that says so must
    not be spent by that poll's pause, or the news waits for the next poll."""
    monkeypatch.setattr(tail_module, "IDLE_POLL_S", 3600.0)  # without the wake, no poll for an hour
    reader = HeldReader()
    async with _tailing(reader, lambda: False) as (tail, _):
        await eventually(_polls_reach(tail, 1), what="the first poll")
        tail.wake()  # the second poll starts, and waits on its thread
        await asyncio.to_thread(reader.in_poll.wait, 10)
        tail.wake()  # news committed while it reads
        reader.go.set()
        await eventually(_polls_reach(tail, 3), what="a poll after the one the wake came during")


async def test_a_subscriber_that_has_more_to_do_holds_the_next_batch_not_the_others() -> None:
    """The change feed reads where QUEUED jobs stand before it offers a batch: the next batch
    waits for that, so no subscriber sees batches out of order; a failure there stops nothing."""
    reader = CountingReader()
    reader.busy = True
    tail = EventTail(reader, poll_seconds=0.02)  # type: ignore[arg-type]
    order: list[tuple[str, int]] = []
    release = asyncio.Event()

    def slow(rows: object, seq: int) -> Awaitable[None]:
        async def finish() -> None:
            if seq == 1:
                await release.wait()
            if seq == 2:
                raise RuntimeError("a subscriber's own failure")
            order.append(("slow", seq))

        return finish()

    tail.subscribe(slow, listening=lambda: True)
    tail.subscribe(lambda rows, seq: order.append(("quick", seq)), listening=lambda: True)
    task = asyncio.create_task(tail.run())
    try:
        await eventually(lambda: _async(("quick", 1) in order), what="the quick subscriber's first batch")
        assert tail.polls == 1 and ("slow", 1) not in order  # the second poll waits for the first batch's end
        release.set()
        await eventually(lambda: _async(("slow", 3) in order), what="batches after a failed one")
        assert [seq for who, seq in order if who == "quick"][:3] == [1, 2, 3]
        assert order.index(("slow", 1)) < order.index(("quick", 2))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _async(value: bool) -> bool:
    return value


@pytest.mark.parametrize("on_loop", [False, True], ids=["on its thread (MySQL)", "on the loop (SQLite)"])
async def test_the_reader_is_called_from_one_thread_the_loops_only_when_asked(on_loop: bool) -> None:
    reader = CountingReader()
    reader.busy = True
    async with _tailing(reader, lambda: True, on_loop=on_loop) as (_, delivered):
        await eventually(_delivered(delivered, 3), what="three batches")
    assert len(reader.threads) == 1
    assert (threading.get_ident() in reader.threads) is on_loop


def _delivered(delivered: list[int], count: int) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return len(delivered) >= count

    return probe
