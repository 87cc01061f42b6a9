"""Claims race each other honestly: one job is leased once, whatever the number of claimers.

Every claimer has a channel of its own, so the calls really arrive at the same time.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import grpc
import pytest
import sqlalchemy as sa
from served import start_server
from service_support import (
    LEASE_LOST,
    artifact,
    assert_invariants,
    claim,
    db_query,
    get,
    open_stubs,
    stop_server,
    submit,
)

from jobwire.client.status import error_reason
from jobwire.db.tables import artifact as artifact_table
from jobwire.db.tables import job, job_event
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = pytest.mark.both_databases  # racing claims and endings on one database


async def test_eight_concurrent_claims_of_one_job_lease_it_once(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served, "solo")
    claimers = await open_stubs(served.target, 8)
    try:
        results = await asyncio.gather(*(claim(c, "solo", worker_id=f"w{i}") for i, c in enumerate(claimers)))
    finally:
        for c in claimers:
            await c.close()
    leases = [lease for batch in results for lease in batch]
    assert [lease.job_no for lease in leases] == [job.job_no]
    seen = await get(served, job.job_no)
    assert seen.status == job_pb2.Job.RUNNING and seen.attempt == 1 and seen.version == job.version + 1
    claimed = await db_query(served, sa.select(job_event.c.kind).where(job_event.c.job_no == job.job_no))
    assert [r["kind"] for r in claimed] == ["SUBMITTED", "CLAIMED"]


async def test_concurrent_batch_claims_never_share_a_job(served) -> None:  # type: ignore[no-untyped-def]
    """Fewer jobs than the claimers ask for together: each job goes to exactly one of them."""
    submitted = {(await submit(served, "batch")).job_no for _ in range(10)}
    claimers = await open_stubs(served.target, 8)
    try:
        results = await asyncio.gather(
            *(claim(c, "batch", worker_id=f"w{i}", max_jobs=3) for i, c in enumerate(claimers))
        )
    finally:
        for c in claimers:
            await c.close()
    leased = Counter(lease.job_no for batch in results for lease in batch)
    assert set(leased) == submitted and set(leased.values()) == {1}
    tokens = [lease.worker_token for batch in results for lease in batch]
    assert len(set(tokens)) == len(tokens)


JOBS = 500
CLAIMERS = 8


@pytest.mark.mysql
async def test_eight_claimers_drain_500_jobs_on_mariadb_each_leased_once(mysql_url: str) -> None:
    served = await start_server(mysql_url)
    stubs = await open_stubs(served.target, CLAIMERS)
    try:
        submitters = stubs  # submit over the same separate channels, 8 at a time
        job_nos: list[str] = []
        for start in range(0, JOBS, 50):
            replies = await asyncio.gather(
                *(
                    submitters[i % CLAIMERS].jobs.Submit(job_pb2.SubmitRequest(job_type="drain", payload=b"%d" % i))
                    for i in range(start, min(JOBS, start + 50))
                )
            )
            job_nos += [r.job.job_no for r in replies]
        assert len(set(job_nos)) == JOBS

        leased: list[tuple[str, str]] = []  # (worker, job_no)

        async def drain(i: int) -> None:
            worker = f"drainer-{i}"
            while True:
                # Batches of 1 to 4 mix single and multi-row SKIP LOCKED claims.
                batch = await claim(stubs[i], "drain", worker_id=worker, max_jobs=1 + i % 4)
                if not batch:
                    return
                for lease in batch:
                    leased.append((worker, lease.job_no))
                    done = await stubs[i].workers.Complete(
                        worker_pb2.CompleteRequest(
                            job_no=lease.job_no,
                            worker_token=lease.worker_token,
                            result=artifact(),
                        )
                    )
                    assert done.status == job_pb2.Job.READY

        await asyncio.gather(*(drain(i) for i in range(CLAIMERS)))

        per_job = Counter(job_no for _, job_no in leased)
        assert len(leased) == JOBS, f"{len(leased)} leases for {JOBS} jobs"
        assert set(per_job) == set(job_nos) and set(per_job.values()) == {1}
        assert len({w for w, _ in leased}) > 1, "one claimer drained everything: no race was tested"

        statuses = await db_query(served, sa.select(job.c.status, sa.func.count().label("n")).group_by(job.c.status))
        assert {r["status"]: r["n"] for r in statuses} == {"READY": JOBS}
        claims = await db_query(
            served,
            (
                sa.select(job_event.c.job_no, sa.func.count().label("n"))
                .where(job_event.c.kind == "CLAIMED")
                .group_by(job_event.c.job_no)
            ),
        )
        assert {r["job_no"]: r["n"] for r in claims} == dict.fromkeys(job_nos, 1)
        await assert_invariants(served)
    finally:
        for s in stubs:
            await s.close()
        await stop_server(served)


async def _ending_calls(stubs, job_no: str, token: str, name: str):  # type: ignore[no-untyped-def]
    calls = {
        "Complete": lambda s: s.workers.Complete(
            worker_pb2.CompleteRequest(job_no=job_no, worker_token=token, result=artifact())
        ),
        "Fail": lambda s: s.workers.Fail(worker_pb2.FailRequest(job_no=job_no, worker_token=token, message="boom")),
        "ConfirmCancel": lambda s: s.workers.ConfirmCancel(
            worker_pb2.ConfirmCancelRequest(job_no=job_no, worker_token=token)
        ),
        "Release": lambda s: s.workers.Release(worker_pb2.ReleaseRequest(job_no=job_no, worker_token=token)),
    }
    return await asyncio.gather(*(calls[name](s) for s in stubs), return_exceptions=True)


async def test_concurrent_replays_of_an_ending_call_all_return_the_same_job(served) -> None:  # type: ignore[no-untyped-def]
    """A worker that retries a Complete whose first try is still in flight: every try gets the
    same job, one artifact row and one ending event exist (never INTERNAL from a duplicate row)."""
    stubs = await open_stubs(served.target, 8)
    try:
        for name in ("Complete", "Fail", "ConfirmCancel", "Release"):
            for i in range(3):
                job = await submit(served, f"race-{name}-{i}")
                (lease,) = await claim(served, f"race-{name}-{i}")
                assert lease.job_no == job.job_no
                if name == "ConfirmCancel":
                    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
                results = await _ending_calls(stubs, job.job_no, lease.worker_token, name)
                errors = [r for r in results if isinstance(r, Exception)]
                assert not errors, f"{name}: {errors[0]}"
                assert len({(r.status, r.version) for r in results}) == 1, name
                events = await db_query(served, sa.select(job_event.c.kind).where(job_event.c.job_no == job.job_no))
                assert len(events) == 3 + (name == "ConfirmCancel"), (name, events)
    finally:
        for s in stubs:
            await s.close()
    artifacts = await db_query(served, sa.select(sa.func.count().label("n")).select_from(artifact_table))
    assert artifacts == [{"n": 3}]
    await assert_invariants(served)


async def test_racing_different_endings_one_wins_the_rest_lose_the_lease(served) -> None:  # type: ignore[no-untyped-def]
    stubs = await open_stubs(served.target, 4)
    try:
        for i in range(5):
            job = await submit(served, f"contest-{i}")
            (lease,) = await claim(served, f"contest-{i}")
            assert lease.job_no == job.job_no
            n, t = job.job_no, lease.worker_token
            results = await asyncio.gather(
                stubs[0].workers.Complete(worker_pb2.CompleteRequest(job_no=n, worker_token=t, result=artifact())),
                stubs[1].workers.Fail(worker_pb2.FailRequest(job_no=n, worker_token=t, message="boom")),
                stubs[2].workers.Release(worker_pb2.ReleaseRequest(job_no=n, worker_token=t)),
                stubs[3].jobs.Cancel(job_pb2.CancelRequest(job_no=n)),
                return_exceptions=True,
            )
            worker_wins = [r for r in results[:3] if isinstance(r, job_pb2.Job)]
            lost = [r for r in results[:3] if isinstance(r, grpc.aio.AioRpcError)]
            assert len(worker_wins) == 1 and len(lost) == 2, results
            assert all((e.code(), error_reason(e)) == LEASE_LOST for e in lost)
            final = await get(served, n)
            assert final.version == max(
                [worker_wins[0].version] + ([results[3].version] if isinstance(results[3], job_pb2.Job) else [])
            )
            assert final.status in (job_pb2.Job.READY, job_pb2.Job.FAILED, job_pb2.Job.QUEUED, job_pb2.Job.CANCELLED)
    finally:
        for s in stubs:
            await s.close()
    await assert_invariants(served)
