"""The settler's order and its stubbornness: work in turns, a failed chunk kept and tried again.

A stand-in store answers `settle_dependents` from a script: which chunk leaves what.
"""

from __future__ import annotations

import asyncio

import pytest
from served import eventually

from jobwire.db.dependencies import Pending
from jobwire.runtime import settling

STORM = [Pending((1,), after) for after in range(0, 500, 100)]  # a wide fan-out: five chunks
SMALL = Pending((2,))


class ScriptedStore:
    """Each chunk settles one job and leaves the next of its storm; `failing` fails once.

    A chunk runs once the test allows it (`allow`), so the test knows which one is in flight.
    """

    def __init__(self, failing: Pending | None = None, allowed: int = 1000) -> None:
        self.settled: list[Pending] = []
        self.failing = failing
        self.unsettled = None
        self._allowed = asyncio.Semaphore(allowed)

    def allow(self, chunks: int) -> None:
        for _ in range(chunks):
            self._allowed.release()

    async def settle_dependents(self, pending: Pending) -> tuple[int, list[Pending]]:
        await self._allowed.acquire()
        if pending == self.failing:
            self.failing = None
            raise ConnectionError("the database went away")
        self.settled.append(pending)
        later = [p for p in STORM if p.sources == pending.sources and p.after > pending.after]
        return 1, later[:1]


async def test_an_endings_few_dependents_wait_for_one_chunk_of_a_storm_not_all_of_it() -> None:
    store = ScriptedStore(allowed=1)
    settler = settling.Settler(store)  # type: ignore[arg-type]
    task = asyncio.get_running_loop().create_task(settler.run())
    try:
        settler.kick([STORM[0]])
        await eventually(lambda: _now(len(store.settled) == 1), what="the storm's first chunk")
        settler.kick([SMALL])  # while the storm's second chunk waits to run
        store.allow(len(STORM))
        await eventually(lambda: _now(len(store.settled) == len(STORM) + 1), what="everything settled")
    finally:
        task.cancel()
    assert store.settled == [STORM[0], STORM[1], SMALL, *STORM[2:]]


async def test_a_chunk_that_fails_is_kept_and_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settling, "RETRY_S", 0.01)
    store = ScriptedStore(failing=STORM[2])
    settler = settling.Settler(store)  # type: ignore[arg-type]
    task = asyncio.get_running_loop().create_task(settler.run())
    try:
        settler.kick([STORM[0]])
        await eventually(lambda: _now(len(store.settled) == len(STORM)), what="the storm settled")
    finally:
        task.cancel()
    assert store.settled == STORM  # nothing lost, nothing twice


async def _now(value: bool) -> bool:
    """`value` as the awaitable probe `eventually` polls."""
    return value
