"""Time limits over real gRPC on SQLite: attempts, whole jobs, and jobs without progress.

Time is moved past each limit (`served.clock`, tests/clocks.py) and a whole round of the
sweeps runs right after (`housekeeping_round`; the server's own loop is off), so a check
that something did *not* happen looks right after a round. Leases of 30 s, renewed by the
calls, so the lease reaper never acts first. Only the replicas test runs on real time: two
servers' own sweep loops racing is what it tests. That test and the sweeps' index
test run on MariaDB too (`both_databases`): their subject is the database, replicas racing on
one, and its query plans.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from served import Served, eventually, housekeeping_round
from service_support import (
    FORGED_TOKEN,
    LEASE_LOST,
    artifact,
    claim,
    db_query,
    duration,
    events,
    get,
    heartbeat,
    kinds,
    rpc_error,
    rpc_failure,
    submit,
    when,
)

from jobwire.client.status import error_info
from jobwire.db import timeouts
from jobwire.db.tables import job as job_table
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(90)

SWEEP_S = 0.1
FAST = {"reaper_interval_seconds": SWEEP_S}  # two replicas' own loops, racing (the replicas test)
ROUNDS_ON_CALL = {"reaper_interval_seconds": 0}  # the other tests run each round after moving time
LEASE_S = 30.0
TIMEOUT = job_pb2.JobError.TIMEOUT


def limits(**seconds: float) -> job_pb2.Timeouts:
    out = job_pb2.Timeouts()
    for name, value in seconds.items():
        getattr(out, name).CopyFrom(duration(value))
    return out


def retries(max_attempts: int) -> job_pb2.RetryPolicy:
    return job_pb2.RetryPolicy(max_attempts=max_attempts, initial_backoff=duration(0))


def status_is(status: job_pb2.Job.Status.ValueType) -> Any:
    return lambda job: job.status == status


async def later(s: Served, seconds: float) -> None:
    """`seconds` later on the server's clock, and a whole round of the sweeps run then."""
    s.clock.advance(timedelta(seconds=seconds))
    await housekeeping_round(s)


async def report(s: Served, lease: worker_pb2.Lease, stage: str, units: int) -> Any:
    request = worker_pb2.ReportStageRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, stage=stage, processed_units=units
    )
    return await s.workers.ReportStage(request)


def complete(s: Served, lease: worker_pb2.Lease) -> Any:
    request = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
    return s.workers.Complete(request)


async def findings(s: Served, job_no: str) -> list[admin_pb2.Finding]:
    reply = await s.admin.Inspect(admin_pb2.InspectRequest(kinds=[admin_pb2.Finding.NO_PROGRESS]))
    return [f for f in reply.findings if f.job_no == job_no]


async def assert_invariants_hold(s: Served) -> None:
    broken = [admin_pb2.Finding.RUNNING_WITHOUT_LEASE, admin_pb2.Finding.TERMINAL_WITH_TOKEN]
    assert list((await s.admin.Inspect(admin_pb2.InspectRequest(kinds=broken))).findings) == []


async def test_an_attempt_past_its_timeout_loses_its_lease_is_retried_then_fails(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**ROUNDS_ON_CALL)
    job = await submit(s, retry_policy=retries(2), timeouts=limits(attempt_timeout=20))
    [first] = await claim(s, lease=LEASE_S)
    assert first.HasField("attempt_deadline")
    await report(s, first, "PROCESSING", 3)

    await later(s, 21)
    queued = await get(s, job.job_no)
    assert queued.status == job_pb2.Job.QUEUED and queued.attempt == 1 and queued.stage == ""
    # The timed-out worker learns it at its next call; every other call of its lease is refused.
    assert (await heartbeat(s, first)).state == worker_pb2.LeaseState.TIMED_OUT
    refused = await rpc_failure(report(s, first, "PROCESSING", 4))
    info = error_info(refused)
    assert (refused.code(), info and info.reason) == LEASE_LOST
    assert info is not None and info.metadata["lease_state"] == "TIMED_OUT"
    assert await rpc_error(complete(s, first)) == LEASE_LOST
    forged = worker_pb2.LeaseRef(job_no=job.job_no, worker_token=FORGED_TOKEN)
    beat = await s.workers.Heartbeat(worker_pb2.HeartbeatRequest(worker_id="w9", leases=[forged]))
    assert beat.leases[0].state == worker_pb2.LeaseState.LOST  # no oracle for a token never issued

    [second] = await claim(s, worker_id="w2", lease=LEASE_S)
    assert second.attempt == 2 and int(second.worker_token.split(".")[0]) > int(first.worker_token.split(".")[0])
    await later(s, 21)
    failed = await get(s, job.job_no)
    assert failed.status == job_pb2.Job.FAILED
    assert (failed.error.category, failed.error.retryable, failed.error.stage) == (TIMEOUT, True, "PREPARING")
    assert failed.attempt == 2 and not failed.HasField("result")
    assert (await heartbeat(s, second, "w2")).state == worker_pb2.LeaseState.TIMED_OUT
    assert await rpc_error(complete(s, second)) == LEASE_LOST

    trail = await events(s, job.job_no)
    timed_out = [e for e in trail if e.kind == "ATTEMPT_TIMED_OUT"]
    assert [(e.from_status, e.to_status) for e in timed_out] == [
        (job_pb2.Job.RUNNING, job_pb2.Job.QUEUED),
        (job_pb2.Job.RUNNING, job_pb2.Job.FAILED),
    ]
    assert all("attempt_timeout of 20s" in e.detail and "lease revoked" in e.detail for e in timed_out)
    assert "worker w1" in timed_out[0].detail and "units 3/?" in timed_out[0].detail
    late = [e.detail for e in trail if e.kind == "LATE_CALL_REJECTED"]
    assert late and all("timed out" in d for d in late)
    await assert_invariants_hold(s)
    assert (await s.jobs.Retry(job_pb2.RetryRequest(job_no=job.job_no))).status == job_pb2.Job.QUEUED


async def test_an_attempt_past_its_timeout_with_a_cancel_pending_ends_cancelled(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**ROUNDS_ON_CALL)
    job = await submit(s, retry_policy=retries(3), timeouts=limits(attempt_timeout=20))
    [lease] = await claim(s, lease=LEASE_S)
    assert (await s.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))).status == job_pb2.Job.CANCEL_REQUESTED
    await later(s, 21)
    done = await get(s, job.job_no)
    assert done.status == job_pb2.Job.CANCELLED and not done.HasField("error")
    assert (await heartbeat(s, lease)).state == worker_pb2.LeaseState.TIMED_OUT
    assert (await kinds(s, job.job_no))[-1] == "ATTEMPT_TIMED_OUT"
    await assert_invariants_hold(s)


async def test_a_job_past_its_timeout_fails_while_queued(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**ROUNDS_ON_CALL)
    job = await submit(s, timeouts=limits(job_timeout=60))  # no worker runs frames
    await later(s, 61)
    failed = await get(s, job.job_no)
    assert failed.status == job_pb2.Job.FAILED
    assert (failed.error.category, failed.error.retryable, failed.attempt) == (TIMEOUT, False, 0)
    assert failed.error.message in failed.display.detail
    assert await rpc_error(s.jobs.Retry(job_pb2.RetryRequest(job_no=job.job_no))) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "NOT_RETRYABLE",
    )
    [timed_out] = [e for e in await events(s, job.job_no) if e.kind == "JOB_TIMED_OUT"]
    assert timed_out.from_status == job_pb2.Job.QUEUED and "job_timeout of 60s" in timed_out.detail
    assert await claim(s) == []


async def test_a_job_past_its_timeout_fails_while_running_whatever_its_retries(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**ROUNDS_ON_CALL)
    job = await submit(s, retry_policy=retries(5), timeouts=limits(job_timeout=20))
    [lease] = await claim(s, lease=LEASE_S)
    await later(s, 21)
    failed = await get(s, job.job_no)
    assert failed.status == job_pb2.Job.FAILED
    assert (failed.error.category, failed.error.retryable) == (TIMEOUT, False)
    assert (await heartbeat(s, lease)).state == worker_pb2.LeaseState.TIMED_OUT
    assert await rpc_error(complete(s, lease)) == LEASE_LOST
    assert (await kinds(s, job.job_no)).count("JOB_TIMED_OUT") == 1
    await assert_invariants_hold(s)


async def test_a_job_heartbeating_without_progress_is_a_finding_and_one_whose_units_rise_is_not(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**ROUNDS_ON_CALL)
    idle = await submit(s, timeouts=limits(stage_timeout=20))
    [idle_lease] = await claim(s, lease=LEASE_S)
    busy = await submit(s, timeouts=limits(stage_timeout=60))
    [busy_lease] = await claim(s, lease=LEASE_S)

    for _ in range(3):  # heartbeats are no progress
        assert (await heartbeat(s, idle_lease)).state == worker_pb2.LeaseState.OK
        await later(s, 7)
    [found] = [f for f in await findings(s, idle.job_no) if "marked no progress" in f.detail]
    assert (found.status, found.stage, found.worker_id) == (job_pb2.Job.RUNNING, "PREPARING", "w1")
    assert found.HasField("progress_at") and "stage timeout 20s" in found.detail and "INSPECT" in found.detail
    shown = await get(s, idle.job_no)
    assert shown.status == job_pb2.Job.RUNNING and "no progress for" in shown.display.detail
    assert "没有进展" in (await get(s, idle.job_no, locale="zh-CN")).display.detail
    [marked] = [e for e in await events(s, idle.job_no) if e.kind == "NO_PROGRESS"]
    assert marked.to_status == job_pb2.Job.RUNNING and "stage_timeout of 20s" in marked.detail

    # Units that keep rising are progress: never a finding, however many sweeps pass.
    for units in range(1, 25):
        await report(s, busy_lease, "PROCESSING", units)
        assert await findings(s, busy.job_no) == []
        await later(s, 25)  # less than its stage_timeout (and its lease) between reports, a round each time
    assert "no progress" not in (await get(s, busy.job_no)).display.detail

    # Progress again clears the finding and the line.
    await report(s, idle_lease, "PROCESSING", 1)
    assert await findings(s, idle.job_no) == []
    assert "no progress" not in (await get(s, idle.job_no)).display.detail
    assert (await complete(s, idle_lease)).status == job_pb2.Job.READY


async def test_no_progress_under_fail_ends_the_attempt_as_a_timeout(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**ROUNDS_ON_CALL)
    fail = job_pb2.Timeouts(stage_timeout=duration(20), on_no_progress=job_pb2.Timeouts.FAIL)
    job = await submit(s, retry_policy=retries(1), timeouts=fail)
    [lease] = await claim(s, lease=LEASE_S)
    await report(s, lease, "PROCESSING", 7)
    await later(s, 21)
    failed = await get(s, job.job_no)
    assert failed.status == job_pb2.Job.FAILED
    assert (failed.error.category, failed.error.retryable, failed.error.stage) == (TIMEOUT, True, "PROCESSING")
    assert (await heartbeat(s, lease)).state == worker_pb2.LeaseState.TIMED_OUT
    [ended] = [e for e in await events(s, job.job_no) if e.kind == "NO_PROGRESS"]
    assert ended.to_status == job_pb2.Job.FAILED and "on_no_progress FAIL" in ended.detail
    await assert_invariants_hold(s)


@pytest.mark.both_databases  # replicas sweeping one database
async def test_replicas_sweeping_one_database_act_once_on_each_job(serve) -> None:  # type: ignore[no-untyped-def]
    # Real time, not moved: what is tested is two replicas' own sweep loops racing on one database.
    first, second = await serve(**FAST), await serve(**FAST)
    attempts = [await submit(first, retry_policy=retries(1), timeouts=limits(attempt_timeout=0.3)) for _ in range(4)]
    idle = [await submit(first, timeouts=limits(stage_timeout=0.3)) for _ in range(4)]
    leased: list[Any] = []

    async def all_leased() -> bool:
        # A claim skips rows the other replica's sweep holds locked at that moment (SKIP
        # LOCKED): the next claim takes them.
        leased.extend(await claim(second, max_jobs=8 - len(leased), lease=LEASE_S))
        return len(leased) == 8

    await eventually(all_leased, what="all eight jobs leased by the second replica")
    for job in attempts:
        await eventually(when(second, job.job_no, status_is(job_pb2.Job.FAILED)), what="timed out")
    for job in idle:
        await eventually(when(first, job.job_no, lambda j: "no progress" in j.display.detail), what="marked")
    await asyncio.sleep(10 * SWEEP_S)  # both replicas sweep several more times: none may act again
    assert [(await kinds(first, j.job_no)).count("ATTEMPT_TIMED_OUT") for j in attempts] == [1] * 4
    assert [(await kinds(second, j.job_no)).count("NO_PROGRESS") for j in idle] == [1] * 4
    await assert_invariants_hold(first)


async def test_the_server_default_applies_to_submits_without_an_attempt_timeout(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(reaper_interval_seconds=0, default_attempt_timeout_seconds=600)
    defaulted = await submit(s, priority=2)
    unlimited = await submit(s, priority=1, timeouts=limits(attempt_timeout=0))  # zero: no limit, not even the default
    own = await submit(s, timeouts=limits(attempt_timeout=60))
    leases = {lease.job_no: lease for lease in await claim(s, max_jobs=3, lease=LEASE_S)}
    stored = await db_query(s, sa.select(job_table.c.job_no, job_table.c.attempt_timeout_s))
    assert {row["job_no"]: row["attempt_timeout_s"] for row in stored} == {
        defaulted.job_no: 600.0,
        unlimited.job_no: None,
        own.job_no: 60.0,
    }
    assert [leases[j.job_no].HasField("attempt_deadline") for j in (defaulted, unlimited, own)] == [True, False, True]


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    """The SQL text and parameters `engine` sends inside the block."""
    sent: list[tuple[str, Any]] = []

    def record(conn: object, cursor: object, statement: str, parameters: Any, *args: object) -> None:
        sent.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


@pytest.mark.parametrize(
    ("due", "index"),
    [
        (timeouts.jobs_due, "ix_job_deadline"),
        (timeouts.attempts_due, "ix_job_attempt_deadline"),
        (timeouts.progress_due, "ix_job_no_progress"),
    ],
)
@pytest.mark.both_databases  # each database's query plan for a sweep
async def test_each_sweep_finds_its_jobs_through_its_index(serve, due: Any, index: str) -> None:  # type: ignore[no-untyped-def]
    s = await serve(reaper_interval_seconds=0)
    for _ in range(3):
        await submit(s, timeouts=limits(job_timeout=600, attempt_timeout=600, stage_timeout=600))
    await claim(s, max_jobs=2, lease=LEASE_S)
    db = s.runtime.store.db
    await asyncio.to_thread(_fill, db.engine, s.is_mysql)
    with statements(db.engine) as sent:
        assert db.read(lambda conn: due(conn, 10)) == []  # nothing is due yet
    [(sql, params)] = [(q, p) for q, p in sent if "FROM job" in q]
    explain = "EXPLAIN " if s.is_mysql else "EXPLAIN QUERY PLAN "
    with db.engine.connect() as conn:
        plan = [dict(r) for r in conn.exec_driver_sql(explain + sql, params).mappings()]
    used = [r["key"] for r in plan] if s.is_mysql else [r["detail"] for r in plan]
    assert any(index in (u or "") for u in used), plan


def _fill(engine: sa.Engine, mysql: bool) -> None:
    """Thousands of finished jobs, whose old deadlines no sweep may scan."""
    with engine.begin() as conn:
        template = dict(conn.execute(sa.select(job_table).limit(1)).mappings().one())
        template.pop("id")
        rows = [{**template, "job_no": f"PT-20000101-{i:06d}", "status": "READY",
                 "idempotency_key": None} for i in range(3000)]  # fmt: skip
        conn.execute(job_table.insert(), rows)
        if mysql:
            conn.execute(sa.text("ANALYZE TABLE job"))
        else:
            conn.execute(sa.text("ANALYZE"))
