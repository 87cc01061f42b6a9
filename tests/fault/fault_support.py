"""Helpers for fault tests: servers with chosen settings, polling, and MariaDB under attack.

MariaDB helpers act on the shared test server: stopping it always starts it again, and
KILL only ever targets connections to the test's own database.
"""

from __future__ import annotations

import subprocess
import time
from typing import TypeVar

import sqlalchemy as sa
from google.protobuf.duration_pb2 import Duration
from served import Served as Server

from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

T = TypeVar("T")
MARIADBD = "/usr/sbin/mariadbd"
SHA = "ab" * 32


async def claim_all(server: Server, count: int, *, lease: float = 30.0) -> list[worker_pb2.Lease]:
    """`count` leases of "frames" jobs, claimed until all are taken (or 10 s passed): on MariaDB a
    claim skips rows another transaction holds locked (SKIP LOCKED: a housekeeping round's), as a
    worker's next claim takes them."""
    leases: list[worker_pb2.Lease] = []
    deadline = time.monotonic() + 10
    while len(leases) < count and time.monotonic() < deadline:
        request = claim_request(lease=lease, max_jobs=count - len(leases))
        leases += (await server.workers.Claim(request)).leases
    return leases


def claim_request(job_type: str = "frames", *, worker_id: str = "w1", lease: float = 30.0, max_jobs: int = 1,
                  wait: float = 0.0) -> worker_pb2.ClaimRequest:  # fmt: skip
    request = worker_pb2.ClaimRequest(
        worker_id=worker_id, job_types=[worker_pb2.JobTypeSpec(name=job_type)], max_jobs=max_jobs,
        wait=Duration(seconds=int(wait), nanos=int((wait % 1) * 1e9)),
    )  # fmt: skip
    request.lease_duration.FromNanoseconds(int(lease * 1e9))
    return request


def result(uri: str = "file:///results/out.bin") -> job_pb2.Artifact:
    return job_pb2.Artifact(uri=uri, size_bytes=12, sha256=SHA, content_type="application/octet-stream")


async def events(s: Server, job_no: str) -> list[admin_pb2.JobEvent]:
    reply = await s.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job_no, page_size=500))
    return list(reply.events)


# -- MariaDB -------------------------------------------------------------------------------
def server_url(database_url: str) -> str:
    return database_url.rsplit("/", 1)[0] + "/"


def database_name(database_url: str) -> str:
    return database_url.rsplit("/", 1)[1]


def mariadb_reachable(url: str) -> bool:
    engine = sa.create_engine(url, connect_args={"connect_timeout": 1}, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return True
    except sa.exc.DBAPIError:
        return False
    finally:
        engine.dispose()


def stop_mariadb() -> None:
    subprocess.run(["start-stop-daemon", "--stop", "--exec", MARIADBD, "--retry", "30"], check=True)


def start_mariadb(url: str, timeout: float = 30.0) -> None:
    subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", MARIADBD], check=True)
    deadline = time.monotonic() + timeout
    while not mariadb_reachable(url):
        if time.monotonic() > deadline:
            raise AssertionError("MariaDB did not come back")
        time.sleep(0.1)


def connections(database_url: str, info_like: str = "%") -> list[tuple[int, str | None]]:
    """(id, statement) of each connection to the test's database, this one excluded."""
    query = sa.text(
        "SELECT ID, INFO FROM information_schema.PROCESSLIST"
        " WHERE DB = :db AND ID <> CONNECTION_ID() AND COALESCE(INFO, '') LIKE :like"
    )
    engine = sa.create_engine(server_url(database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(query, {"db": database_name(database_url), "like": info_like}).all()
    finally:
        engine.dispose()
    return [(int(r[0]), r[1]) for r in rows]


def rows_modified(database_url: str, connection_id: int) -> int:
    """Rows the open transaction of a connection has changed so far (uncommitted)."""
    query = sa.text("SELECT trx_rows_modified FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = :id")
    engine = sa.create_engine(server_url(database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(query, {"id": connection_id}).scalar_one_or_none() or 0)
    finally:
        engine.dispose()


def kill(database_url: str, connection_id: int) -> None:
    assert connection_id in {c for c, _ in connections(database_url)}, "only the test's own connections"
    engine = sa.create_engine(server_url(database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f"KILL CONNECTION {int(connection_id)}"))
    finally:
        engine.dispose()
