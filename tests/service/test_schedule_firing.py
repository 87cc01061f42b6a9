"""Schedules firing from live servers: once per period across two replicas, SKIP holding
while a job runs, paused schedules silent, and catch-up after a firing no server was up for;
and, with a round driven by hand (`ScheduleLoop.tick`), one tenant's many due schedules not
holding back another's one, and a late fire time fired while loops ran but missed when none did.

Replicas are two runtimes over one database, each with its own schedule loop (a short
interval, so the tests wait on conditions in seconds). Waits are bounded polls on what
the database holds; the every-2-s test waits for real periods.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from db_edits import db_execute
from served import Served, eventually, start_server
from service_support import claim, complete_request, db_query, duration

from jobwire.db.tables import job, schedule, schedule_run
from jobwire.jobapi.firing import BATCH, ScheduleLoop
from jobwire.jobapi.jobs import Jobs
from jobwire.v1 import job_pb2, schedule_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(90)]  # replicas firing from one database

S = schedule_pb2.Schedule
LIVE = {"schedule_interval_seconds": 0.2}
QUIET = {"schedule_interval_seconds": 0}


def every(
    schedule_id: str, seconds: float, job_type: str = "tick", **fields: object
) -> schedule_pb2.CreateScheduleRequest:
    return schedule_pb2.CreateScheduleRequest(
        schedule_id=schedule_id, every=duration(seconds), template=job_pb2.SubmitRequest(job_type=job_type), **fields
    )  # type: ignore[arg-type]


async def keys(served: Served, schedule_id: str) -> list[str]:
    """The idempotency keys of the schedule's jobs, one row each (a duplicate would show twice)."""
    rows = await db_query(
        served, sa.select(job.c.idempotency_key).where(job.c.idempotency_key.like(f"{schedule_id}@%"))
    )
    return sorted(str(r["idempotency_key"]) for r in rows)


def fire_time(key: str) -> datetime:
    return datetime.fromisoformat(key.partition("@")[2].removesuffix("Z"))


async def get(served: Served, schedule_id: str) -> schedule_pb2.Schedule:
    return await served.schedules.GetSchedule(schedule_pb2.ScheduleRef(schedule_id=schedule_id))


async def test_every_2s_on_two_replicas_fires_once_per_period(serve) -> None:  # type: ignore[no-untyped-def]
    first, second = await serve(**LIVE), await serve(**LIVE)
    await first.schedules.CreateSchedule(every("tick", 2, overlap=S.ALLOW))

    async def four_periods() -> list[str] | None:
        found = await keys(second, "tick")
        return found if len(found) >= 4 else None

    found = await eventually(four_periods, timeout=30, what="four firings")
    times = [fire_time(k) for k in found]
    assert len(set(times)) == len(found)  # one job per fire time
    # consecutive: none missed, and no extra firing between (a replica keying by its own clock would show here)
    assert all(b - a == timedelta(seconds=2) for a, b in itertools.pairwise(times))
    made = (await get(first, "tick")).created_at.ToDatetime()
    assert all((t - made) % timedelta(seconds=2) == timedelta(0) for t in times)  # created_at + k * every
    both = [s.runtime.host.metrics.firings("submitted") for s in (first, second)]
    assert (
        len(found) - 1 <= sum(both) <= len(found)
    )  # each fire time advanced by one replica (the last may be in flight)


async def test_skip_holds_while_the_previous_job_runs_and_fires_again_once_it_ends(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(**LIVE)
    await served.schedules.CreateSchedule(every("held", 1, job_type="held", overlap=S.SKIP))

    async def first_job() -> str | None:
        return (await get(served, "held")).last_job_no or None

    job_no = await eventually(first_job, what="the first firing")
    (lease,) = await claim(served, "held")
    assert lease.job_no == job_no  # RUNNING now, and kept so by its lease

    async def skipped_twice() -> schedule_pb2.Schedule | None:
        now = await get(served, "held")
        # the round counts a skip once its advance has committed: the row shows it first
        counted = served.runtime.host.metrics.firings("skipped_overlap")
        return now if now.skipped_firings >= 2 and counted >= 2 else None

    held = await eventually(skipped_twice, what="two skipped firings, counted")
    assert held.last_job_no == job_no
    assert len(await keys(served, "held")) == 1
    await served.workers.Complete(complete_request(lease))

    async def next_job() -> str | None:
        now = (await get(served, "held")).last_job_no
        return now if now != job_no else None

    await eventually(next_job, what="a firing after the job ended")
    assert len(await keys(served, "held")) == 2


async def test_a_paused_schedule_does_not_fire_and_fires_again_once_resumed(serve) -> None:  # type: ignore[no-untyped-def]
    quiet = await serve(**QUIET)
    await quiet.schedules.CreateSchedule(every("paused", 1, overlap=S.ALLOW))
    await quiet.schedules.PauseSchedule(schedule_pb2.ScheduleRef(schedule_id="paused"))
    live = await serve(**LIVE)
    await live.schedules.CreateSchedule(every("control", 1, overlap=S.ALLOW))

    async def control_fired_thrice() -> bool:
        return len(await keys(live, "control")) >= 3

    await eventually(control_fired_thrice, what="three firings of the control")  # rounds ran past its fire times
    assert await keys(live, "paused") == []
    resumed = await live.schedules.ResumeSchedule(schedule_pb2.ScheduleRef(schedule_id="paused"))
    assert resumed.next_fire_time.ToDatetime() > live.runtime.store.now() - timedelta(seconds=1)

    async def fired() -> bool:
        return len(await keys(live, "paused")) >= 1

    await eventually(fired, what="a firing after resume")


@pytest.mark.parametrize(("catch_up", "jobs"), [(S.ONE, 1), (S.NONE, 0)], ids=["ONE", "NONE"])
async def test_a_replica_started_after_missed_firings_catches_up_per_catch_up(serve, catch_up: int, jobs: int) -> None:  # type: ignore[no-untyped-def]
    quiet = await serve(**QUIET)
    await quiet.schedules.CreateSchedule(every("hourly", 3600, catch_up=catch_up, overlap=S.ALLOW))
    # As if made 3 h 5 min ago with no server running since: three fire times passed, the last 5 min ago.
    made = quiet.runtime.store.now().replace(microsecond=0) - timedelta(hours=3, minutes=5)
    await db_execute(quiet, sa.update(schedule).values(created_at=made, next_fire_at=made + timedelta(hours=1)))
    live = await serve(**LIVE)

    outcome = "submitted" if jobs else "missed"

    async def advanced() -> schedule_pb2.Schedule | None:
        now = await get(live, "hourly")
        # counted once the advance has committed: the row shows it first
        counted = live.runtime.host.metrics.firings(outcome)
        return now if now.next_fire_time.ToDatetime() > live.runtime.store.now() and counted else None

    moved = await eventually(advanced, what="the schedule moved past now")
    assert moved.next_fire_time.ToDatetime() == made + timedelta(hours=4)
    found = await keys(live, "hourly")
    assert len(found) == jobs
    if jobs:
        assert [fire_time(k) for k in found] == [made + timedelta(hours=3)]  # the latest missed fire time
        assert moved.last_job_no and moved.last_fire_time.ToDatetime() == made + timedelta(hours=3)
    assert live.runtime.host.metrics.firings(outcome) == 1
    assert moved.missed_firings == (0 if jobs else 1)


# -- a round driven by hand ------------------------------------------------------------------------

ACME = Token("firing-acme-client-7d2", tenant="acme")
GLOBEX = Token("firing-globex-client-7d2", tenant="globex")


@pytest.fixture
async def tenants(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    auth = write_auth_file(tmp_path / "auth.toml", [ACME, GLOBEX])
    served = await start_server(database_url, auth_file=auth, **QUIET)
    try:
        yield served
    finally:
        await served.close()


def loop_of(served: Served, batch: int = BATCH) -> ScheduleLoop:
    """A schedule loop over the server's own store, group commit and metrics, for the test to tick."""
    rt = served.runtime
    jobs = Jobs(
        rt.store, rt.blocking, rt.commits, rt.wakeup,
        no_worker_after=timedelta(minutes=5), worker_gone_after=timedelta(minutes=1),
    )  # fmt: skip
    return ScheduleLoop(jobs, replace(rt.settings, schedule_interval_seconds=1.0), rt.host.metrics, batch=batch)


def now_of(served: Served) -> datetime:
    return served.runtime.store.now().replace(microsecond=0)


async def test_one_tenants_many_due_schedules_do_not_hold_back_anothers_one(tenants: Served) -> None:
    for i in range(30):
        await tenants.schedules.CreateSchedule(every(f"a{i}", 3600, overlap=S.ALLOW), metadata=ACME.metadata)
    await tenants.schedules.CreateSchedule(every("b", 3600, overlap=S.ALLOW), metadata=GLOBEX.metadata)
    # All due, acme's first: a round taking them oldest first would reach globex's last.
    now = now_of(tenants)
    due = {"acme": now - timedelta(seconds=20), "globex": now - timedelta(seconds=10)}
    for tenant, at in due.items():
        moved = sa.update(schedule).where(schedule.c.tenant == tenant)
        await db_execute(tenants, moved.values(created_at=at - timedelta(hours=1), next_fire_at=at))
    loop = loop_of(tenants, batch=5)
    first = await loop.fire_batch(tenants.runtime.store.now())
    assert [(d.schedule.tenant, d.schedule.schedule_id) for d in first.due][:2] == [("acme", "a0"), ("globex", "b")]
    ref = schedule_pb2.ScheduleRef(schedule_id="b")
    assert (await tenants.schedules.GetSchedule(ref, metadata=GLOBEX.metadata)).last_job_no  # fired in the first batch
    await loop.tick()  # the rest of the round: batches until one comes back short
    for schedule_id in [f"a{i}" for i in range(30)]:
        assert await keys(tenants, schedule_id) == [f"{schedule_id}@{due['acme'].isoformat()}Z"]
    assert await keys(tenants, "b") == [f"b@{due['globex'].isoformat()}Z"]
    metrics = tenants.runtime.host.metrics
    assert (metrics.firings("submitted"), metrics.firings("missed")) == (31, 0)


async def hourly_due_minutes_ago(served: Served, minutes: int) -> datetime:
    """An hourly schedule whose last fire time passed `minutes` ago (past the 60 s grace) unfired; that time."""
    await served.schedules.CreateSchedule(every("hourly", 3600, overlap=S.ALLOW))
    fire = now_of(served) - timedelta(minutes=minutes)
    await db_execute(served, sa.update(schedule).values(created_at=fire - timedelta(hours=1), next_fire_at=fire))
    return fire


async def test_a_fire_time_reached_late_while_a_loop_ran_fires_and_is_not_missed(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(**QUIET)
    fire = await hourly_due_minutes_ago(served, 5)
    # Some server's loop ran all along (busy elsewhere), from an hour ago until a moment ago.
    ran = {"started_at": fire - timedelta(hours=1), "last_at": now_of(served) - timedelta(seconds=1)}
    await db_execute(served, sa.insert(schedule_run).values(**ran))
    loop = loop_of(served)
    await loop.tick()
    assert await keys(served, "hourly") == [f"hourly@{fire.isoformat()}Z"]
    metrics = served.runtime.host.metrics
    assert (metrics.firings("submitted"), metrics.firings("missed")) == (1, 0)
    assert metrics.schedule_lag_seconds() >= 300  # the round began 5 minutes behind
    assert (await get(served, "hourly")).next_fire_time.ToDatetime() == fire + timedelta(hours=1)
    await loop.tick()
    assert metrics.schedule_lag_seconds() == 0  # nothing due


async def test_a_fire_time_no_loop_ran_for_is_missed(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(**QUIET)
    fire = await hourly_due_minutes_ago(served, 5)
    # The loops last ran 20 minutes ago, long before the fire time; this one starts now.
    down_at = now_of(served) - timedelta(minutes=20)
    await db_execute(served, sa.insert(schedule_run).values(started_at=down_at - timedelta(hours=1), last_at=down_at))
    await loop_of(served).tick()
    assert await keys(served, "hourly") == []
    assert served.runtime.host.metrics.firings("missed") == 1
    after = await get(served, "hourly")
    assert after.next_fire_time.ToDatetime() == fire + timedelta(hours=1)
    assert (after.missed_firings, after.skipped_firings) == (1, 0)  # the schedule counts it too
    runs = await db_query(served, sa.select(schedule_run).order_by(schedule_run.c.id))
    assert len(runs) == 2 and runs[1]["started_at"] > down_at  # the round began a run of its own


async def test_a_firing_whose_submit_is_refused_is_counted_refused_not_missed(serve) -> None:  # type: ignore[no-untyped-def]
    """A server ran at the fire time, so it was not missed: it was refused (once counted missed)."""
    served = await serve(**QUIET)
    await served.schedules.CreateSchedule(every("broken", 3600, overlap=S.ALLOW))
    fire = now_of(served) - timedelta(seconds=1)  # due now: on time
    refused = job_pb2.SubmitRequest(job_type="").SerializeToString()  # a template Submit's rules refuse
    edit = sa.update(schedule).values(template=refused, created_at=fire - timedelta(hours=1), next_fire_at=fire)
    await db_execute(served, edit)
    await loop_of(served).tick()
    assert await keys(served, "broken") == []
    metrics = served.runtime.host.metrics
    assert (metrics.firings("refused"), metrics.firings("missed")) == (1, 0)
    after = await get(served, "broken")
    assert (after.skipped_firings, after.missed_firings) == (1, 0)  # a firing a server reached that made no job
    assert after.next_fire_time.ToDatetime() == fire + timedelta(hours=1)
