"""Inspect's two invariant findings, provoked: rows broken by hand are reported, healthy ones never.

RUNNING_WITHOUT_LEASE (a leased status without a token or an expiry) and TERMINAL_WITH_TOKEN
(a finished job still holding a token) are asserted empty everywhere else in the suite, so
nothing showed that Inspect finds them. Here the broken rows are written straight into the
server's database, the way a hand edit or a bug elsewhere would leave them. Housekeeping is
off (interval 0), so no reaper touches the rows between the edit and the Inspect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from db_edits import job_row, set_job
from served import Served
from service_support import artifact, assert_invariants, claim, submit

from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(60)

F = admin_pb2.Finding
S = job_pb2.Job
INVARIANTS = [F.RUNNING_WITHOUT_LEASE, F.TERMINAL_WITH_TOKEN]
NO_HOUSEKEEPING = {"reaper_interval_seconds": 0}
PARKED = "parked"  # queued jobs wait here, so claims on "default" never take them
STRAY_TOKEN = "9.c3RyYXktdG9rZW4tbGVmdC1iZWhpbmQ"


@dataclass(frozen=True)
class Broken:
    job_no: str
    kind: int  # the Finding.Kind it must produce
    status: int
    what: str  # what was broken, for messages
    names: tuple[str, ...]  # words (any one, case-insensitive) a detail must use to say what is wrong
    original: dict[str, Any]  # the overwritten columns as they were


async def _running(s: Served, queue: str = "") -> worker_pb2.Lease:
    job = await submit(s, queue=queue)
    (lease,) = await claim(s, queues=[queue] if queue else (), lease=3600)  # never expires in a test
    assert lease.job_no == job.job_no
    return lease


async def _ready(s: Served) -> str:
    lease = await _running(s)
    done = await s.workers.Complete(
        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
    )
    assert done.status == S.READY
    return lease.job_no


async def _failed(s: Served) -> str:
    lease = await _running(s)
    failed = await s.workers.Fail(
        worker_pb2.FailRequest(
            job_no=lease.job_no, worker_token=lease.worker_token, category=job_pb2.JobError.PROCESSING_ERROR,
            message="broken", retryable=False,
        )
    )  # fmt: skip
    assert failed.status == S.FAILED
    return lease.job_no


async def _cancel_requested(s: Served) -> str:
    lease = await _running(s)
    stopping = await s.jobs.Cancel(job_pb2.CancelRequest(job_no=lease.job_no))
    assert stopping.status == S.CANCEL_REQUESTED
    return lease.job_no


async def _cancelled(s: Served) -> str:
    job = await submit(s, queue=PARKED)
    done = await s.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
    assert done.status == S.CANCELLED
    return job.job_no


async def healthy_jobs(s: Served) -> list[str]:
    """One healthy job in every status."""
    return [
        (await submit(s, queue=PARKED)).job_no,
        (await _running(s)).job_no,
        await _cancel_requested(s),
        await _ready(s),
        await _failed(s),
        await _cancelled(s),
    ]


async def _break(s: Served, job_no: str, **values: Any) -> dict[str, Any]:
    """Overwrite `values` in the job's row; the columns as they were."""
    row = await job_row(s, job_no)
    await set_job(s, job_no, **values)
    return {name: row[name] for name in values}


async def broken_jobs(s: Served) -> list[Broken]:
    """Healthy jobs, then one column of each overwritten the way the invariants forbid."""
    out = []
    lost = F.RUNNING_WITHOUT_LEASE
    job_no = (await _running(s, queue="other")).job_no
    was = await _break(s, job_no, worker_token=None)
    out.append(Broken(job_no, lost, S.RUNNING, "RUNNING, no token", ("token",), was))
    job_no = (await _running(s)).job_no
    was = await _break(s, job_no, lease_expires_at=None)
    out.append(Broken(job_no, lost, S.RUNNING, "RUNNING, no lease expiry", ("lease", "expir"), was))
    job_no = await _cancel_requested(s)
    was = await _break(s, job_no, worker_token=None, lease_expires_at=None)
    out.append(Broken(job_no, lost, S.CANCEL_REQUESTED, "CANCEL_REQUESTED, no lease", ("lease",), was))
    for make, status in ((_ready, S.READY), (_failed, S.FAILED), (_cancelled, S.CANCELLED)):
        job_no = await make(s)
        was = await _break(s, job_no, worker_token=STRAY_TOKEN)
        name = S.Status.Name(status)
        out.append(Broken(job_no, F.TERMINAL_WITH_TOKEN, status, f"{name} with a token", ("token",), was))
    return out


async def inspect(s: Served, **fields: object) -> list[admin_pb2.Finding]:
    return list((await s.admin.Inspect(admin_pb2.InspectRequest(**fields))).findings)  # type: ignore[arg-type]


def keyed(findings: list[admin_pb2.Finding]) -> set[tuple[int, str]]:
    return {(f.kind, f.job_no) for f in findings}


async def test_broken_rows_are_reported_with_their_evidence_and_healthy_ones_are_not(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**NO_HOUSEKEEPING)
    healthy = await healthy_jobs(s)
    await assert_invariants(s)  # the healthy jobs alone: both findings empty, and the table agrees
    broken = await broken_jobs(s)
    healthy += await healthy_jobs(s)  # healthy jobs made after the broken ones, too

    found = await inspect(s, kinds=INVARIANTS)
    assert len(found) == len(keyed(found)), "a job reported twice for one kind"
    assert keyed(found) == {(b.kind, b.job_no) for b in broken}
    assert not {f.job_no for f in found} & set(healthy)
    for b in broken:
        (f,) = [f for f in found if f.job_no == b.job_no]
        row = await job_row(s, b.job_no)
        assert f.status == b.status, b.what
        # the evidence is the row's: where it ran, who held it, how far it got
        assert (f.queue, f.stage, f.attempt, f.worker_id) == (
            row["queue"], row["stage"] or "", row["attempt"], row["worker_id"] or ""
        ), b.what  # fmt: skip
        assert f.processed_units == row["processed_units"], b.what
        assert f.HasField("lease_expires_at") == (row["lease_expires_at"] is not None), b.what
        assert f.HasField("heartbeat_at") == (row["heartbeat_at"] is not None), b.what

    # each kind on its own, and every kind at once (no lease here is expired: no STALLED either)
    assert keyed(await inspect(s, kinds=[F.RUNNING_WITHOUT_LEASE])) == {
        (b.kind, b.job_no) for b in broken if b.kind == F.RUNNING_WITHOUT_LEASE
    }
    assert keyed(await inspect(s, kinds=[F.TERMINAL_WITH_TOKEN])) == {
        (b.kind, b.job_no) for b in broken if b.kind == F.TERMINAL_WITH_TOKEN
    }
    # (its QUEUED jobs have never been claimed for, so every kind includes NO_WORKER for them:
    # test_no_worker.py tests those)
    assert {k for k in keyed(await inspect(s)) if k[0] != F.NO_WORKER} == keyed(found)
    # the queue filter: only the broken job of queue "other"
    assert keyed(await inspect(s, queue="other", kinds=INVARIANTS)) == {(broken[0].kind, broken[0].job_no)}
    assert broken[0].job_no not in {f.job_no for f in await inspect(s, queue="default", kinds=INVARIANTS)}

    # Put the rows right again: the findings follow the data, and the table agrees.
    for b in broken:
        await set_job(s, b.job_no, **b.original)
    await assert_invariants(s)
    assert [f for f in await inspect(s) if f.kind != F.NO_WORKER] == []


async def test_each_invariant_finding_says_what_is_wrong(serve) -> None:  # type: ignore[no-untyped-def]
    """An operator reads `detail` to decide: it must not be empty, and must name the broken
    part (the token, the lease) and, for a finished job, its status."""
    s = await serve(**NO_HOUSEKEEPING)
    broken = await broken_jobs(s)
    found = {f.job_no: f for f in await inspect(s, kinds=INVARIANTS)}
    assert set(found) == {b.job_no for b in broken}
    unexplained = []
    for b in broken:
        detail = found[b.job_no].detail
        says = detail.lower()
        if not detail or not any(word in says for word in b.names):
            unexplained.append(f"{b.what}: detail={detail!r}")
        elif b.kind == F.TERMINAL_WITH_TOKEN and S.Status.Name(b.status).lower() not in says:
            unexplained.append(f"{b.what}: detail={detail!r} does not name the status")
    assert unexplained == [], "\n".join(unexplained)
