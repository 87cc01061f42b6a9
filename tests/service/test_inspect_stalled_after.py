"""Inspect's `stalled_after`: a lease past its expiry by at least that long is reported, a fresher one is not.

The contract (admin.proto): "a lease past expiry by at least this". Time passes two ways,
neither by sleeping: the lease times of a row are set in the database (minutes apart, so
no margin depends on how fast this machine is), and the server's clock is moved past a
lease (`served.clock`, tests/clocks.py). Housekeeping is off (interval 0): no reaper marks
or requeues anything while the test looks.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import grpc
import pytest
from db_edits import job_row, set_job
from served import Served
from service_support import claim, duration, rpc_error, submit

from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(60)

F = admin_pb2.Finding
NO_HOUSEKEEPING = {"reaper_interval_seconds": 0}
OVERDUE = re.compile(r"lease expired (\d+\.\d)s ago")


async def stalled(s: Served, after: float | None = None) -> dict[str, admin_pb2.Finding]:
    request = admin_pb2.InspectRequest(kinds=[F.STALLED])
    if after is not None:
        request.stalled_after.CopyFrom(duration(after))
    return {f.job_no: f for f in (await s.admin.Inspect(request)).findings}


async def claimed(s: Served, lease: float) -> worker_pb2.Lease:
    job = await submit(s)
    (got,) = await claim(s, lease=lease)
    assert got.job_no == job.job_no
    return got


def overdue(finding: admin_pb2.Finding) -> float:
    found = OVERDUE.search(finding.detail)
    assert found, finding.detail
    return float(found.group(1))


def close_to(stamp: object, expected: datetime) -> bool:
    return abs(stamp.ToDatetime() - expected) < timedelta(milliseconds=2)  # type: ignore[attr-defined]


async def test_only_leases_past_expiry_by_stalled_after_are_reported(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**NO_HOUSEKEEPING)
    long_ago, lately, cancelling, fresh = [await claimed(s, lease=30) for _ in range(3)] + [await claimed(s, 3600)]
    await s.jobs.Cancel(job_pb2.CancelRequest(job_no=cancelling.job_no))  # CANCEL_REQUESTED holds a lease too
    now = s.runtime.store.now()  # the database clock, as the server keeps it
    expiries = {long_ago.job_no: 600, lately.job_no: 20, cancelling.job_no: 900}
    times = {}
    for job_no, ago in expiries.items():
        expires = now - timedelta(seconds=ago)
        times[job_no] = (expires - timedelta(seconds=30), expires)  # (heartbeat_at, lease_expires_at)
        await set_job(s, job_no, heartbeat_at=times[job_no][0], lease_expires_at=expires)

    assert set(await stalled(s)) == set(expiries)  # unset: every expired lease
    assert set(await stalled(s, 0)) == set(expiries)
    assert set(await stalled(s, 120)) == {long_ago.job_no, cancelling.job_no}
    assert set(await stalled(s, 700)) == {cancelling.job_no}
    assert await stalled(s, 1000) == {}
    assert fresh.job_no not in await stalled(s)

    found = await stalled(s, 120)
    for job_no in (long_ago.job_no, cancelling.job_no):
        f = found[job_no]
        heartbeat_at, expires = times[job_no]
        assert close_to(f.heartbeat_at, heartbeat_at) and close_to(f.lease_expires_at, expires)
        assert f.worker_id == "w1" and f.attempt == 1
        # how long ago, by the database clock; minutes of margin for a slow machine
        assert expiries[job_no] <= overdue(f) < expiries[job_no] + 60, f.detail
        assert "not yet marked stalled" in f.detail
    assert found[long_ago.job_no].status == job_pb2.Job.RUNNING and "policy INSPECT" in found[long_ago.job_no].detail
    assert found[cancelling.job_no].status == job_pb2.Job.CANCEL_REQUESTED
    assert "ends CANCELLED" in found[cancelling.job_no].detail

    # The holder speaks again: its lease runs from now, and it is fresh at any stalled_after.
    ref = worker_pb2.LeaseRef(job_no=long_ago.job_no, worker_token=long_ago.worker_token)
    beat = await s.workers.Heartbeat(worker_pb2.HeartbeatRequest(worker_id="w1", leases=[ref]))
    assert [state.state for state in beat.leases] == [worker_pb2.LeaseState.OK]
    assert (await job_row(s, long_ago.job_no))["lease_expires_at"] > now
    assert long_ago.job_no not in await stalled(s)
    assert set(await stalled(s, 10)) == {lately.job_no, cancelling.job_no}


async def test_a_short_lease_is_reported_once_it_is_past_stalled_after_and_a_long_one_never(serve) -> None:  # type: ignore[no-untyped-def]
    s = await serve(**NO_HOUSEKEEPING)
    fresh = await claimed(s, lease=3600)
    short = await claimed(s, lease=30)
    s.clock.advance(timedelta(seconds=30.5))  # expired half a second ago
    assert short.job_no in await stalled(s) and short.job_no not in await stalled(s, 1.0)
    s.clock.advance(timedelta(seconds=1))
    finding = (await stalled(s, 1.0))[short.job_no]
    assert 1.5 <= overdue(finding) < 60, finding.detail  # never before stalled_after had passed
    assert fresh.job_no not in await stalled(s)  # nor at stalled_after 0
    # Seconds past expiry, not an hour.
    assert short.job_no not in await stalled(s, 3600)


async def test_stalled_after_out_of_range_is_invalid(served) -> None:  # type: ignore[no-untyped-def]
    for seconds in (-1.0, 367 * 86_400.0):
        request = admin_pb2.InspectRequest(stalled_after=duration(seconds))
        assert await rpc_error(served.admin.Inspect(request)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
