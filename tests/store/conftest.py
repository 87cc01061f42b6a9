"""The store tier: JobStore's rules tested directly, one suite for SQLite and MariaDB.

No server and no gRPC: a test calls the store as a use case would (`store.apply` with the
calls of jobwire.db.store) and reads what it returns (JobRecord, Lease, LeaseStatus, a
refusal). Time is moved, never slept through: `clock.advance(...)` (tests/clocks.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import sqlalchemy as sa
from clocks import MovableClock, movable_clock

from jobwire.db.store import JobStore, open_store
from jobwire.db.tables import job, job_event

Row = dict[str, Any]


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[JobStore]:
    """A store over this test's database (SQLite, then MariaDB), on a clock the test moves."""
    opened = open_store(database_url)
    movable_clock(opened)
    try:
        yield opened
    finally:
        await opened.db.close()


@pytest.fixture
async def replica(database_url: str, store: JobStore) -> AsyncIterator[JobStore]:
    """A second store over the same database, as another server process would hold one
    (its own connections and row cache), on the same moved time as `store`."""
    other = open_store(database_url, migrate=False)
    other.db.clock = store.db.clock
    try:
        yield other
    finally:
        await other.db.close()


@pytest.fixture
def clock(store: JobStore) -> MovableClock:
    """The store's time, to move forward."""
    moved = store.db.clock
    assert isinstance(moved, MovableClock)
    return moved


@pytest.fixture
def row(store: JobStore) -> Callable[[str], Row]:
    """`row(job_no)`: the job's stored columns, for what no JobRecord shows (tokens, epochs,
    deadlines, the lease's expiry, flags)."""

    def read(job_no: str) -> Row:
        found = store.db.read(lambda conn: conn.execute(sa.select(job).where(job.c.job_no == job_no)).mappings().one())
        return dict(found)

    return read


@pytest.fixture
def trail(store: JobStore) -> Callable[[str], list[Row]]:
    """`trail(job_no)`: every event row of the job in order, evidence included (kind, to_status,
    detail, visible)."""

    def read(job_no: str) -> list[Row]:
        query = sa.select(job_event).where(job_event.c.job_no == job_no).order_by(job_event.c.id)
        return [dict(r) for r in store.db.read(lambda conn: conn.execute(query).mappings().all())]

    return read
