"""A real InnoDB deadlock (1213) inside a worker call is retried whole: the call succeeds once (MariaDB only).

The lock cycle, built against the server's ReportStage (and Complete) transaction, which does
SELECT (no lock) -> UPDATE job (row lock) -> INSERT job_event [-> INSERT artifact]:

1. A raw connection R (REPEATABLE READ) makes itself heavy (inserts ballast rows, so InnoDB
   picks the server's transaction as the victim) and takes a gap lock on the end of
   job_event's primary key: every new event insert now waits on R.
2. The call runs: it locks the job row, then waits on R to insert its event.
3. R asks for the job row FOR UPDATE: R waits on the server, the server on R. Deadlock;
   the lighter server transaction is rolled back with 1213, R gets the row.
4. R rolls back; the server's retry runs whole and commits.

Asserted: the server logged its 1213 retry, the RPC is OK, the job moved exactly one version
with exactly one new visible event (and for Complete one artifact), and nothing of the
failed attempt (or of R) remains.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import pymysql
import pytest
import sqlalchemy as sa
from fault_support import claim_request, database_name, result

from jobwire.db.tables import artifact, job, job_event
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(60)]

BALLAST_ROWS = 200
T = TypeVar("T")


def _raw(database_url: str) -> pymysql.Connection:
    url = sa.make_url(database_url)
    conn = pymysql.connect(
        host=url.host or "127.0.0.1", port=url.port or 3306, user=url.username or "root",
        password=url.password or "", database=url.database, autocommit=True,
    )  # fmt: skip
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET SESSION innodb_lock_wait_timeout = 20")
    return conn


def _one(conn: pymysql.Connection, sql: str, args: object = None) -> object:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
        return row[0] if row else None


def _waiting_on_event_insert(monitor: pymysql.Connection, db: str, exclude: int) -> bool:
    """True when a transaction of the test's database (not R) waits for a lock inserting an event."""
    found = _one(
        monitor,
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t"
        " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
        " WHERE p.DB = %s AND t.trx_state = 'LOCK WAIT' AND t.trx_mysql_thread_id <> %s"
        " AND LOWER(t.trx_query) LIKE 'insert into job_event%%'",
        (db, exclude),
    )
    return bool(found)


class Cycle:
    """Deadlocks the server's next job_event insert with a raw connection R, as the module doc describes."""

    def __init__(self, database_url: str, job_id: int) -> None:
        self.url = database_url
        self.job_id = job_id

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run `call` into the deadlock; return its answer once R has rolled back."""
        r, monitor = _raw(self.url), _raw(self.url)
        try:
            r_id = int(str(_one(r, "SELECT CONNECTION_ID()")))
            with r.cursor() as cur:
                cur.execute("CREATE TABLE IF NOT EXISTS ballast (id INT AUTO_INCREMENT PRIMARY KEY, pad CHAR(200))")
                cur.execute("BEGIN")
                cur.executemany("INSERT INTO ballast (pad) VALUES (%s)", [("x" * 200,)] * BALLAST_ROWS)
                cur.execute("SELECT COALESCE(MAX(id), 0) FROM job_event")
                (last_event,) = cur.fetchone()
                cur.execute("SELECT id FROM job_event WHERE id > %s FOR UPDATE", (last_event,))  # gap to +inf
                assert cur.fetchall() == ()

            async def running() -> T:
                return await call()

            task = asyncio.create_task(running())
            db = database_name(self.url)
            give_up = time.monotonic() + 3  # well inside the server's 5 s lock wait
            while not await asyncio.to_thread(_waiting_on_event_insert, monitor, db, r_id):
                assert not task.done(), f"the call finished while its event insert should wait: {task}"
                assert time.monotonic() < give_up, "the server's transaction never waited on the job_event gap lock"
                # INNODB_TRX is a cache refreshed only when unread for 0.1 s: polling faster never sees a change
                await asyncio.sleep(0.15)

            def close_the_cycle() -> object:
                # R now waits on the job row the server holds while the server waits on R: 1213.
                try:
                    return _one(r, "SELECT id FROM job WHERE id = %s FOR UPDATE", (self.job_id,))
                except pymysql.err.OperationalError as exc:
                    return exc

            got = await asyncio.to_thread(close_the_cycle)
            assert got == self.job_id, f"R was chosen as the deadlock victim instead of the server: {got!r}"
            assert not task.done(), "the call ended while R still held the job row"
            with r.cursor() as cur:
                cur.execute("ROLLBACK")  # R leaves nothing: the server's retry can now commit
            try:
                answer = await asyncio.wait_for(task, timeout=10)
            except grpc.aio.AioRpcError as exc:
                raise AssertionError(f"the call failed after a deadlock: {exc.code()} {exc.details()}") from exc
            assert _one(monitor, "SELECT COUNT(*) FROM ballast") == 0
            return answer
        finally:
            r.close()
            monitor.close()


def _state(engine: sa.Engine, job_no: str) -> dict[str, int]:
    with engine.connect() as conn:
        job_id, version = conn.execute(sa.select(job.c.id, job.c.version).where(job.c.job_no == job_no)).one()
        count = sa.select(sa.func.count())
        return {
            "job_id": int(job_id),
            "version": int(version),
            "visible": int(conn.execute(
                count.where(job_event.c.job_id == job_id, job_event.c.visible.is_(True))
            ).scalar_one()),
            "events": int(conn.execute(count.select_from(job_event)).scalar_one()),
            "artifacts": int(conn.execute(count.select_from(artifact)).scalar_one()),
        }  # fmt: skip


def _last_event(engine: sa.Engine, job_id: int) -> dict[str, object]:
    with engine.connect() as conn:
        query = sa.select(job_event).where(job_event.c.job_id == job_id).order_by(job_event.c.id.desc()).limit(1)
        return dict(conn.execute(query).mappings().one())


def _deadlock_retries(caplog: pytest.LogCaptureFixture) -> int:
    return sum(rec.getMessage() == "retrying transaction after 1213" for rec in caplog.records)


async def _running(servers, mysql_url: str):  # type: ignore[no-untyped-def]
    s = await servers(mysql_url)
    await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))
    (lease,) = (await s.workers.Claim(claim_request(lease=30.0))).leases
    return s, lease


async def test_a_deadlock_in_report_stage_is_retried_whole_and_the_call_succeeds(  # type: ignore[no-untyped-def]
    servers, mysql_url, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.db.engine")
    s, lease = await _running(servers, mysql_url)
    engine = s.runtime.store.db.engine
    before = await asyncio.to_thread(_state, engine, lease.job_no)
    request = worker_pb2.ReportStageRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, stage=lease.stages[0].code,
        processed_units=5, total_units=10, note="under deadlock",
    )  # fmt: skip

    reply = await Cycle(mysql_url, before["job_id"]).run(lambda: s.workers.ReportStage(request, timeout=20))

    assert _deadlock_retries(caplog) >= 1, "the server never saw error 1213: no deadlock was produced"
    assert reply.cancel_requested is False and reply.HasField("lease_expires_at")
    after = await asyncio.to_thread(_state, engine, lease.job_no)
    assert after["version"] == before["version"] + 1, "the job must move exactly one version"
    assert after["visible"] == before["visible"] + 1, "exactly one new visible event"
    assert after["events"] == before["events"] + 1, "nothing of the rolled-back attempt remains"
    last = await asyncio.to_thread(_last_event, engine, before["job_id"])
    assert (last["version"], last["visible"], last["kind"]) == (after["version"], True, "PROGRESS")
    assert (last["processed_units"], last["total_units"], last["detail"]) == (5, 10, "under deadlock")
    job_seen = await s.jobs.Get(job_pb2.GetRequest(job_no=lease.job_no))
    assert job_seen.status == job_pb2.Job.RUNNING and job_seen.version == after["version"]
    assert (job_seen.progress.processed_units, job_seen.progress.total_units) == (5, 10)


async def test_a_deadlock_in_complete_is_retried_whole_with_one_artifact(  # type: ignore[no-untyped-def]
    servers, mysql_url, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.db.engine")
    s, lease = await _running(servers, mysql_url)
    engine = s.runtime.store.db.engine
    before = await asyncio.to_thread(_state, engine, lease.job_no)
    request = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=result())

    done = await Cycle(mysql_url, before["job_id"]).run(lambda: s.workers.Complete(request, timeout=20))

    assert _deadlock_retries(caplog) >= 1, "the server never saw error 1213: no deadlock was produced"
    assert done.status == job_pb2.Job.READY and done.result.uri == request.result.uri
    after = await asyncio.to_thread(_state, engine, lease.job_no)
    assert after["version"] == before["version"] + 1 == done.version
    assert after["visible"] == before["visible"] + 1
    assert after["events"] == before["events"] + 1
    assert after["artifacts"] == before["artifacts"] + 1, "exactly one artifact row"
    last = await asyncio.to_thread(_last_event, engine, before["job_id"])
    assert (last["version"], last["visible"], last["kind"]) == (after["version"], True, "COMPLETED")
    # and the worker's replay of the same Complete is answered from the ended lease, unchanged
    again = await s.workers.Complete(request, timeout=5)
    assert again.status == job_pb2.Job.READY and again.version == done.version
