"""Retention: terminal jobs, their events and artifact rows go once due, in small batches.

Jobs are made old by moving `finished_at` back with SQL; the purge runs in a thread while
a worker keeps claiming and completing over gRPC, as it would in production.
"""

from __future__ import annotations

import asyncio
import math
import threading
from datetime import timedelta
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from served import eventually
from service_support import artifact, claim, submit

from jobwire.db.retention import ExpiredArtifact, Retention
from jobwire.db.store import JobStore, Submit
from jobwire.db.tables import artifact as artifact_table
from jobwire.db.tables import job, job_dependency, job_event
from jobwire.domain.commands import NewJob
from jobwire.domain.states import Status
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(60)]  # purges in batches beside claims (row locks)

STUCK_URI = "file:///results/stuck.bin"
deleted_by_setting: list[ExpiredArtifact] = []


def record_deletion(expired: ExpiredArtifact) -> None:
    """A deleter named by JOBWIRE_ARTIFACT_DELETER in the background test."""
    deleted_by_setting.append(expired)


async def finished_jobs(store: JobStore, status: str, age_days: float, n: int, *, uri: str | None = None) -> list[str]:
    """`n` jobs that ended in `status` `age_days` ago (READY ones with an artifact row)."""
    new = NewJob(tenant="default", job_type="old", queue="default", payload=b"x")
    (answers,) = await store.apply([Submit([new] * n)])
    nos = [job.job_no for job, _ in answers]
    with store.db.engine.begin() as conn:
        ended = store.now() - timedelta(days=age_days)
        conn.execute(sa.update(job).where(job.c.job_no.in_(nos)).values(status=status, finished_at=ended))
        if status == "READY":
            ids = conn.execute(sa.select(job.c.id, job.c.job_no).where(job.c.job_no.in_(nos))).all()
            conn.execute(sa.insert(artifact_table), [
                {"job_id": i, "uri": uri or f"file:///results/{no}.bin", "size_bytes": 1, "sha256": "ab" * 32,
                 "content_type": "", "summary": "", "created_at": ended}
                for i, no in ids
            ])  # fmt: skip
    return nos


def remaining(store: JobStore, nos: list[str]) -> tuple[int, int, int]:
    """(jobs, events, artifacts) still stored for these job numbers."""
    with store.db.engine.connect() as conn:
        ids = list(conn.execute(sa.select(job.c.id).where(job.c.job_no.in_(nos))).scalars())
        events = conn.execute(sa.select(sa.func.count()).where(job_event.c.job_no.in_(nos))).scalar_one()
        files = conn.execute(sa.select(sa.func.count()).where(artifact_table.c.job_id.in_(ids))).scalar_one()
    return len(ids), events, files


class Deleter:
    """Records what it deletes and cannot delete STUCK_URI. Its first call holds the purge
    mid-run (between a batch's read and its write) until the test lets it go on."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.lock = threading.Lock()
        self.holding = threading.Event()
        self.go_on = threading.Event()

    def __call__(self, expired: ExpiredArtifact) -> None:
        if not self.holding.is_set():
            self.holding.set()
            assert self.go_on.wait(30), "the test never let the purge go on"
        if expired.uri == STUCK_URI:
            raise OSError("permission denied")
        with self.lock:
            self.deleted.append(expired.job_no)


async def test_retention_purges_only_what_is_due_in_batches_while_claims_continue(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(reaper_interval_seconds=0)  # the purge is run by hand here
    store: JobStore = s.runtime.store
    ready_due = await finished_jobs(store, "READY", 31, 119)
    stuck = await finished_jobs(store, "READY", 31, 1, uri=STUCK_URI)
    ready_young = await finished_jobs(store, "READY", 29, 10)
    cancelled_due = await finished_jobs(store, "CANCELLED", 31, 20)
    failed_young = await finished_jobs(store, "FAILED", 31, 10)  # FAILED is kept 90 days
    failed_due = await finished_jobs(store, "FAILED", 91, 15)
    live = await submit(s)  # a queued job is never purged, however old

    deleter = Deleter()
    purge = asyncio.create_task(asyncio.to_thread(store.purge_expired, Retention(), deleter, batch=25))

    async def a_worker_cycle() -> None:
        fresh = await submit(s, job_type="fresh")
        # On MariaDB a claim skips rows the purge's transaction holds locked (SKIP LOCKED) and
        # a worker's next claim takes them: so does this one.
        [lease] = await eventually(lambda: claim(s, "fresh"), what="the fresh job claimed")
        request = worker_pb2.CompleteRequest(job_no=fresh.job_no, worker_token=lease.worker_token, result=artifact())
        assert (await s.workers.Complete(request)).status == job_pb2.Job.READY

    assert await asyncio.to_thread(deleter.holding.wait, 10), "the purge never reached its first file"
    await a_worker_cycle()  # a worker goes on while the purge is mid-run
    deleter.go_on.set()
    while not purge.done():  # and while it runs on
        await a_worker_cycle()
    purged = await asyncio.wait_for(purge, 30)

    assert (purged.jobs, purged.kept) == (119 + 20 + 15, 1)
    assert purged.artifacts == 119 and purged.events >= purged.jobs
    assert purged.batches == math.ceil(120 / 25) + 1 + 1  # READY, CANCELLED, FAILED: 25 jobs a transaction
    assert sorted(deleter.deleted) == sorted(ready_due)
    assert remaining(store, ready_due + cancelled_due + failed_due) == (0, 0, 0)
    assert remaining(store, stuck) == (1, 1, 1)  # its file could not go: nor do its rows
    assert remaining(store, ready_young)[::2] == (10, 10)
    assert remaining(store, failed_young)[0] == 10
    assert (await s.jobs.Get(job_pb2.GetRequest(job_no=live.job_no))).status == job_pb2.Job.QUEUED

    again = await asyncio.to_thread(store.purge_expired, Retention(), lambda expired: None)
    assert (again.jobs, again.kept) == (1, 0)
    assert remaining(store, stuck) == (0, 0, 0)


async def test_every_server_purges_by_the_configured_retention(serve) -> None:  # type: ignore[no-untyped-def]
    deleted_by_setting.clear()
    s = await serve(  # the server's own housekeeping loop, on a day's retention and moved time
        reaper_interval_seconds=0.2,
        retention_ready_days=1,
        artifact_deleter="test_leases_retention:record_deletion",
    )
    job = await submit(s)
    [lease] = await claim(s)
    request = worker_pb2.CompleteRequest(job_no=job.job_no, worker_token=lease.worker_token, result=artifact())
    await s.workers.Complete(request)
    failing = await submit(s, job_type="other")
    [other] = await claim(s, "other")
    await s.workers.Fail(worker_pb2.FailRequest(job_no=failing.job_no, worker_token=other.worker_token, message="no"))

    async def purged() -> bool:
        return await _get_code(s, job.job_no) is grpc.StatusCode.NOT_FOUND

    assert not await purged()
    s.clock.advance(timedelta(days=1, seconds=1))
    await eventually(purged, what="the READY job purged by the server's own housekeeping")
    assert [d.job_no for d in deleted_by_setting] == [job.job_no]
    assert (await s.jobs.Get(job_pb2.GetRequest(job_no=failing.job_no))).status == job_pb2.Job.FAILED


async def _get_code(s: Any, job_no: str) -> grpc.StatusCode:
    try:
        await s.jobs.Get(job_pb2.GetRequest(job_no=job_no))
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_retention_settings_come_from_the_environment() -> None:
    env = {"JOBWIRE_RETENTION_READY_DAYS": "7", "JOBWIRE_RETENTION_CANCELLED_DAYS": "1.5",
           "JOBWIRE_RETENTION_FAILED_DAYS": "180", "JOBWIRE_ARTIFACT_DELETER": "mymod:delete"}  # fmt: skip
    settings = Settings.from_env(env)
    assert (settings.retention_ready_days, settings.retention_cancelled_days) == (7, 1.5)
    assert (settings.retention_failed_days, settings.artifact_deleter) == (180, "mymod:delete")
    defaults = Settings.from_env({})
    days = (defaults.retention_ready_days, defaults.retention_cancelled_days, defaults.retention_failed_days)
    assert days == (30, 30, 90)
    forever = Retention.days(ready=0, cancelled=1.5, failed=-1).by_status()
    assert forever == {Status.CANCELLED: timedelta(days=1.5)}  # zero or less: never purged


async def test_purged_jobs_leave_no_dependency_edges(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(reaper_interval_seconds=0)
    store: JobStore = s.runtime.store
    first = await submit(s)
    then = await submit(s, depends_on=[first.job_no])
    for _ in range(2):  # `first`, then `then` once it may run
        [lease] = await claim(s)
        request = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
        assert (await s.workers.Complete(request)).status == job_pb2.Job.READY
    nos = [first.job_no, then.job_no]
    with store.db.engine.begin() as conn:
        conn.execute(sa.update(job).where(job.c.job_no.in_(nos)).values(finished_at=store.now() - timedelta(days=31)))
        assert conn.execute(sa.select(sa.func.count()).select_from(job_dependency)).scalar_one() == 1
    purged = await asyncio.to_thread(store.purge_expired, Retention(), lambda expired: None)
    assert purged.jobs == 2
    with store.db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(job_dependency)).scalar_one() == 0
