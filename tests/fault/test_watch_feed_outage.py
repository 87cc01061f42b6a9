"""The change feed loses its database connection: it reconnects and loses no event."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
import sqlalchemy as sa

from jobwire.db.engine import Database
from jobwire.db.feed import FeedReader
from jobwire.domain.errors import StoreUnavailable
from jobwire.jobapi.app import add_jobapi
from jobwire.runtime.parts import open_runtime
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2, job_pb2_grpc

pytestmark = pytest.mark.mysql

INSERT_EVENT = sa.text(
    "INSERT INTO job_event (job_id, tenant, job_no, version, kind, visible, snapshot, created_at)"
    " VALUES (1, 'default', 'PT-20261008-001', 2, 'PROGRESS', 1, :snapshot, UTC_TIMESTAMP(6))"
)


def kill_every_session(db: Database) -> int:
    """KILL every other session on this database: the server's pool and the feed's connection."""
    with db.engine.connect() as conn:
        me = conn.execute(sa.text("SELECT CONNECTION_ID()")).scalar_one()
        query = sa.text("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = :db AND ID <> :me")
        victims = [r.ID for r in conn.execute(query, {"db": db.url.database, "me": me})]
        for victim in victims:
            conn.execute(sa.text(f"KILL CONNECTION {int(victim)}"))
    return len(victims)


def test_feed_reader_reconnects_and_keeps_its_place(db: Database) -> None:
    reader = FeedReader(db)
    reader.start()
    assert reader.poll() == []
    assert reader._conn is not None
    victim = reader._conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"KILL CONNECTION {int(victim)}"))
        conn.execute(INSERT_EVENT, {"snapshot": json.dumps({"job_no": "PT-20261008-001"})})
    with pytest.raises(StoreUnavailable):
        reader.poll()  # the poll that finds the connection dead
    (row,) = reader.poll()  # a fresh connection, the same cursor: the event is not skipped
    assert row.version == 2
    reader.close()


async def test_watchers_get_changes_after_the_feed_lost_its_connection(mysql_url: str) -> None:
    rt = open_runtime(Settings(database_url=mysql_url, listen="127.0.0.1:0", feed_poll_seconds=0.02))
    add_jobapi(rt)
    port = await rt.host.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    jobs = job_pb2_grpc.JobServiceStub(channel)
    try:
        job = (await jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))).job
        call = jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=job.job_no))
        assert (await call.read()).job.status == job_pb2.Job.QUEUED
        # A fresh engine, so the killer is not one of the sessions it kills.
        killer = Database(mysql_url)
        try:
            assert await asyncio.to_thread(kill_every_session, killer) >= 1
        finally:
            killer.dispose()
        await jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
        update = await asyncio.wait_for(call.read(), 10)
        assert update.job.status == job_pb2.Job.CANCELLED
    finally:
        await channel.close()
        await rt.stop(grace=1.0)
