"""Wake-ups wake the claims that can take the work: one per job, by type, passed on when unused."""

from __future__ import annotations

import asyncio

import pytest

from jobwire.runtime.wakeup import Waiter, Wakeup

LONG = 30.0


async def _waiting(
    wakeup: Wakeup, job_types: list[str], queues: tuple[str, ...] = ("default",)
) -> asyncio.Task[Waiter]:
    task = asyncio.create_task(wakeup.wait("t", queues, job_types, LONG))
    await asyncio.sleep(0)  # let it register
    return task


async def test_a_job_wakes_only_claims_of_its_type() -> None:
    wakeup = Wakeup()
    frames, mail = await _waiting(wakeup, ["frames"]), await _waiting(wakeup, ["mail"])
    wakeup.notify("t", "default", "mail")
    assert (await asyncio.wait_for(mail, 1)).woken_by == ("t", "default", "mail")
    assert not frames.done()
    frames.cancel()


async def test_one_job_wakes_one_claim_the_one_waiting_longest() -> None:
    wakeup = Wakeup()
    first, second, third = [await _waiting(wakeup, ["frames"]) for _ in range(3)]
    wakeup.notify("t", "default", "frames")
    await asyncio.wait_for(first, 1)
    await asyncio.sleep(0)
    assert not second.done() and not third.done()
    wakeup.notify("t", "default", "frames")
    await asyncio.wait_for(second, 1)
    assert not third.done()
    third.cancel()


async def test_a_claim_of_several_types_and_queues_is_woken_once() -> None:
    wakeup = Wakeup()
    both = await _waiting(wakeup, ["frames", "mail"], queues=("default", "bulk"))
    other = await _waiting(wakeup, ["mail"], queues=("bulk",))
    wakeup.notify("t", "bulk", "mail")
    wakeup.notify("t", "default", "frames")  # `both` is already woken: nobody else waits for frames
    assert (await asyncio.wait_for(both, 1)).woken_by == ("t", "bulk", "mail")
    assert not other.done()
    wakeup.notify("t", "bulk", "mail")
    await asyncio.wait_for(other, 1)
    assert not wakeup.waiting


async def test_a_woken_claim_that_leaves_passes_the_wake_on() -> None:
    wakeup = Wakeup()
    leaving, staying = await _waiting(wakeup, ["frames"]), await _waiting(wakeup, ["frames"])
    wakeup.notify("t", "default", "frames")
    leaving.cancel()  # woken, but its caller is gone before it could claim
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert (await asyncio.wait_for(staying, 1)).woken_by == ("t", "default", "frames")


async def test_pass_on_wakes_the_next_claim_of_the_same_work() -> None:
    wakeup = Wakeup()
    first = await _waiting(wakeup, ["frames"])
    woken = Waiter()
    woken.woken_by = ("t", "default", "frames")
    wakeup.pass_on(woken)  # e.g. a woken claim whose claim failed
    assert (await asyncio.wait_for(first, 1)).woken_by == ("t", "default", "frames")
    wakeup.pass_on(Waiter())  # never woken: nothing to pass on, and no error


async def test_a_timeout_is_not_a_wake_and_leaves_nothing_registered() -> None:
    wakeup = Wakeup()
    waiter = await wakeup.wait("t", ["default"], ["frames"], 0.01)
    assert waiter.woken_by is None
    assert not wakeup.waiting


async def test_notify_relays_the_type_to_siblings() -> None:
    wakeup = Wakeup()
    relayed: list[tuple[str, str, str]] = []
    wakeup.relay = lambda *news: relayed.append(news)
    wakeup.notify("t", "default", "frames")
    wakeup.notify("t", "default", "mail", relay=False)
    assert relayed == [("t", "default", "frames")]


async def test_news_wakes_the_jobs_own_tenant_first_then_a_shared_fleet() -> None:
    wakeup = Wakeup()
    heard: list[tuple[str, str, str]] = []
    wakeup.heard = lambda *news: heard.append(news)
    fleet = asyncio.create_task(wakeup.wait("*", ["default"], ["frames"], LONG))
    own = await _waiting(wakeup, ["frames"])  # tenant "t", waiting after the fleet's claim
    wakeup.notify("t", "default", "frames")
    assert (await asyncio.wait_for(own, 1)).woken_by == ("t", "default", "frames")
    assert not fleet.done()
    wakeup.notify("other", "default", "frames")  # no claim of its own tenant: the fleet's
    assert (await asyncio.wait_for(fleet, 1)).woken_by == ("*", "default", "frames")
    assert heard == [("t", "default", "frames"), ("other", "default", "frames")]


async def test_room_in_a_tenants_queue_wakes_a_shared_fleets_held_claim() -> None:
    wakeup = Wakeup()
    held = asyncio.create_task(wakeup.wait("*", ["exports"], ["frames"], LONG, held=["exports"]))
    await asyncio.sleep(0)
    assert wakeup.holds("a")  # a fleet claim may take a's jobs
    wakeup.notify_held("a", "exports")
    assert (await asyncio.wait_for(held, 1)).woken_by == ("*", "exports", "")
