"""ScheduleService over a real server and database: create, read, page, pause, resume, delete,
tenancy and the per-tenant limit. Its bad input is in the matrix of every RPC (test_bad_input.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from served import Served, start_server
from service_support import db_rows, duration, rpc_failure

from jobwire.client.status import error_info, error_reason
from jobwire.db import schedules as schedule_rows
from jobwire.domain.commands import Scope
from jobwire.domain.errors import TooManySchedules
from jobwire.domain.schedules import CatchUp, Overlap, ScheduleRecord, timing
from jobwire.v1 import job_pb2, schedule_pb2

pytestmark = pytest.mark.timeout(60)

S = schedule_pb2.Schedule
# The loop is off: these tests look at the rows the calls keep, not at firings.
QUIET = {"schedule_interval_seconds": 0}


def template(**fields: object) -> job_pb2.SubmitRequest:
    return job_pb2.SubmitRequest(job_type=str(fields.pop("job_type", "report")), **fields)  # type: ignore[arg-type]


def create(schedule_id: str = "nightly", **fields: object) -> schedule_pb2.CreateScheduleRequest:
    fields.setdefault("template", template(payload=b"{}"))
    if "every" not in fields:
        fields.setdefault("cron", "0 2 * * *")
    return schedule_pb2.CreateScheduleRequest(schedule_id=schedule_id, **fields)  # type: ignore[arg-type]


@pytest.fixture
async def quiet(serve) -> Served:  # type: ignore[no-untyped-def]
    return await serve(**QUIET)  # type: ignore[no-any-return]


async def test_create_keeps_the_schedule_and_get_and_list_read_it_back(quiet: Served) -> None:
    made = await quiet.schedules.CreateSchedule(
        create(time_zone="Asia/Shanghai", overlap=S.ALLOW, catch_up=S.ONE, template=template(queue="reports"))
    )
    assert (made.schedule_id, made.cron, made.time_zone, made.overlap, made.catch_up, made.paused) == (
        "nightly", "0 2 * * *", "Asia/Shanghai", S.ALLOW, S.ONE, False,
    )  # fmt: skip
    assert made.template.queue == "reports" and made.HasField("created_at")
    # 02:00 in Shanghai is 18:00 UTC
    assert made.next_fire_time.ToDatetime().hour == 18 and made.next_fire_time.ToDatetime().minute == 0
    assert not made.HasField("last_fire_time") and made.last_job_no == ""
    got = await quiet.schedules.GetSchedule(schedule_pb2.ScheduleRef(schedule_id="nightly"))
    assert got == made
    every = await quiet.schedules.CreateSchedule(create("often", every=duration(90)))
    assert every.WhichOneof("timing") == "every" and every.every.seconds == 90 and every.time_zone == "UTC"
    assert every.overlap == S.SKIP and every.catch_up == S.NONE  # the defaults
    listed = (await quiet.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest())).schedules
    assert [s.schedule_id for s in listed] == ["nightly", "often"]


async def test_list_pages_like_list_jobs(quiet: Served) -> None:
    for i in range(5):
        await quiet.schedules.CreateSchedule(create(f"s{i}"))
    seen, token = [], ""
    while True:
        page = await quiet.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest(page_size=2, page_token=token))
        assert len(page.schedules) <= 2
        seen += [s.schedule_id for s in page.schedules]
        token = page.next_page_token
        if not token:
            break
    assert seen == [f"s{i}" for i in range(5)]


async def test_pause_clears_the_next_fire_time_and_resume_counts_it_from_now(quiet: Served) -> None:
    made = await quiet.schedules.CreateSchedule(create(every=duration(3600)))
    paused = await quiet.schedules.PauseSchedule(schedule_pb2.ScheduleRef(schedule_id="nightly"))
    assert paused.paused and not paused.HasField("next_fire_time")
    resumed = await quiet.schedules.ResumeSchedule(schedule_pb2.ScheduleRef(schedule_id="nightly"))
    assert not resumed.paused
    assert resumed.next_fire_time.ToDatetime() >= made.next_fire_time.ToDatetime()


async def test_an_existing_id_is_already_exists_and_delete_makes_it_not_found(quiet: Served) -> None:
    await quiet.schedules.CreateSchedule(create())
    taken = await rpc_failure(quiet.schedules.CreateSchedule(create(cron="5 * * * *")))
    assert (taken.code(), error_reason(taken)) == (grpc.StatusCode.ALREADY_EXISTS, "SCHEDULE_EXISTS")
    ref = schedule_pb2.ScheduleRef(schedule_id="nightly")
    assert (await quiet.schedules.GetSchedule(ref)).cron == "0 2 * * *"  # the first one, unchanged
    await quiet.schedules.DeleteSchedule(ref)
    for call in (
        quiet.schedules.GetSchedule(ref),
        quiet.schedules.PauseSchedule(ref),
        quiet.schedules.ResumeSchedule(ref),
        quiet.schedules.DeleteSchedule(ref),
    ):
        gone = await rpc_failure(call)
        assert (gone.code(), error_reason(gone)) == (grpc.StatusCode.NOT_FOUND, "SCHEDULE_NOT_FOUND")


ACME = Token("schedules-acme-client-3c9", tenant="acme")
GLOBEX = Token("schedules-globex-client-3c9", tenant="globex")
GLOBEX_REPORTS = Token("schedules-globex-reports-3c9", tenant="globex", queues=("reports",))
ACME_WORKER = Token("schedules-acme-worker-3c9", tenant="acme", role="worker")
ACME_ADMIN = Token("schedules-acme-admin-3c9", tenant="acme", role="admin")  # an operator's, no client role


@pytest.fixture
async def tenants(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    auth = write_auth_file(tmp_path / "auth.toml", [ACME, GLOBEX, GLOBEX_REPORTS, ACME_WORKER, ACME_ADMIN])
    served = await start_server(database_url, auth_file=auth, **QUIET)
    try:
        yield served
    finally:
        await served.close()


async def test_another_tenants_schedule_is_not_found_and_ids_are_per_tenant(tenants: Served) -> None:
    ref = schedule_pb2.ScheduleRef(schedule_id="nightly")
    await tenants.schedules.CreateSchedule(create(), metadata=ACME.metadata)
    for call in (
        tenants.schedules.GetSchedule(ref, metadata=GLOBEX.metadata),
        tenants.schedules.PauseSchedule(ref, metadata=GLOBEX.metadata),
        tenants.schedules.ResumeSchedule(ref, metadata=GLOBEX.metadata),
        tenants.schedules.DeleteSchedule(ref, metadata=GLOBEX.metadata),
    ):
        assert (await rpc_failure(call)).code() == grpc.StatusCode.NOT_FOUND
    listed = await tenants.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest(), metadata=GLOBEX.metadata)
    assert listed.schedules == []
    # the same id in another tenant is another schedule
    theirs = await tenants.schedules.CreateSchedule(create(cron="0 3 * * *"), metadata=GLOBEX.metadata)
    assert theirs.cron == "0 3 * * *"
    assert (await tenants.schedules.GetSchedule(ref, metadata=ACME.metadata)).cron == "0 2 * * *"


async def test_a_template_queue_the_token_may_not_use_is_refused_and_a_worker_may_not_call(tenants: Served) -> None:
    denied = await rpc_failure(
        tenants.schedules.CreateSchedule(create(template=template(queue="other")), metadata=GLOBEX_REPORTS.metadata)
    )
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    ok = await tenants.schedules.CreateSchedule(
        create(template=template(queue="reports")), metadata=GLOBEX_REPORTS.metadata
    )
    assert ok.template.queue == "reports"
    worker = await rpc_failure(
        tenants.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest(), metadata=ACME_WORKER.metadata)
    )
    assert worker.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_an_admin_token_reads_pauses_resumes_and_deletes_its_tenants_schedules(tenants: Served) -> None:
    """An operator's console (the gateway's /schedules) with an admin token; a client token makes them."""
    admin, ref = ACME_ADMIN.metadata, schedule_pb2.ScheduleRef(schedule_id="nightly")
    await tenants.schedules.CreateSchedule(create(), metadata=ACME.metadata)
    listed = await tenants.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest(), metadata=admin)
    assert [s.schedule_id for s in listed.schedules] == ["nightly"]
    assert (await tenants.schedules.GetSchedule(ref, metadata=admin)).cron == "0 2 * * *"
    made = schedule_pb2.ListScheduleJobsRequest(schedule_id="nightly")
    assert list((await tenants.schedules.ListScheduleJobs(made, metadata=admin)).jobs) == []
    assert (await tenants.schedules.PauseSchedule(ref, metadata=admin)).paused
    assert (await tenants.schedules.GetSchedule(ref, metadata=ACME.metadata)).paused  # the client's, paused
    assert not (await tenants.schedules.ResumeSchedule(ref, metadata=admin)).paused
    await tenants.schedules.DeleteSchedule(ref, metadata=admin)
    gone = await rpc_failure(tenants.schedules.GetSchedule(ref, metadata=ACME.metadata))
    assert gone.code() == grpc.StatusCode.NOT_FOUND
    refused = await rpc_failure(tenants.schedules.CreateSchedule(create("by-admin"), metadata=admin))
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED  # making schedules stays a client's


LIMIT = 3


@pytest.fixture
async def capped(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    auth = write_auth_file(tmp_path / "auth.toml", [ACME, GLOBEX])
    served = await start_server(database_url, auth_file=auth, max_schedules_per_tenant=LIMIT, **QUIET)
    try:
        yield served
    finally:
        await served.close()


@pytest.mark.both_databases  # the limit is counted under the tenant's row lock
async def test_a_tenant_at_its_limit_is_refused_and_keeps_the_rest_of_its_calls(capped: Served) -> None:
    acme, globex = ACME.metadata, GLOBEX.metadata
    for i in range(LIMIT):
        await capped.schedules.CreateSchedule(create(f"s{i}"), metadata=acme)
    before = await db_rows(capped)
    full = await rpc_failure(capped.schedules.CreateSchedule(create("one-more"), metadata=acme))
    assert (full.code(), error_reason(full)) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_SCHEDULES")
    assert "JOBWIRE_MAX_SCHEDULES_PER_TENANT" in (full.details() or "")
    assert error_info(full).metadata["limit"] == str(LIMIT)
    assert await db_rows(capped) == before  # nothing written
    # the tenant's other calls go on, and another tenant has a limit of its own
    listed = await capped.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest(), metadata=acme)
    assert [s.schedule_id for s in listed.schedules] == ["s0", "s1", "s2"]
    await capped.schedules.PauseSchedule(schedule_pb2.ScheduleRef(schedule_id="s0"), metadata=acme)
    for i in range(LIMIT):
        await capped.schedules.CreateSchedule(create(f"s{i}"), metadata=globex)
    # a deleted schedule gives its place back
    await capped.schedules.DeleteSchedule(schedule_pb2.ScheduleRef(schedule_id="s1"), metadata=acme)
    assert (await capped.schedules.CreateSchedule(create("one-more"), metadata=acme)).schedule_id == "one-more"


@pytest.mark.both_databases  # the limit is counted under the tenant's row lock
async def test_concurrent_creates_never_pass_the_limit(capped: Served) -> None:
    calls = [capped.schedules.CreateSchedule(create(f"c{i}"), metadata=ACME.metadata) for i in range(40)]
    answers = await asyncio.gather(*calls, return_exceptions=True)
    made = [a for a in answers if isinstance(a, schedule_pb2.Schedule)]
    refused = [a for a in answers if isinstance(a, grpc.aio.AioRpcError)]
    assert len(made) == LIMIT and len(refused) == 40 - LIMIT, answers
    assert {r.code() for r in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    listed = await capped.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest(), metadata=ACME.metadata)
    assert len(listed.schedules) == LIMIT


def record(schedule_id: str, tenant: str = "acme") -> ScheduleRecord:
    now = datetime(2026, 12, 1)
    when = timing(cron=None, every=timedelta(hours=1), time_zone="UTC", anchor=now)
    return ScheduleRecord(
        tenant=tenant, schedule_id=schedule_id, queue="default", timing=when, template=template().SerializeToString(),
        overlap=Overlap.SKIP, catch_up=CatchUp.NONE, next_fire_at=when.next_after(now),
    )  # fmt: skip


@pytest.mark.both_databases  # the tenant's row lock, under MariaDB's READ COMMITTED
@pytest.mark.parametrize("tenant_seen", [False, True], ids=["first create of the tenant", "tenant seen before"])
async def test_a_create_waits_for_one_in_flight_of_its_tenant_then_counts_it(quiet: Served, tenant_seen: bool) -> None:
    """Two creates for the last place, the second begun while the first is uncommitted: one place taken.

    Without the tenant's lock, MySQL's READ COMMITTED lets the second count without the
    first's insert, and both would be kept."""
    store, engine = quiet.runtime.store, quiet.runtime.store.db.engine
    if tenant_seen:
        store.create_schedule(record("earlier"), 2)
    first = engine.connect().execution_options(jobwire_immediate=True)
    in_flight = first.begin()
    schedule_rows.create(first, record("first"), 1 + tenant_seen)  # counted, inserted, not committed
    second: list[object] = []

    def create_second() -> None:
        try:
            second.append(store.create_schedule(record("second"), 1 + tenant_seen))
        except TooManySchedules as refused:
            second.append(refused)

    racer = threading.Thread(target=create_second)
    racer.start()
    racer.join(1.0)  # with the lock it waits for the first; without, it has counted and kept its own by now
    in_flight.commit()
    first.close()
    racer.join(30)
    assert len(second) == 1 and isinstance(second[0], TooManySchedules), second
    listed = store.list_schedules(Scope(tenant="acme"), 10, "")[0]
    assert sorted(s.schedule_id for s in listed) == sorted(["first", *(["earlier"] if tenant_seen else [])])
