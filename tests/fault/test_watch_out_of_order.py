"""job_event rows whose auto-increment ids commit out of order are not lost.

Transaction A inserts an event (the lower id) and stays open; transaction B inserts one
(the higher id) and commits; the feed reads and moves past B; then A commits. A reader
that only asks for `id > last_seen` would never see A.
"""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest
import sqlalchemy as sa

from jobwire.db.changes import apply_ops
from jobwire.db.engine import Database
from jobwire.db.feed import FeedReader
from jobwire.db.sql import BLOBS
from jobwire.db.user_actions import Cancel
from jobwire.domain.commands import Scope
from jobwire.jobapi.app import add_jobapi
from jobwire.process_state.evidence_limit import EvidenceLimit
from jobwire.process_state.row_cache import RowCache
from jobwire.runtime.parts import open_runtime
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2, job_pb2_grpc

pytestmark = pytest.mark.mysql

INSERT_EVENT = sa.text(
    "INSERT INTO job_event (job_id, tenant, job_no, version, kind, visible, snapshot, created_at)"
    " VALUES (:job_id, 'default', :job_no, :version, 'PROGRESS', :visible, :snapshot, UTC_TIMESTAMP(6))"
)


def insert(conn: sa.Connection, job_id: int, visible: bool = True) -> int:
    snapshot = json.dumps({"job_no": f"PT-20261008-{job_id:03d}"}) if visible else None
    values = {
        "job_id": job_id,
        "job_no": f"PT-20261008-{job_id:03d}",
        "version": 2,
        "visible": visible,
        "snapshot": snapshot,
    }
    return int(conn.execute(INSERT_EVENT, values).lastrowid)


def test_feed_delivers_a_row_that_commits_after_a_higher_id(db: Database) -> None:
    reader = FeedReader(db, grace_s=60)
    reader.start()
    with db.engine.connect() as a, db.engine.connect() as b:
        tx_a = a.begin()
        low = insert(a, 1)
        with b.begin():
            high = insert(b, 2)
        assert low < high
        assert [r.id for r in reader.poll()] == [high]  # A is still in flight: a gap
        assert low in reader.cursor.gaps  # type: ignore[union-attr]
        assert reader.poll() == []
        tx_a.commit()
    assert [r.id for r in reader.poll()] == [low]
    assert reader.cursor.gaps == {}  # type: ignore[union-attr]
    reader.close()


def test_rolled_back_ids_and_invisible_rows_are_not_waited_for_forever(db: Database) -> None:
    reader = FeedReader(db, grace_s=0.3)
    reader.start()
    with db.engine.connect() as a, db.engine.connect() as b:
        tx_a = a.begin()
        never = insert(a, 1)
        with b.begin():
            evidence = insert(b, 2, visible=False)
            shown = insert(b, 3)
        tx_a.rollback()
    assert [r.id for r in reader.poll()] == [shown]  # the invisible row is read, not delivered
    assert set(reader.cursor.gaps) == {never}  # type: ignore[union-attr]
    assert evidence not in reader.cursor.gaps  # type: ignore[union-attr]
    time.sleep(0.4)  # time passing is what is tested: past the 0.3 s grace, a gap is given up
    assert reader.poll() == [] and reader.cursor.gaps == {}  # type: ignore[union-attr]
    reader.close()


def test_a_row_in_flight_when_the_feed_starts_is_delivered(db: Database) -> None:
    with db.engine.connect() as a, db.engine.connect() as b:
        tx_a = a.begin()
        low = insert(a, 1)
        with b.begin():
            insert(b, 2)
        reader = FeedReader(db)
        reader.start()  # its start position is past A's id
        tx_a.commit()
    assert [r.id for r in reader.poll()] == [low]
    reader.close()


async def test_a_watcher_gets_a_change_that_committed_late(mysql_url: str) -> None:
    rt = open_runtime(Settings(database_url=mysql_url, listen="127.0.0.1:0", feed_poll_seconds=0.02))
    add_jobapi(rt)
    port = await rt.host.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    jobs = job_pb2_grpc.JobServiceStub(channel)
    try:
        x = (await jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))).job
        y = (await jobs.Submit(job_pb2.SubmitRequest(job_type="frames"))).job
        watch_x = jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=x.job_no))
        watch_y = jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=y.job_no))
        assert (await watch_x.read()).job.status == job_pb2.Job.QUEUED
        assert (await watch_y.read()).job.status == job_pb2.Job.QUEUED

        db = rt.store.db
        a = await db.writes.acquire()
        try:
            # A: X's cancel, its event with the lower id, left uncommitted (its COMMIT waits below)
            a.commit = a.run  # type: ignore[method-assign,assignment]
            cancel = [Cancel(scope=Scope(tenant="default"), job_no=x.job_no)]
            await apply_ops(a, cancel, now=db.clock.now(), cache=RowCache(blobs=BLOBS), evidence=EvidenceLimit())
            await jobs.Cancel(job_pb2.CancelRequest(job_no=y.job_no))  # B: higher id, committed
            assert (await asyncio.wait_for(watch_y.read(), 10)).job.status == job_pb2.Job.CANCELLED
            for _ in range(3):  # several more polls pass A's id by
                await asyncio.wait_for(rt.tail.sync(), 10)
            await a.connection.commit()
        finally:
            db.writes.release(a, broken=False)
        late = await asyncio.wait_for(watch_x.read(), 10)
        assert (late.job.status, late.job.version) == (job_pb2.Job.CANCELLED, 2)
        ids = rt.store.db.read(lambda c: c.execute(sa.text(
            "SELECT job_no, id FROM job_event WHERE kind = 'CANCELLED'")).all())  # fmt: skip
        by_job = dict(ids)  # type: ignore[arg-type]
        assert by_job[x.job_no] < by_job[y.job_no], "the commits were not out of order: the test proves nothing"
    finally:
        await channel.close()
        await rt.stop(grace=1.0)
