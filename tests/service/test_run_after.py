"""Submit with run_after: the job waits QUEUED until then, no claim takes it early, and one takes it after.

Time is moved (`served.clock`, tests/clocks.py), not waited for, except where the waiting is
what is tested.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp
from service_support import claim, get, submit

from jobwire.v1 import job_pb2

DELAY_S = 1.5


def _ts(moment: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(moment)
    return out


def _when(ts: Timestamp) -> datetime:
    return ts.ToDatetime(tzinfo=UTC)


async def test_a_job_runs_no_sooner_than_its_run_after(served) -> None:  # type: ignore[no-untyped-def]
    run_after = served.clock.now().replace(tzinfo=UTC) + timedelta(hours=1)
    job = await submit(served, "frames", run_after=_ts(run_after))
    assert job.status == job_pb2.Job.QUEUED

    seen = await get(served, job.job_no)
    assert seen.status == job_pb2.Job.QUEUED
    assert seen.HasField("run_after")
    assert abs(_when(seen.run_after) - run_after) < timedelta(milliseconds=2), (seen.run_after, run_after)

    served.clock.advance(timedelta(minutes=59))
    assert await claim(served, "frames", max_jobs=10) == []
    assert (await get(served, job.job_no)).status == job_pb2.Job.QUEUED

    served.clock.advance(timedelta(minutes=1))
    leases = await claim(served, "frames")
    assert [lease.job_no for lease in leases] == [job.job_no]
    running = await get(served, job.job_no)
    assert running.status == job_pb2.Job.RUNNING
    assert _when(running.started_at) >= run_after
    assert not running.HasField("run_after")  # shown while QUEUED only


async def test_a_runnable_job_goes_first_even_with_lower_priority(served) -> None:  # type: ignore[no-untyped-def]
    later = served.clock.now().replace(tzinfo=UTC) + timedelta(hours=1)
    delayed = await submit(served, "frames", priority=10, run_after=_ts(later))
    ready = await submit(served, "frames", priority=0)
    first = await claim(served, "frames", max_jobs=5)
    assert [lease.job_no for lease in first] == [ready.job_no]
    served.clock.advance(timedelta(hours=1))
    leases = await claim(served, "frames", max_jobs=5)
    assert [lease.job_no for lease in leases] == [delayed.job_no]


async def test_a_run_after_in_the_past_is_runnable_at_once(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served, "frames", run_after=_ts(datetime.now(UTC) - timedelta(hours=1)))
    seen = await get(served, job.job_no)
    assert seen.status == job_pb2.Job.QUEUED
    # stored as "now": never earlier than the job itself
    assert _when(seen.run_after) >= _when(seen.created_at)
    assert [lease.job_no for lease in await claim(served, "frames")] == [job.job_no]


async def test_a_waiting_claim_is_woken_when_run_after_comes(served) -> None:  # type: ignore[no-untyped-def]
    """No poll finds it: the job's event tells the claim when it becomes runnable.

    Real time, not moved: what is tested is the pacing itself, a timer of the waiting claim's
    that fires when run_after comes (jobwire.worker.server.runnable).
    """
    run_after = datetime.now(UTC) + timedelta(seconds=DELAY_S)
    job = await submit(served, "later", run_after=_ts(run_after))
    leases = await claim(served, "later", wait=20.0)  # one claim, far longer than the delay
    answered = time.time()
    assert [lease.job_no for lease in leases] == [job.job_no]
    assert run_after.timestamp() - 0.05 <= answered < run_after.timestamp() + 1.0, answered - run_after.timestamp()
