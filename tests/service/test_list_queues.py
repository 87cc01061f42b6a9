"""AdminService.ListQueues: the console's queue overview, checked against the job rows themselves.

Jobs are made, run, ended and then moved in time by hand (their created_at and finished_at),
so the per-minute figures can be recomputed from the table and must agree minute by minute.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from db_edits import db_execute
from served import Served
from service_support import artifact, db_query, rpc_error, rpc_failure

from jobwire.db.tables import job
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(60)
ADMIN = Token("acme-admin", tenant="acme", role="admin")
CLIENT = Token("acme-client", tenant="acme")
WORKER = Token("acme-worker", tenant="acme", role="worker")
EXPORTS_ADMIN = Token("acme-exports-admin", tenant="acme", role="admin", queues=("exports",))
OTHER = Token("globex-client", tenant="globex")


@pytest.fixture
async def served(serve: Callable[..., Awaitable[Served]], tmp_path: Path) -> Served:
    auth = write_auth_file(tmp_path / "auth.toml", [ADMIN, CLIENT, WORKER, EXPORTS_ADMIN, OTHER])
    return await serve(auth_file=auth)


async def _submit(s: Served, queue: str, token: Token = CLIENT, **fields: object) -> str:
    request = job_pb2.SubmitRequest(job_type="frames", queue=queue, **fields)  # type: ignore[arg-type]
    return (await s.jobs.Submit(request, metadata=token.metadata)).job.job_no


async def _claim(s: Served, queue: str) -> worker_pb2.Lease:
    request = worker_pb2.ClaimRequest(
        worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name="frames")], queues=[queue], max_jobs=1
    )
    (lease,) = (await s.workers.Claim(request, metadata=WORKER.metadata)).leases
    return lease


async def _overview(s: Served, token: Token = ADMIN, **fields: object) -> admin_pb2.ListQueuesResponse:
    return await s.admin.ListQueues(admin_pb2.ListQueuesRequest(**fields), metadata=token.metadata)  # type: ignore[arg-type]


async def _fill(s: Served) -> None:
    """In `exports`: 1 queued, 1 running, 2 READY, 1 FAILED, 1 CANCELLED; in `mail`: 1 queued.
    Then spread over the last hour (and one job two hours back, outside it)."""
    for _ in range(6):
        await _submit(s, "exports")
    await _submit(s, "mail")
    await _submit(s, "exports", OTHER)  # another tenant's, in a queue of the same name
    for _ in range(2):
        lease = await _claim(s, "exports")
        await s.workers.Complete(
            worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact()),
            metadata=WORKER.metadata,
        )
    lease = await _claim(s, "exports")
    await s.workers.Fail(
        worker_pb2.FailRequest(
            job_no=lease.job_no, worker_token=lease.worker_token, message="boom", retryable=False,
            category=job_pb2.JobError.PROCESSING_ERROR,
        ),
        metadata=WORKER.metadata,
    )  # fmt: skip
    await _claim(s, "exports")  # one running
    acme = [r for r in await _rows(s) if r["tenant"] == "acme"]
    queued = next(r for r in acme if r["status"] == "QUEUED" and r["queue"] == "exports")
    await s.jobs.Cancel(job_pb2.CancelRequest(job_no=queued["job_no"]), metadata=CLIENT.metadata)

    now = s.clock.now()
    for i, row in enumerate(r for r in await _rows(s) if r["tenant"] == "acme"):
        made = now - timedelta(minutes=4 + 7 * i, seconds=13 * i)
        values = {"created_at": made, "run_after": made}
        if row["finished_at"] is not None:
            values["finished_at"] = made + timedelta(minutes=3, seconds=50)
        await db_execute(s, sa.update(job).where(job.c.id == row["id"]).values(**values))
    oldest = sorted((r for r in await _rows(s) if r["tenant"] == "acme"), key=lambda r: r["id"])[0]
    await db_execute(s, sa.update(job).where(job.c.id == oldest["id"]).values(created_at=now - timedelta(hours=2)))


async def _rows(s: Served) -> list[dict[str, object]]:
    return await db_query(s, sa.select(job).order_by(job.c.id))  # type: ignore[no-any-return]


def _minute(at: datetime, start: datetime) -> int:
    return int((at - start).total_seconds() // 60)


async def test_the_minutes_and_counts_agree_with_the_job_rows(served: Served) -> None:
    await _fill(served)
    reply = await _overview(served)
    assert [q.queue for q in reply.queues] == ["exports", "mail"]

    rows = [r for r in await _rows(served) if r["tenant"] == "acme"]
    read_at = reply.read_at.ToDatetime()
    for summary in reply.queues:
        assert len(summary.minutes) == 60
        start = summary.minutes[0].minute.ToDatetime()
        assert start == read_at.replace(second=0, microsecond=0) - timedelta(minutes=59)
        mine = [r for r in rows if r["queue"] == summary.queue]
        made: Counter[int] = Counter()
        ended: Counter[tuple[str, int]] = Counter()
        for r in mine:
            if r["created_at"] >= start:  # type: ignore[operator]
                made[_minute(r["created_at"], start)] += 1  # type: ignore[arg-type]
            if r["status"] in ("READY", "FAILED") and r["finished_at"] >= start:  # type: ignore[operator]
                ended[str(r["status"]), _minute(r["finished_at"], start)] += 1  # type: ignore[arg-type]
        assert {i: m.submitted for i, m in enumerate(summary.minutes) if m.submitted} == dict(made)
        assert {i: m.finished for i, m in enumerate(summary.minutes) if m.finished} == {
            i: n for (status, i), n in ended.items() if status == "READY"
        }
        assert {i: m.failed for i, m in enumerate(summary.minutes) if m.failed} == {
            i: n for (status, i), n in ended.items() if status == "FAILED"
        }
        assert summary.finished == sum(m.finished for m in summary.minutes)
        assert summary.failed == sum(m.failed for m in summary.minutes)

        by_status = Counter(str(r["status"]) for r in mine)
        assert summary.queued == by_status["QUEUED"]
        assert summary.running == by_status["RUNNING"] + by_status["CANCEL_REQUESTED"]
        runnable = [r["run_after"] for r in mine if r["status"] == "QUEUED"]
        oldest_s = (read_at - min(runnable)).total_seconds()  # type: ignore[type-var,operator]
        assert summary.oldest_runnable_age.ToTimedelta().total_seconds() == pytest.approx(oldest_s, abs=1e-3)

    exports = reply.queues[0]
    assert (exports.queued, exports.running, exports.finished, exports.failed) == (1, 1, 2, 1)
    assert sum(m.submitted for m in exports.minutes) == 5  # of 6: the one made two hours ago is outside the hour
    assert (reply.queues[1].queued, reply.queues[1].running) == (1, 0)


async def test_limits_pause_and_a_wider_window_show(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.jobapi.jobs")
    await _submit(served, "exports")
    await served.admin.PauseQueue(admin_pb2.PauseQueueRequest(queue="exports"), metadata=ADMIN.metadata)
    said = [r.getMessage() for r in caplog.records if r.name == "jobwire.jobapi.jobs"]
    assert len(said) == 1 and said[0].startswith("queue exports of tenant acme paused by "), said  # for the logs
    limits = admin_pb2.QueueLimits(max_running=3, rate_per_second=2.5, burst=4)
    await served.admin.SetQueueLimits(
        admin_pb2.SetQueueLimitsRequest(queue="idle", limits=limits), metadata=ADMIN.metadata
    )
    reply = await _overview(served, minutes=1440)
    exports, idle = reply.queues  # a queue with limits and no job is listed too
    assert exports.paused and not idle.paused
    assert (idle.queue, idle.limits.max_running, idle.limits.rate_per_second, idle.limits.burst) == ("idle", 3, 2.5, 4)
    assert len(exports.minutes) == 1440 and sum(m.submitted for m in exports.minutes) == 1
    assert not idle.HasField("oldest_runnable_age")
    one = await _overview(served, queue="idle")
    assert [q.queue for q in one.queues] == ["idle"]


async def test_a_token_sees_only_its_tenant_and_queues(served: Served) -> None:
    await _submit(served, "exports")
    await _submit(served, "mail")
    await _submit(served, "secret", OTHER)
    assert [q.queue for q in (await _overview(served)).queues] == ["exports", "mail"]
    assert [q.queue for q in (await _overview(served, EXPORTS_ADMIN)).queues] == ["exports"]
    code, _ = await rpc_error(_overview(served, EXPORTS_ADMIN, queue="mail"))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, _ = await rpc_error(_overview(served, CLIENT))
    assert code == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"minutes": -1}, "minutes"), ({"minutes": 1441}, "minutes"), ({"queue": "no spaces"}, "queue")],
)
async def test_bad_input_is_invalid_argument_naming_the_field(
    served: Served, fields: dict[str, object], named: str
) -> None:
    failure = await rpc_failure(_overview(served, **fields))
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in str(failure.details())
