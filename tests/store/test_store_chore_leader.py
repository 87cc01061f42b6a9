"""The chore leader's lease row (jobwire.db.chore_leases): two stores over one database stand
as two serving processes would. Time is moved past a lease, never waited for (it still
flows, so a term is checked against the time it was read at)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import sqlalchemy as sa
from clocks import MovableClock

from jobwire.db.chore_leases import Term
from jobwire.db.store import JobStore
from jobwire.db.tables import chore_leader

LEASE = timedelta(seconds=15)
A, B = "host-a:1:aaaa", "host-b:2:bbbb"


def elect(store: JobStore, candidate: str, *, holding: bool = False, name: str = "housekeeping") -> Term:
    return store.elect_chore_leader(name, candidate, LEASE, holding=holding)


def stored(store: JobStore, name: str = "housekeeping") -> dict[str, object]:
    query = sa.select(chore_leader).where(chore_leader.c.name == name)
    return dict(store.db.read(lambda conn: conn.execute(query).mappings().one()))


async def test_of_two_candidates_at_once_one_wins_and_both_know_it(store: JobStore, replica: JobStore) -> None:
    for round_ in range(10):  # each a race on a row nobody made yet
        name = f"chores-{round_}"
        a, b = await asyncio.gather(
            asyncio.to_thread(elect, store, A, name=name), asyncio.to_thread(elect, replica, B, name=name)
        )
        assert a.holder == b.holder in (A, B)
        assert stored(store, name)["holder"] == a.holder


async def test_the_holder_renews_and_the_other_candidate_learns_until_when(
    store: JobStore, replica: JobStore, clock: MovableClock
) -> None:
    first = elect(store, A)
    assert first.holder == A and first.expires_at == first.now + LEASE
    clock.advance(timedelta(seconds=5))
    renewed = elect(store, A, holding=True)
    assert renewed.holder == A and renewed.expires_at == renewed.now + LEASE >= first.expires_at + timedelta(seconds=5)
    seen = elect(replica, B)
    assert (seen.holder, seen.expires_at) == (A, renewed.expires_at)  # B waits out A's lease, no sooner
    assert stored(store)["elected_at"] == first.now  # a renewal is no new election


async def test_a_lease_past_its_end_is_taken_over(store: JobStore, replica: JobStore, clock: MovableClock) -> None:
    held = elect(store, A)
    clock.advance(LEASE - timedelta(seconds=1))
    assert elect(replica, B).holder == A  # not yet
    clock.advance(timedelta(seconds=1))
    taken = elect(replica, B)
    assert taken.holder == B and taken.expires_at == taken.now + LEASE >= held.expires_at + LEASE
    assert stored(store)["elected_at"] == taken.now


async def test_a_replaced_holder_renews_nothing(store: JobStore, replica: JobStore, clock: MovableClock) -> None:
    elect(store, A)
    clock.advance(LEASE + timedelta(seconds=1))  # A was paused past its lease; B took it
    taken = elect(replica, B)
    clock.advance(timedelta(seconds=1))
    stale = elect(store, A, holding=True)
    assert (stale.holder, stale.expires_at) == (B, taken.expires_at)  # refused, and B's lease not extended
    assert stored(store)["holder"] == B


async def test_a_resigned_lease_is_free_at_once(store: JobStore, replica: JobStore) -> None:
    elect(store, A)
    assert not replica.resign_chore_leader("housekeeping", B)  # only the holder can give it up
    assert elect(replica, B).holder == A
    assert store.resign_chore_leader("housekeeping", A)
    assert elect(replica, B).holder == B  # no time moved: not waited out


async def test_each_set_of_chores_has_a_lease_of_its_own(store: JobStore, replica: JobStore) -> None:
    assert elect(store, A, name="housekeeping").holder == A
    assert elect(replica, B, name="schedules").holder == B
    assert elect(replica, B, name="housekeeping").holder == A
