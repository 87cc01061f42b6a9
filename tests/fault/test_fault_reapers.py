"""Two reapers on one database: every expired lease is handled once.

One process of all replicas keeps house (jobwire.runtime.leadership), but at a handover a
deposed leader may still be at it: here the leader's reaper and a second one run every
50 ms over the same expired leases; each action is a guarded UPDATE, so counting the
events proves that no job was marked or acted on twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fault_support import claim_all
from served import eventually

from jobwire.db.changes import JobOp
from jobwire.db.reaper import ApplyPolicy, MarkStalled
from jobwire.db.retention import keep_files
from jobwire.db.sql import Lock
from jobwire.db.store import Call
from jobwire.db.tables import job, job_event
from jobwire.domain.evidence import EventKind
from jobwire.runtime.housekeeping import Housekeeping
from jobwire.v1 import job_pb2

pytestmark = pytest.mark.timeout(60)

FAST = {"reaper_interval_seconds": 0.05, "stall_grace_seconds": 0.3}
EACH = 15
EXPECTED = {  # group -> (status when done, the policy event it gets, if any)
    "inspect": ("RUNNING", None),
    "retry_last": ("FAILED", EventKind.LEASE_REVOKED_FAILED),
    "retry": ("QUEUED", EventKind.LEASE_REVOKED_REQUEUED),
    "cancel": ("CANCELLED", EventKind.LEASE_REVOKED_CANCELLED),
}


def policy(group: str) -> job_pb2.RetryPolicy | None:
    if group.startswith("retry"):
        attempts = 1 if group == "retry_last" else 3
        return job_pb2.RetryPolicy(max_attempts=attempts, on_lease_lost=job_pb2.RetryPolicy.RETRY)
    return None


async def test_two_reapers_handle_each_expired_lease_exactly_once(servers, database_url) -> None:  # type: ignore[no-untyped-def]
    a = await servers(database_url, **FAST)
    b = await servers(database_url, **FAST)
    rt = b.runtime  # a second reaper beside the leader's, as a deposed leader's would be
    deposed = asyncio.create_task(
        Housekeeping(rt.store, rt.blocking, rt.settings, deleter=keep_files, metrics=rt.host.metrics.jobs).run()
    )
    groups: dict[str, str] = {}
    for group in EXPECTED:
        for _ in range(EACH):
            submitted = await a.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", retry_policy=policy(group)))
            groups[submitted.job.job_no] = group
    leases = await claim_all(b, len(groups), lease=1.0)
    assert len(leases) == len(groups)
    for job_no, group in groups.items():
        if group == "cancel":
            await b.jobs.Cancel(job_pb2.CancelRequest(job_no=job_no))

    engine = a.runtime.store.db.engine

    async def settled() -> bool:
        with engine.connect() as conn:
            now = {
                r.job_no: (r.status, r.stalled)
                for r in conn.execute(sa.select(job.c.job_no, job.c.status, job.c.stalled))
            }
        done = all(now[n][0] == EXPECTED[g][0] for n, g in groups.items())
        return done and all(now[n][1] for n, g in groups.items() if g == "inspect")

    await eventually(settled, timeout=15, what="every expired lease handled")
    await eventually(_quiet(engine), timeout=5, what="the reapers have nothing left to do")
    deposed.cancel()

    with engine.connect() as conn:
        counted = Counter(conn.execute(sa.select(job_event.c.job_no, job_event.c.kind)).all())
        reapers = {d.rsplit("reaper ", 1)[1].split(";")[0] for (d,) in conn.execute(
            sa.select(job_event.c.detail).where(job_event.c.kind == EventKind.LEASE_EXPIRED)
        )}  # fmt: skip
    for job_no, group in groups.items():
        assert counted[job_no, EventKind.LEASE_EXPIRED] == 1, job_no
        revoked = (EventKind.LEASE_REVOKED_REQUEUED, EventKind.LEASE_REVOKED_FAILED, EventKind.LEASE_REVOKED_CANCELLED)
        for kind in revoked:
            assert counted[job_no, kind] == (1 if kind == EXPECTED[group][1] else 0), (job_no, kind)
    assert 1 <= len(reapers) <= 2


async def test_the_guarded_update_alone_lets_one_of_many_reapers_act(servers, database_url) -> None:  # type: ignore[no-untyped-def]
    # Without SKIP LOCKED every contender reads the same row and tries: the guards must decide.
    s = await servers(database_url, reaper_interval_seconds=0)
    policy = job_pb2.RetryPolicy(max_attempts=2, on_lease_lost=job_pb2.RetryPolicy.RETRY)
    nos = [
        (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", retry_policy=policy))).job.job_no
        for _ in range(5)
    ]
    leases = await claim_all(s, 5, lease=1.0)
    assert len(leases) == 5
    store = s.runtime.store
    expiry = max(lease.lease_expires_at.ToDatetime() for lease in leases)

    async def expired() -> bool:  # on the database's clock, which the reapers' guards read
        return await asyncio.to_thread(store.now) > expiry

    await eventually(expired, what="every lease past its expiry")

    async def contend(make: Callable[[str, str], JobOp[Any]]) -> list[object]:
        """Eight contenders per job, each in a transaction of its own, reading without a lock."""
        calls = [store.apply([Call([make(job_no, f"r{n}")])]) for n in range(8) for job_no in nos]
        return [done[0][0] for done in await asyncio.gather(*calls)]

    marked = await contend(lambda job_no, by: MarkStalled(tenant="default", job_no=job_no, by=by, lock=Lock.NONE))
    assert marked.count(EventKind.LEASE_EXPIRED) == len(nos) and marked.count(None) == 7 * len(nos)
    acted = await contend(
        lambda job_no, by: ApplyPolicy(tenant="default", job_no=job_no, grace=timedelta(0), by=by, lock=Lock.NONE)
    )
    assert acted.count(EventKind.LEASE_REVOKED_REQUEUED) == len(nos) and acted.count(None) == 7 * len(nos)


def _quiet(engine: sa.Engine):  # type: ignore[no-untyped-def]
    """A probe true once no reaper event was written for a few reaper rounds."""
    seen: list[int] = []

    async def probe() -> bool:
        with engine.connect() as conn:
            seen.append(conn.execute(sa.select(sa.func.count()).select_from(job_event)).scalar_one())
        return len(seen) >= 6 and len(set(seen[-6:])) == 1

    return probe
