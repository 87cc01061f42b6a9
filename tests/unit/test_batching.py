"""The group commit (jobwire.rpc.batching): which calls share a batch, and who hears what."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from jobwire.rpc.batching import Batcher


class Runs:
    """A store's `apply`: records each batch; answers each item doubled, or holds until released."""

    def __init__(self, *, hold: bool = False, yields: bool = True) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()
        self._hold = hold
        self._yields = yields  # False: a transaction that never yields (SQLite's, on the loop)

    async def __call__(self, items: Sequence[int]) -> list[int]:
        self.batches.append(list(items))
        if self._hold:
            await self.release.wait()
        elif self._yields:
            await asyncio.sleep(0)
        return [item * 2 for item in items]


async def test_calls_made_in_one_turn_share_one_batch_even_when_the_transaction_never_yields() -> None:
    runs = Runs(yields=False)
    batcher = Batcher(runs, lanes=2, max_items=256)
    assert await asyncio.gather(*(batcher(i) for i in range(5))) == [0, 2, 4, 6, 8]
    assert runs.batches == [[0, 1, 2, 3, 4]]


async def test_a_call_to_an_idle_batcher_runs_alone_at_the_next_turn() -> None:
    runs = Runs()
    batcher = Batcher(runs, lanes=2, max_items=256)
    assert await batcher(7) == 14
    assert await batcher(8) == 16
    assert runs.batches == [[7], [8]]


async def test_under_load_a_lane_waits_one_more_turn_for_the_calls_its_answers_bring() -> None:
    runs = Runs(yields=False)
    batcher = Batcher(runs, lanes=2, max_items=256)
    assert await asyncio.gather(batcher(1), batcher(2)) == [2, 4]  # callers arriving together

    async def a_turn_later() -> int:
        await asyncio.sleep(0)
        return await batcher(4)

    assert await asyncio.gather(batcher(3), a_turn_later()) == [6, 8]
    assert runs.batches == [[1, 2], [3, 4]]


async def test_calls_made_while_every_lane_is_busy_wait_and_go_together_in_the_next_lane() -> None:
    runs = Runs(hold=True)
    batcher = Batcher(runs, lanes=1, max_items=256)
    first = asyncio.ensure_future(batcher(1))
    await asyncio.sleep(0.01)
    assert runs.batches == [[1]]
    later = [asyncio.ensure_future(batcher(i)) for i in (2, 3, 4)]
    await asyncio.sleep(0.01)
    assert batcher.waiting == 3 and runs.batches == [[1]]
    runs.release.set()
    assert await first == 2
    assert await asyncio.gather(*later) == [4, 6, 8]
    assert runs.batches == [[1], [2, 3, 4]]


async def test_more_calls_than_a_batch_holds_go_in_several_lanes() -> None:
    runs = Runs()
    batcher = Batcher(runs, lanes=2, max_items=3)
    assert await asyncio.gather(*(batcher(i) for i in range(7))) == [i * 2 for i in range(7)]
    assert runs.batches == [[0, 1, 2], [3, 4, 5], [6]]
    assert (batcher.batches, batcher.items) == (3, 7)


async def test_an_error_of_the_transaction_reaches_every_caller_of_its_batch() -> None:
    failures = ["the database went away"]

    async def once_broken(items: Sequence[int]) -> list[int]:
        if failures:
            raise RuntimeError(failures.pop())
        return [item * 2 for item in items]

    batcher: Batcher[int, int] = Batcher(once_broken, lanes=1, max_items=256)
    outcomes = await asyncio.gather(batcher(1), batcher(2), return_exceptions=True)
    assert [str(o) for o in outcomes] == ["the database went away"] * 2
    assert await batcher(3) == 6  # its lane was given back


async def test_shutdown_waits_for_the_batches_in_flight() -> None:
    runs = Runs(hold=True)
    batcher = Batcher(runs, lanes=2, max_items=256)
    call = asyncio.ensure_future(batcher(5))
    await asyncio.sleep(0.01)
    stopping = asyncio.ensure_future(batcher.shutdown())
    await asyncio.sleep(0.01)
    assert not stopping.done()
    runs.release.set()
    await stopping
    assert call.done() and call.result() == 10
