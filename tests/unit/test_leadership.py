"""The chore leader's loop (jobwire.runtime.leadership) against a store that answers as told:
a renewal refused, failed or not answered within the lease stops the duty at once, and a
stop resigns. The lease row itself: tests/store/test_store_chore_leader.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest

from jobwire.db.chore_leases import Term
from jobwire.domain.errors import StoreUnavailable
from jobwire.rpc.metrics import Metrics
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.leadership import Leadership

NOW = datetime(2026, 12, 1, 12, 0, 0)


class ToldStore:
    """`elect_chore_leader` answers with what `answer` says for the candidate; resignations are kept."""

    def __init__(self) -> None:
        self.answer: Callable[[str], Term] = lambda me: Term(me, NOW + timedelta(seconds=15), NOW)
        self.resigned: list[str] = []

    def elect_chore_leader(self, name: str, candidate: str, lease: timedelta, *, holding: bool) -> Term:
        return self.answer(candidate)

    def resign_chore_leader(self, name: str, holder: str) -> bool:
        self.resigned.append(holder)
        return True


class Duty:
    """A duty that says whether it runs."""

    def __init__(self) -> None:
        self.running = False

    async def __call__(self) -> None:
        self.running = True
        try:
            await asyncio.Event().wait()
        finally:
            self.running = False


@pytest.fixture
def parts() -> Iterator[tuple[ToldStore, Duty, Leadership]]:
    store, duty = ToldStore(), Duty()
    blocking = Blocking(2)
    leadership = Leadership("housekeeping", duty, store=store, blocking=blocking, metrics=Metrics(), lease_s=0.6)  # type: ignore[arg-type]
    yield store, duty, leadership
    blocking.shutdown()


async def test_the_holder_runs_its_duty_and_renews_every_third_of_the_lease(parts) -> None:  # type: ignore[no-untyped-def]
    _, duty, leadership = parts
    assert await leadership.campaign() == pytest.approx(0.2)
    await asyncio.sleep(0)
    assert duty.running and leadership.metrics.is_chore_leader("housekeeping")


async def test_a_standby_asks_again_at_the_lease_end_or_a_third_of_the_lease(parts) -> None:  # type: ignore[no-untyped-def]
    store, duty, leadership = parts
    store.answer = lambda me: Term("other:1:ab", NOW + timedelta(seconds=0.1), NOW)
    assert await leadership.campaign() == pytest.approx(0.11)  # just past the lease's end
    store.answer = lambda me: Term("other:1:ab", NOW + timedelta(seconds=10), NOW)
    assert await leadership.campaign() == pytest.approx(0.2)  # a resignation is seen within a third
    assert not duty.running and not leadership.metrics.is_chore_leader("housekeeping")


@pytest.mark.parametrize("how", ["refused", "failed"])
async def test_a_renewal_refused_or_failed_stops_the_duty_at_once(parts, how: str) -> None:  # type: ignore[no-untyped-def]
    store, duty, leadership = parts
    await leadership.campaign()
    await asyncio.sleep(0)
    assert duty.running

    def failed(me: str) -> Term:
        raise StoreUnavailable()

    store.answer = (lambda me: Term("other:1:ab", NOW + timedelta(seconds=15), NOW)) if how == "refused" else failed
    await leadership.campaign()
    assert not duty.running and not leadership.leading
    assert not leadership.metrics.is_chore_leader("housekeeping")


async def test_a_renewal_not_answered_within_the_lease_stops_the_duty_by_the_lease_end(parts) -> None:  # type: ignore[no-untyped-def]
    store, duty, leadership = parts
    await leadership.campaign()
    released = threading.Event()

    def hangs(me: str) -> Term:
        released.wait(5)
        return Term(me, NOW, NOW)

    store.answer = hangs
    started = asyncio.get_running_loop().time()
    await leadership.campaign()
    released.set()
    assert not duty.running and not leadership.leading
    assert asyncio.get_running_loop().time() - started < 1.5  # by the lease's end (0.6 s), not the answer's (5 s)


async def test_a_stop_ends_the_duty_and_resigns(parts) -> None:  # type: ignore[no-untyped-def]
    store, duty, leadership = parts
    running = asyncio.create_task(leadership.run())
    while not duty.running:
        await asyncio.sleep(0.01)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert not duty.running
    assert store.resigned == [leadership.holder]
