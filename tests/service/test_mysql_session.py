"""MySQL session settings on the connections a running server really uses.

READ COMMITTED (gap locks under REPEATABLE READ deadlock inserts against claim scans) and a
strict sql_mode, on both of the server's doors to MySQL: the SQLAlchemy engine (reads, the
feed, housekeeping) and the asyncmy write pool (every state change). The server first does
real work so its pools hold the connections it made for itself; then several of each are
taken at once, so more than the most recently used one is looked at. Each setting is read
back and also shown in behaviour: a row committed elsewhere is seen by the next statement of
an open transaction, and a value too long for its column is refused rather than cut.

The MariaDB used in CI runs REPEATABLE READ by default, so the isolation checks fail if a
connection is handed out without the server's session setup.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from served import Served, start_server
from service_support import artifact, claim, submit

from jobwire.v1 import worker_pb2

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(60)]

SETTINGS_SQL = (
    "SHOW SESSION VARIABLES WHERE Variable_name IN"
    " ('tx_isolation', 'transaction_isolation', 'sql_mode', 'time_zone', 'innodb_lock_wait_timeout')"
)
STRICT = {"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"}
HELD = 3  # connections of each pool looked at together
TOO_LONG_DAY = "123456789"  # job_day_counter.day is VARCHAR(8)
TOO_LONG_INSERT = f"INSERT INTO job_day_counter (tenant, day, last_seq) VALUES ('default', '{TOO_LONG_DAY}', 1)"


@pytest.fixture
async def served_mysql(mysql_url: str) -> AsyncIterator[Served]:
    served = await start_server(mysql_url)
    try:
        # real work first: the pools then hold connections the server opened for itself
        for _ in range(3):
            job = await submit(served)
            (lease,) = await claim(served)
            assert lease.job_no == job.job_no
            await served.workers.Complete(
                worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
            )
        yield served
    finally:
        await served.close()


def check(variables: dict[str, str], where: str) -> None:
    isolation = variables.get("transaction_isolation") or variables.get("tx_isolation")
    assert isolation == "READ-COMMITTED", (where, variables)
    modes = set(variables["sql_mode"].split(","))
    assert modes & STRICT, (where, variables["sql_mode"])
    assert variables["time_zone"] == "+00:00", (where, variables)  # DATETIME(6) values are UTC


COUNTER_SQL = "SELECT last_seq FROM job_day_counter WHERE day = :day"


def commit_counter(url: sa.URL, day: str, value: int) -> None:
    """Commit a counter row in a session of its own (not one of the server's)."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO job_day_counter (tenant, day, last_seq) VALUES ('default', :d, :v)"
                    " ON DUPLICATE KEY UPDATE last_seq = VALUES(last_seq)"
                ),
                {"d": day, "v": value},
            )
    finally:
        engine.dispose()


async def set_counter(served: Served, day: str, value: int) -> None:
    await asyncio.to_thread(commit_counter, served.runtime.store.db.url, day, value)


async def test_engine_connections_read_committed_and_strict(served_mysql: Served) -> None:
    served = served_mysql
    engine = served.runtime.store.db.engine
    await set_counter(served, "ENGINE01", 1)

    def look() -> list[dict[str, Any]]:
        out = []
        with contextlib.ExitStack() as held:
            conns = [held.enter_context(engine.connect()) for _ in range(HELD)]
            for conn in conns:
                with conn.begin():
                    variables = {r[0]: r[1] for r in conn.exec_driver_sql(SETTINGS_SQL)}
                    first = conn.execute(sa.text(COUNTER_SQL), {"day": "ENGINE01"}).scalar_one()
                    commit_counter(served.runtime.store.db.url, "ENGINE01", first + 1)  # meanwhile, elsewhere
                    seen_again = conn.execute(sa.text(COUNTER_SQL), {"day": "ENGINE01"}).scalar_one()
                refused = None
                try:
                    with conn.begin():
                        conn.exec_driver_sql(TOO_LONG_INSERT)
                except sa.exc.DataError as exc:
                    refused = exc.orig.args[0]  # type: ignore[union-attr]
                out.append({"variables": variables, "first": first, "again": seen_again, "refused": refused})
        return out

    seen = await asyncio.to_thread(look)
    assert len(seen) == HELD
    for i, one in enumerate(seen):
        check(one["variables"], f"engine connection {i}")
        assert one["again"] == one["first"] + 1, ("a commit elsewhere is not seen inside the transaction", one)
        assert one["refused"] == 1406, ("a too long value was not refused (Data too long)", one)

    # the path every read of the server takes (Database.read: a transaction on a pooled connection)
    db = served.runtime.store.db
    variables = await asyncio.to_thread(db.read, lambda conn: {r[0]: r[1] for r in conn.exec_driver_sql(SETTINGS_SQL)})
    check(variables, "Database.read")


async def test_write_pool_connections_read_committed_and_strict(served_mysql: Served) -> None:
    served = served_mysql
    writes = served.runtime.store.db.writes
    await set_counter(served, "WIRE0001", 1)
    wires = [await writes.acquire() for _ in range(HELD)]  # taken together: no two are the same
    results = []
    try:
        for wire in wires:
            cursor = wire.connection.cursor()
            await cursor.execute(SETTINGS_SQL)
            variables = {r[0]: r[1] for r in await cursor.fetchall()}
            await cursor.execute("SELECT last_seq FROM job_day_counter WHERE day = 'WIRE0001'")  # begins a snapshot
            (first,) = await cursor.fetchone()
            await set_counter(served, "WIRE0001", first + 1)
            await cursor.execute("SELECT last_seq FROM job_day_counter WHERE day = 'WIRE0001'")
            (again,) = await cursor.fetchone()
            refused = None
            try:
                await cursor.execute(TOO_LONG_INSERT)
            except Exception as exc:  # noqa: BLE001 - asyncmy's DataError; its code is what matters
                refused = exc.args[0] if exc.args else repr(exc)
            await wire.connection.rollback()
            results.append({"variables": variables, "first": first, "again": again, "refused": refused})
    finally:
        for wire in wires:
            writes.release(wire, broken=False)
    for i, one in enumerate(results):
        check(one["variables"], f"write connection {i}")
        assert one["again"] == one["first"] + 1, ("a commit elsewhere is not seen inside the transaction", one)
        assert one["refused"] == 1406, ("a too long value was not refused (Data too long)", one)

    # the path every state change takes (Database.transact), on the loop like the server's own
    async def read_settings(wire: Any) -> dict[str, str]:
        cursor = wire.connection.cursor()
        await cursor.execute(SETTINGS_SQL)
        rows = await cursor.fetchall()
        await wire.connection.rollback()
        return {r[0]: r[1] for r in rows}

    check(await served.runtime.store.db.transact(read_settings), "Database.transact")
