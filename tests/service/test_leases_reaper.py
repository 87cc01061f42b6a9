"""Leases that expire: stalled jobs, the lease-lost policies, fencing of late workers, over
real gRPC on SQLite and MariaDB.

Time is moved past a lease and its grace (`served.clock`, tests/clocks.py), never slept
through, and housekeeping runs when the test says (`housekeeping_round`; the server's own
loop is off): a check that something did *not* happen looks right after a whole round that
began past the moment that matters.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from served import housekeeping_round
from service_support import (
    LEASE_LOST,
    artifact,
    assert_invariants,
    claim,
    counted,
    events,
    get,
    kinds,
    rpc_error,
    submit,
)

from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(60)]  # reapers' guarded updates

GRACE_S = 30
LEASE_S = 30.0
ROUNDS_ON_CALL = {"reaper_interval_seconds": 0, "stall_grace_seconds": GRACE_S}  # rounds run by the test
PAST_THE_LEASE = timedelta(seconds=LEASE_S + 1)
PAST_THE_GRACE = timedelta(seconds=GRACE_S + 1)
T = TypeVar("T")


@contextmanager
def statements_of(engine: sa.Engine) -> Iterator[list[str]]:
    """The SQL text `engine` sends inside the block."""
    sent: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


async def later(s: Any, by: timedelta) -> None:
    """`by` later on the server's clock, and a whole round of housekeeping run then."""
    s.clock.advance(by)
    await housekeeping_round(s)


def retry_policy(max_attempts: int) -> job_pb2.RetryPolicy:
    return job_pb2.RetryPolicy(max_attempts=max_attempts, on_lease_lost=job_pb2.RetryPolicy.RETRY)


async def report(s: Any, lease: worker_pb2.Lease, **fields: Any) -> worker_pb2.ReportStageResponse:
    request = worker_pb2.ReportStageRequest(job_no=lease.job_no, worker_token=lease.worker_token, **fields)
    return await s.workers.ReportStage(request)


def complete(s: Any, lease: worker_pb2.Lease, uri: str = "file:///results/out.bin") -> Any:
    request = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact(uri))
    return s.workers.Complete(request)


async def assert_lease_lost(call: Any) -> None:
    assert await rpc_error(call) == LEASE_LOST


async def test_inspect_policy_keeps_a_stalled_job_for_an_operator(serve, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO)
    s = await serve(**ROUNDS_ON_CALL)
    job = await submit(s)
    [lease] = await claim(s, lease=LEASE_S)
    await report(s, lease, stage="PROCESSING", processed_units=3, total_units=10, checkpoint=b"cp-3")

    await later(s, PAST_THE_LEASE)
    # the server's log names the job, for an operator who reads logs before the trail
    said = [r.getMessage() for r in caplog.records if r.name == "jobwire.db.reaper"]
    assert f"leases expired, marked stalled: default/{job.job_no} (LEASE_EXPIRED)" in said, said
    stalled = await get(s, job.job_no)
    assert stalled.stalled and stalled.status == job_pb2.Job.RUNNING and stalled.stage == "PROCESSING"
    # ListWorkers says which of a worker's leases are stalled: a dead worker's read so at once
    (w1,) = [w for w in (await s.admin.ListWorkers(admin_pb2.ListWorkersRequest())).workers if w.worker_id == "w1"]
    assert (w1.leases_held, w1.leases_stalled) == (1, 1)
    with statements_of(s.runtime.store.db.engine) as sent:
        found = (await s.admin.Inspect(admin_pb2.InspectRequest(kinds=[admin_pb2.Finding.STALLED]))).findings
    # Security review, finding 12: Inspect read whole rows, payload and checkpoint blobs included.
    blobs = re.compile(r"job\.(payload|error_detail)\b|job\.checkpoint\s*(,|\bFROM\b)")
    assert sent and not [q for q in sent if blobs.search(q)], sent
    [finding] = [f for f in found if f.job_no == job.job_no]
    assert (finding.worker_id, finding.stage, finding.attempt) == ("w1", "PROCESSING", 1)
    assert (finding.processed_units, finding.total_units, finding.checkpoint_present) == (3, 10, True)
    assert finding.HasField("heartbeat_at") and finding.HasField("lease_expires_at")
    assert "marked stalled" in finding.detail and "INSPECT" in finding.detail
    elsewhere = await s.admin.Inspect(admin_pb2.InspectRequest(queue="other", kinds=[admin_pb2.Finding.STALLED]))
    assert list(elsewhere.findings) == []
    [expired] = [e for e in await events(s, job.job_no) if e.kind == "LEASE_EXPIRED"]
    assert expired.worker_id == "w1" and expired.attempt == 1
    facts = ("worker w1", "stage PROCESSING 2/4", "units 3/10", "checkpoint present", "attempt 1", "heartbeat")
    assert all(fact in expired.detail for fact in facts), expired.detail

    # INSPECT waits for an operator: never re-run by itself.
    await later(s, PAST_THE_GRACE)
    assert await claim(s, worker_id="w2") == []
    still = await get(s, job.job_no)
    assert still.status == job_pb2.Job.RUNNING and still.stalled and still.version == stalled.version

    requeued = await s.admin.Requeue(admin_pb2.RequeueRequest(job_no=job.job_no, reason="host w1 is gone"))
    assert requeued.status == job_pb2.Job.QUEUED and not requeued.stalled
    said = [r.getMessage() for r in caplog.records if r.name == "jobwire.jobapi.jobs"]
    assert f"job default/{job.job_no} requeued by anonymous: host w1 is gone" in said, said
    [second] = await claim(s, worker_id="w2", lease=30)
    assert second.job_no == job.job_no and second.worker_token != lease.worker_token
    assert second.checkpoint == b"cp-3" and second.attempt == 2
    await assert_lease_lost(report(s, lease, stage="PROCESSING", processed_units=4))
    await assert_lease_lost(complete(s, lease))
    assert (await complete(s, second)).status == job_pb2.Job.READY
    trail = await kinds(s, job.job_no)
    assert trail.count("LEASE_EXPIRED") == 1 and trail.count("REQUEUED") == 1
    assert trail.count("LATE_CALL_REJECTED") == 2 and trail.count("COMPLETED") == 1
    await assert_invariants(s)


async def test_retry_policy_requeues_then_fails_worker_lost(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**ROUNDS_ON_CALL)
    job = await submit(s, retry_policy=retry_policy(max_attempts=2))
    [first] = await claim(s, lease=LEASE_S)
    await report(s, first, stage="PROCESSING", processed_units=5, total_units=10, checkpoint=b"cp-5")

    await later(s, PAST_THE_LEASE)  # stalled
    await later(s, PAST_THE_GRACE)  # requeued by its RETRY policy
    queued = await get(s, job.job_no)
    assert queued.status == job_pb2.Job.QUEUED and queued.attempt == 1 and not queued.stalled and queued.stage == ""
    [second] = await claim(s, worker_id="w2", lease=LEASE_S)
    assert second.job_no == job.job_no and second.attempt == 2
    assert second.worker_token != first.worker_token
    assert int(second.worker_token.split(".")[0]) > int(first.worker_token.split(".")[0])  # a new epoch
    assert second.has_checkpoint and second.checkpoint == b"cp-5"

    # The first worker comes back: refused, and the refusals are evidence.
    await assert_lease_lost(report(s, first, stage="PROCESSING", processed_units=6))
    await assert_lease_lost(complete(s, first))
    late = [e for e in await events(s, job.job_no) if e.kind == "LATE_CALL_REJECTED"]
    assert len(late) == 2 and "epoch" in late[0].detail

    # The second worker dies too, with no attempts left.
    await later(s, PAST_THE_LEASE)
    await later(s, PAST_THE_GRACE)
    failed = await get(s, job.job_no)
    assert (
        failed.status == job_pb2.Job.FAILED
        and failed.error.category == job_pb2.JobError.WORKER_LOST
        and failed.error.retryable
    )
    assert failed.error.stage == "PREPARING" and failed.attempt == 2 and failed.HasField("finished_at")
    assert "w2" not in failed.error.message  # users see a plain message, never a worker name
    await assert_lease_lost(complete(s, second))
    assert await claim(s, worker_id="w3") == []
    trail = await kinds(s, job.job_no)
    assert trail.count("LEASE_EXPIRED") == 2
    assert trail.count("LEASE_REVOKED_REQUEUED") == 1 and trail.count("LEASE_REVOKED_FAILED") == 1
    assert trail.count("COMPLETED") == 0
    await assert_invariants(s)

    retried = await s.jobs.Retry(job_pb2.RetryRequest(job_no=job.job_no))  # WORKER_LOST is retryable
    assert retried.status == job_pb2.Job.QUEUED
    # The reaper's moves are counted as the workers' are: each once.
    moves = {move: counted(s, move) for move in ("claimed", "lease_expired", "retried", "completed")}
    assert moves == {"claimed": 2, "lease_expired": 2, "retried": 2, "completed": 0}  # a revoked lease, a Retry
    assert counted(s, "failed", category="WORKER_LOST") == 1


async def test_heartbeats_every_third_of_a_lease_keep_a_job_alive_for_ten_leases(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**ROUNDS_ON_CALL)
    jobs = [await submit(s, retry_policy=retry_policy(max_attempts=1)) for _ in range(3)]
    leases = await claim(s, lease=LEASE_S, max_jobs=3)
    assert len(leases) == 3
    assert leases[0].heartbeat_interval.ToTimedelta().total_seconds() == pytest.approx(LEASE_S / 3)
    refs = [worker_pb2.LeaseRef(job_no=lease.job_no, worker_token=lease.worker_token) for lease in leases]
    for _ in range(30):  # a heartbeat every third of a lease, for ten leases, each followed by a reaper's round
        # One heartbeat covers all of a worker's leases.
        reply = await s.workers.Heartbeat(worker_pb2.HeartbeatRequest(worker_id="w1", leases=refs))
        assert [state.state for state in reply.leases] == [worker_pb2.LeaseState.OK] * 3, "a lease was lost"
        await later(s, timedelta(seconds=LEASE_S / 3))
        for job in jobs:
            current = await get(s, job.job_no)
            assert current.status == job_pb2.Job.RUNNING and not current.stalled
    for lease in leases:
        assert (await complete(s, lease)).status == job_pb2.Job.READY
    for job in jobs:
        trail = await kinds(s, job.job_no)
        assert not {"LEASE_EXPIRED", "LEASE_REVOKED_REQUEUED", "LEASE_REVOKED_FAILED"} & set(trail)


async def test_cancel_requested_with_a_dead_worker_ends_cancelled(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**ROUNDS_ON_CALL)
    job = await submit(s)  # INSPECT: a pending cancel ends CANCELLED whatever the policy
    [lease] = await claim(s, lease=LEASE_S)
    stopping = await s.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
    assert stopping.status == job_pb2.Job.CANCEL_REQUESTED

    await later(s, PAST_THE_LEASE)
    await later(s, PAST_THE_GRACE)
    done = await get(s, job.job_no)
    assert done.status == job_pb2.Job.CANCELLED and not done.stalled and done.HasField("finished_at")
    confirm = worker_pb2.ConfirmCancelRequest(job_no=job.job_no, worker_token=lease.worker_token)
    await assert_lease_lost(s.workers.ConfirmCancel(confirm))
    await assert_lease_lost(complete(s, lease))
    trail = await kinds(s, job.job_no)
    assert trail.count("LEASE_EXPIRED") == 1 and trail.count("LEASE_REVOKED_CANCELLED") == 1
    assert trail.index("LEASE_EXPIRED") < trail.index("LEASE_REVOKED_CANCELLED")
    assert (counted(s, "lease_expired"), counted(s, "cancelled")) == (1, 1)
    await assert_invariants(s)
