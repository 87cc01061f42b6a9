"""Two serving processes on one database (SQLite, then MariaDB), as two replicas: one runs the chores; killed
with SIGKILL, the other takes them over within one lease, and a schedule firing every
second neither loses nor doubles a fire time across the handover.

Real processes and real time: the lease runs out in seconds of the database's clock,
which is what the handover is about.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest
import sqlalchemy as sa
from google.protobuf.duration_pb2 import Duration
from processes import ServerProcess, start_server_process

from jobwire.db.tables import chore_leader, job
from jobwire.v1 import job_pb2, schedule_pb2, schedule_pb2_grpc

pytestmark = pytest.mark.timeout(120)

LEASE_S = 2.0
SCHEDULE = "every-second"
CHORES = ("housekeeping", "schedules")
S = schedule_pb2.Schedule


@pytest.fixture
def replicas(database_url: str) -> Iterator[tuple[str, dict[int, ServerProcess]]]:
    """Two servers of one process each; killed before the database is dropped."""
    env = {"JOBWIRE_DATABASE_URL": database_url, "JOBWIRE_LISTEN": "127.0.0.1:0", "JOBWIRE_PROCESSES": "1",
           "JOBWIRE_CHORE_LEASE_SECONDS": str(LEASE_S)}  # fmt: skip
    started: dict[int, ServerProcess] = {}
    try:
        for _ in range(2):
            server = start_server_process(["jobwire", "serve"], env)
            started[server.pid] = server
        yield database_url, started
    finally:
        for server in started.values():
            server.kill()


def wait_for(probe, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while (found := probe()) is None or found is False:
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)
    return found


def database_now(db: sa.Engine) -> datetime:
    """The time by the database's clock, which leases are decided by (SQLite's is this machine's)."""
    if db.dialect.name == "sqlite":
        return datetime.now(UTC).replace(tzinfo=None)
    with db.connect() as conn:
        now = conn.execute(sa.text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    assert isinstance(now, datetime)
    return now


def pid(row: sa.Row) -> int:  # type: ignore[type-arg]
    """The process that holds a lease: its holder is host:pid:token."""
    return int(row.holder.split(":")[1])


def held_by(row: sa.Row | None, holder: int) -> sa.Row | None:  # type: ignore[type-arg]
    return row if row is not None and pid(row) == holder else None


@pytest.fixture
def db(database_url: str) -> Iterator[sa.Engine]:
    """The test's own reading of the database."""
    engine = sa.create_engine(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


def test_a_killed_leader_is_replaced_within_a_lease_and_no_firing_is_lost_or_doubled(replicas, db) -> None:  # type: ignore[no-untyped-def]
    _, servers = replicas

    def term(chores: str) -> sa.Row | None:  # type: ignore[type-arg]
        with db.connect() as conn:
            return conn.execute(sa.select(chore_leader).where(chore_leader.c.name == chores)).first()

    def fire_times() -> list[datetime]:
        with db.connect() as conn:
            keys = conn.execute(sa.select(job.c.idempotency_key).where(job.c.idempotency_key.like(f"{SCHEDULE}@%")))
            return sorted(datetime.fromisoformat(key.split("@")[1].removesuffix("Z")) for (key,) in keys)

    first = next(iter(servers.values()))
    with grpc.insecure_channel(first.target) as channel:
        schedule_pb2_grpc.ScheduleServiceStub(channel).CreateSchedule(schedule_pb2.CreateScheduleRequest(
            schedule_id=SCHEDULE, every=Duration(seconds=1), overlap=S.ALLOW,
            template=job_pb2.SubmitRequest(job_type="tick", payload=b"{}"),
        ))  # fmt: skip
    wait_for(lambda: len(fire_times()) >= 2, 15, "the schedule fires")
    held = {chores: wait_for(lambda c=chores: term(c), 5, f"a {chores} leader") for chores in CHORES}
    assert {pid(row) for row in held.values()} <= servers.keys()
    victim = pid(held["schedules"])
    (survivor,) = servers.keys() - {victim}

    servers[victim].kill()  # SIGKILL: no resignation, the lease must run out
    killed_at = database_now(db)
    for chores in CHORES:
        taken = wait_for(lambda c=chores: held_by(term(c), survivor), LEASE_S + 10, f"the survivor runs {chores}")
        # asked again at the dead lease's end, which came at most a lease after the kill
        assert taken.elected_at - killed_at <= timedelta(seconds=LEASE_S + 1.0), (chores, taken, killed_at)
    resumed = term("schedules").elected_at  # type: ignore[union-attr]
    wait_for(lambda: sum(t > resumed for t in fire_times()) >= 2, 15, "the survivor fires the schedule")

    with grpc.insecure_channel(servers[survivor].target) as channel:
        schedule_pb2_grpc.ScheduleServiceStub(channel).PauseSchedule(schedule_pb2.ScheduleRef(schedule_id=SCHEDULE))
    fired = fire_times()
    assert len(fired) == len(set(fired)), "a fire time made two jobs"
    every_second = [fired[0] + timedelta(seconds=k) for k in range(len(fired))]
    assert fired == every_second, "a fire time was lost across the handover"
    assert fired[-1] > resumed > killed_at
