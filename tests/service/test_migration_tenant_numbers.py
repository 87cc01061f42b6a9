"""Migration 0016 on a database numbered the old way: one sequence a day for every tenant.

Numbers already given stay. Each tenant with jobs goes on, on the counter's two latest days,
after the shared sequence, so no new number repeats one of its jobs; a tenant new since
starts at 001, and so does every tenant on a later day. On SQLite and MariaDB.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from served import start_server
from service_support import rpc_failure
from wall_clock import numbering_clock

from jobwire.db.engine import Database
from jobwire.db.migrate import upgrade
from jobwire.db.tables import job, job_day_counter
from jobwire.v1 import job_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(120)]  # a migration of stored rows

TODAY, YESTERDAY, LONG_AGO = "20310601", "20310531", "20310101"
CLIENTS = {t: Token(f"migrated-{t}-client", tenant=t) for t in ("acme", "globex", "initech")}
# As the old numbering left them: each day's numbers shared out among the tenants.
OLD_JOBS = [
    ("globex", f"PT-{LONG_AGO}-007"),
    ("acme", f"PT-{YESTERDAY}-009"),
    ("acme", f"PT-{TODAY}-001"),
    ("globex", f"PT-{TODAY}-002"),
    ("acme", f"PT-{TODAY}-003"),
    ("globex", f"PT-{TODAY}-004"),
    ("globex", f"PT-{TODAY}-005"),
]
OLD_COUNTER = {LONG_AGO: 7, YESTERDAY: 9, TODAY: 5}


def old_job(tenant: str, job_no: str) -> dict[str, object]:
    now = datetime.now(UTC).replace(tzinfo=None)
    return {
        "tenant": tenant, "job_no": job_no, "job_type": "frames", "queue": "parked", "labels": "{}", "payload": b"",
        "fingerprint": "0" * 64, "status": "QUEUED", "max_attempts": 3, "initial_backoff_s": 1.0,
        "max_backoff_s": 60.0, "backoff_multiplier": 2.0, "on_lease_lost": "RETRY", "created_at": now,
        "updated_at": now, "run_after": now,
    }  # fmt: skip


def migrate_old_database(url: str) -> dict[tuple[str, str], int]:
    """Jobs and the shared day counter at revision 0015, then upgraded: the counters it left."""
    db = Database(url)
    try:
        upgrade(db, "0015")
        shared = sa.table("job_day_counter", sa.column("day"), sa.column("last_seq"))  # as 0015 had it
        with db.engine.begin() as conn:
            conn.execute(sa.insert(job), [old_job(t, n) for t, n in OLD_JOBS])
            conn.execute(sa.insert(shared), [{"day": d, "last_seq": n} for d, n in OLD_COUNTER.items()])
        upgrade(db)
        with db.engine.connect() as conn:
            kept = [tuple(r) for r in conn.execute(sa.select(job.c.tenant, job.c.job_no).order_by(job.c.id))]
            assert kept == OLD_JOBS
            counters = conn.execute(sa.select(job_day_counter)).mappings().all()
            return {(r["tenant"], r["day"]): r["last_seq"] for r in counters}
    finally:
        db.dispose()


async def test_each_tenant_goes_on_after_the_shared_sequence_and_old_numbers_stay(
    empty_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = numbering_clock(monkeypatch, datetime(2031, 6, 1, 12, tzinfo=UTC))
    assert clock.day == TODAY
    database_url = empty_database_url
    assert migrate_old_database(database_url) == {
        (tenant, day): OLD_COUNTER[day] for tenant in ("acme", "globex") for day in (TODAY, YESTERDAY)
    }
    s = await start_server(database_url, auth_file=write_auth_file(tmp_path / "auth.toml", CLIENTS.values()))
    try:

        async def submit(tenant: str) -> str:
            request = job_pb2.SubmitRequest(job_type="frames", queue="parked")
            return (await s.jobs.Submit(request, metadata=CLIENTS[tenant].metadata)).job.job_no

        async def get(tenant: str, job_no: str) -> job_pb2.Job:
            return await s.jobs.Get(job_pb2.GetRequest(job_no=job_no), metadata=CLIENTS[tenant].metadata)

        assert [await submit(t) for t in ("acme", "globex", "acme", "initech")] == [
            f"PT-{TODAY}-006", f"PT-{TODAY}-006", f"PT-{TODAY}-007", f"PT-{TODAY}-001",
        ]  # fmt: skip
        for tenant, job_no in OLD_JOBS:  # each old number names its job, in its tenant only
            assert (await get(tenant, job_no)).status == job_pb2.Job.QUEUED
        theirs = await rpc_failure(get("acme", f"PT-{TODAY}-002"))
        assert theirs.code() == grpc.StatusCode.NOT_FOUND

        clock.now += timedelta(days=1)
        assert [await submit(t) for t in ("globex", "acme")] == ["PT-20310602-001"] * 2
    finally:
        await s.close()
