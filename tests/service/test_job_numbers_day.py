"""Job numbers across a day change, with the clock the numbering reads under the test's control.

A number is PREFIX-YYYYMMDD-NNN: the UTC day, then a sequence per tenant and
day kept in `job_day_counter`. So at midnight (UTC) the day part turns over and the sequence
starts again at 001; a day's sequence never repeats a number, even when a process whose clock
lags numbers under the day before again. The clock replaced is the one numbering reads
(tests/service/wall_clock.py). These tests submit as one tenant (no auth file: "default");
tests/service/test_tenant_numbers.py has two.
"""

from __future__ import annotations

import re
from datetime import timedelta, timezone

import pytest
import sqlalchemy as sa
from db_edits import db_execute
from served import Served
from service_support import db_query, submit
from wall_clock import EVE, Clock, numbering_clock

from jobwire.db.tables import job, job_day_counter
from jobwire.v1 import job_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(60)]  # job numbers drawn from the database

NUMBER = re.compile(r"PT-(\d{8})-(\d{3,12})")
TENANT = "default"  # every call of a server without an auth file


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return numbering_clock(monkeypatch)


def parts(job_no: str) -> tuple[str, int]:
    found = NUMBER.fullmatch(job_no)
    assert found, job_no
    return found.group(1), int(found.group(2))


async def numbers(s: Served, n: int) -> list[tuple[str, int]]:
    return [parts((await submit(s, queue="parked")).job_no) for _ in range(n)]


async def counters(s: Served) -> dict[str, int]:
    rows = await db_query(
        s, sa.select(job_day_counter.c.day, job_day_counter.c.last_seq).where(job_day_counter.c.tenant == TENANT)
    )
    return {r["day"]: r["last_seq"] for r in rows}


async def stored_numbers(s: Served) -> list[str]:
    return [r["job_no"] for r in await db_query(s, sa.select(job.c.job_no).order_by(job.c.id))]


async def test_the_day_part_turns_at_midnight_utc_and_the_sequence_starts_again(serve, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    s = await serve()
    # The same instant written in UTC+8, where it is already the next day: the day is UTC's.
    clock.now = EVE.astimezone(timezone(timedelta(hours=8)))
    eve = await numbers(s, 3)
    assert eve == [("20311231", 1), ("20311231", 2), ("20311231", 3)]

    clock.now = EVE + timedelta(milliseconds=100)  # midnight exactly
    new_day = await numbers(s, 3)
    assert new_day == [("20320101", 1), ("20320101", 2), ("20320101", 3)]

    # A process whose clock lags (another replica, or this one set back) numbers under the
    # old day again: that day's sequence goes on, it never starts over.
    clock.now = EVE
    late = await numbers(s, 2)
    assert [day for day, _ in late] == ["20311231"] * 2
    assert late[0][1] > 3 and late[1][1] > late[0][1]
    clock.now = EVE + timedelta(hours=1)
    back = await numbers(s, 1)
    assert back[0][0] == "20320101" and back[0][1] > 3

    issued = [f"PT-{day}-{seq:03d}" for day, seq in eve + new_day + late + back]
    assert await stored_numbers(s) == issued
    assert len(set(issued)) == len(issued)
    days = await counters(s)
    assert set(days) == {"20311231", "20320101"}
    assert days["20311231"] >= late[-1][1] and days["20320101"] >= back[-1][1]
    for job_no in issued:  # each number names its job
        assert (await s.jobs.Get(job_pb2.GetRequest(job_no=job_no))).job_no == job_no


async def test_replicas_crossing_midnight_never_share_a_number(serve, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    first, second = await serve(), await serve()  # one database
    before = [parts((await submit(s)).job_no) for s in (first, second, first, second, second)]
    clock.now = EVE + timedelta(seconds=1)
    after = [parts((await submit(s)).job_no) for s in (second, first, first, second, first)]
    assert {day for day, _ in before} == {"20311231"} and {day for day, _ in after} == {"20320101"}
    assert len(set(before + after)) == 10
    assert after[0] == ("20320101", 1)  # the first number of the new day, whichever replica takes it
    for s in (first, second):  # each process's numbers increase within a day
        mine = [seq for (day, seq), by in zip(after, (second, first, first, second, first), strict=True) if by is s]
        assert mine == sorted(mine)


async def test_a_sequence_past_999_widens_and_still_names_its_job(serve, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    s = await serve()
    clock.now = EVE + timedelta(days=3)
    await db_execute(s, sa.insert(job_day_counter).values(tenant=TENANT, day="20320103", last_seq=998))  # 998 taken
    made = await numbers(s, 3)
    assert made == [("20320103", 999), ("20320103", 1000), ("20320103", 1001)]
    for day, seq in made:
        job_no = f"PT-{day}-{seq:03d}"
        assert (await s.jobs.Get(job_pb2.GetRequest(job_no=job_no))).job_no == job_no
