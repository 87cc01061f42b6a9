"""The chore leader among servers on one database: one runs housekeeping and the schedule
loop, another stands by at about no cost, a clean stop hands over at once, and a holder
whose lease was taken stops its chores.

Leadership is paced in real seconds (a renewal, a standby's asking), so these wait for it,
bounded; the lease row's rules by moved time are tests/store/test_store_chore_leader.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from served import Served, eventually, start_server
from sqlalchemy import event

from jobwire.db.tables import chore_leader

pytestmark = pytest.mark.both_databases  # a leader chosen through the database

CHORES = ("housekeeping", "schedules")
Serve = Callable[..., Awaitable[Served]]


def leads(s: Served) -> set[str]:
    return {chores for chores in CHORES if s.runtime.host.metrics.is_chore_leader(chores)}


async def leading_all(s: Served) -> None:
    async def probe() -> bool:
        return leads(s) == set(CHORES)

    await eventually(probe, what="the first server leads every set of chores")


async def settled(s: Served) -> None:
    """`s` has started: asked for each set of chores once, and checked the database once (its
    first health check, before any statement had reached it, sends one of its own)."""
    registry = s.runtime.host.metrics.registry

    async def probe() -> bool:
        asked = all(registry.get_sample_value("jobwire_chore_leader", {"chores": c}) is not None for c in CHORES)
        return asked and registry.get_sample_value("jobwire_database_up") == 1

    await eventually(probe, what="the server asked for its chores and checked the database")


def not_chores(statement: str) -> bool:
    """What any serving process runs, leader or not: a transaction's BEGIN, the event tail's
    poll (watch streams, waiting claims), a reading of the database clock (MySQL)."""
    return statement.startswith("BEGIN") or "FROM job_event" in statement or "UTC_TIMESTAMP" in statement


@contextlib.contextmanager
def statements(s: Served) -> Iterator[list[str]]:
    """The statements `s` sends the database while the block runs, but for `not_chores`."""
    seen: list[str] = []

    def note(conn: object, cursor: object, statement: str, *_: object) -> None:
        if not not_chores(statement):
            seen.append(statement)

    engine = s.runtime.store.db.engine
    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


@pytest.fixture
async def leader(database_url: str) -> AsyncIterator[Served]:
    """A server that leads every set of chores, which the test may stop itself."""
    s = await start_server(database_url, chore_lease_seconds=3.0)
    try:
        await leading_all(s)
        yield s
    finally:
        with contextlib.suppress(Exception):  # stopped by the test already
            await s.close()


async def test_a_standby_sends_the_database_nothing_but_its_asking(serve: Serve) -> None:
    a = await serve()
    await leading_all(a)
    b = await serve()
    await settled(b)
    with statements(a) as by_leader, statements(b) as by_standby:
        await asyncio.sleep(3.0)  # the leader's schedule rounds (every 1 s) against the standby's asking (every 5 s)
    assert leads(b) == set()
    assert by_leader, "the count sees no statement of a server that leads"
    assert len(by_standby) <= len(CHORES), by_standby  # at most one question per lease, none of the chores
    assert all("FROM chore_leader" in statement for statement in by_standby), by_standby


async def test_a_clean_stop_hands_the_chores_over_without_waiting_out_the_lease(leader: Served, serve: Serve) -> None:
    standby = await serve(chore_lease_seconds=3.0)
    held = _rows(leader)
    await leader.close()

    async def taken() -> bool:
        return leads(standby) == set(CHORES)

    await eventually(taken, timeout=5, what="the standby took over")
    for chores, row in _rows(standby).items():
        assert row.holder != held[chores].holder
        assert row.elected_at < held[chores].expires_at  # the resigned lease was free before its end


async def test_a_holder_whose_lease_was_taken_stops_its_chores_at_once(leader: Served) -> None:
    db = leader.runtime.store.db
    later = db.clock.now() + timedelta(hours=1)
    taken = sa.update(chore_leader).values(holder="another-host:1:ffff", expires_at=later)
    db.write(lambda conn: conn.execute(taken))  # as if another process had taken both while this one was paused

    async def stepped_down() -> bool:
        return not leads(leader)

    await eventually(stepped_down, timeout=3, what="the holder saw its renewal refused")
    with statements(leader) as sent:
        await asyncio.sleep(1.5)  # past a schedule round (1 s) and a renewal (1 s)
    assert all("FROM chore_leader" in statement for statement in sent), sent  # no chore ran
    assert {row.holder for row in _rows(leader).values()} == {"another-host:1:ffff"}  # nor was the lease renewed


def _rows(s: Served) -> dict[str, sa.Row[tuple[str, str, object, object]]]:
    query = sa.select(chore_leader)
    return {row.name: row for row in s.runtime.store.db.read(lambda conn: conn.execute(query).all())}
