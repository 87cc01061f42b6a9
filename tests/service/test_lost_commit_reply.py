"""A COMMIT whose reply was lost: the server finds out what happened and answers the truth.

The driver is made to lose the reply of one chosen COMMIT: the
packet with the COMMIT is sent (MariaDB commits it) and then the driver raises 2013, "Lost
connection to server during query", as when a connection dies at that moment. Before
commit markers, Submit answered ABORTED "retry the call" for a job that existed, Claim
orphaned its lease, Retry refused a retry that had happened, and a keyed Submit answered
created=false for the job it had just made. The other way round (the connection lost
before the COMMIT went out) must still run the transaction again, once.
"""

from __future__ import annotations

import asyncmy.errors
import grpc
import pytest
import sqlalchemy as sa
from served import Served
from service_support import claim, counted, db_query, rpc_error, running, submit

from jobwire.db import writer
from jobwire.db.tables import commit_marker, job, job_event
from jobwire.db.wire import MySQLWire
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(60)]


class LoseReply:
    """Loses the reply of the next COMMIT whose packet contains `marker_text`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pending: list[tuple[str, bool]] = []
        self.hits = 0
        send = MySQLWire._send

        async def lossy(wire: MySQLWire, texts: list[str]) -> list[int]:
            if texts and texts[-1] == "COMMIT":
                for i, (needle, committed) in enumerate(self.pending):
                    if any(needle in t for t in texts):
                        del self.pending[i]
                        self.hits += 1
                        if committed:
                            await send(wire, texts)
                        raise asyncmy.errors.OperationalError(2013, "Lost connection to server during query")
            return await send(wire, texts)

        monkeypatch.setattr(MySQLWire, "_send", lossy)

    def after_commit(self, needle: str) -> None:
        self.pending.append((needle, True))

    def before_commit(self, needle: str) -> None:
        self.pending.append((needle, False))


@pytest.fixture
def database_url(mysql_url: str) -> str:
    """MySQL only: the conftest's `served` runs on it (SQLite has no connection to lose)."""
    return mysql_url


async def _jobs(served: Served, job_type: str) -> list[dict[str, object]]:
    return await db_query(
        served, sa.select(job.c.job_no, job.c.status, job.c.worker_token).where(job.c.job_type == job_type)
    )


async def _events(served: Served, job_no: str) -> list[str]:
    rows = await db_query(
        served, sa.select(job_event.c.kind).where(job_event.c.job_no == job_no).order_by(job_event.c.id)
    )
    return [str(r["kind"]) for r in rows]


async def test_submit_without_a_key_answers_the_job_it_made(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    lose = LoseReply(monkeypatch)
    lose.after_commit("INSERT INTO job (")
    made = await submit(served, "lost.submit")
    assert lose.hits == 1
    assert [(r["job_no"], r["status"]) for r in await _jobs(served, "lost.submit")] == [(made.job_no, "QUEUED")]
    assert await _events(served, made.job_no) == ["SUBMITTED"]


async def test_submit_with_a_key_says_created(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    lose = LoseReply(monkeypatch)
    lose.after_commit("INSERT INTO job (")
    reply = await served.jobs.Submit(job_pb2.SubmitRequest(job_type="lost.keyed", idempotency_key="k-1"))
    assert lose.hits == 1
    assert reply.created is True
    again = await served.jobs.Submit(job_pb2.SubmitRequest(job_type="lost.keyed", idempotency_key="k-1"))
    assert (again.created, again.job.job_no) == (False, reply.job.job_no)
    assert len(await _jobs(served, "lost.keyed")) == 1


async def test_claim_answers_the_lease_it_granted(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    made = await submit(served, "lost.claim")
    lose = LoseReply(monkeypatch)
    lose.after_commit("'CLAIMED'")
    (lease,) = await claim(served, "lost.claim")
    assert lose.hits == 1
    (row,) = await _jobs(served, "lost.claim")
    assert (row["status"], row["worker_token"]) == (
        "RUNNING",
        lease.worker_token,
    )  # the lease handed out is the one held
    assert await _events(served, made.job_no) == ["SUBMITTED", "CLAIMED"]
    assert await claim(served, "lost.claim") == []
    assert counted(served, "claimed", "lost.claim") == 1  # the commit the marker confirmed, counted once


async def test_retry_answers_the_retry_that_took_place(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    made, lease = await running(served, job_type="lost.retry", retry_policy=job_pb2.RetryPolicy(max_attempts=1))
    await served.workers.Fail(
        worker_pb2.FailRequest(job_no=made.job_no, worker_token=lease.worker_token, message="boom", retryable=True)
    )
    lose = LoseReply(monkeypatch)
    lose.after_commit("'RETRIED'")
    retried = await served.jobs.Retry(job_pb2.RetryRequest(job_no=made.job_no))
    assert lose.hits == 1
    assert retried.status == job_pb2.Job.QUEUED
    assert (await _events(served, made.job_no)).count("RETRIED") == 1
    assert counted(served, "retried", "lost.retry") == 1


async def test_a_reply_lost_before_the_commit_runs_the_transaction_again_once(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    lose = LoseReply(monkeypatch)
    lose.before_commit("INSERT INTO job (")
    made = await submit(served, "lost.early")
    assert lose.hits == 1
    assert [r["job_no"] for r in await _jobs(served, "lost.early")] == [made.job_no]
    assert await _events(served, made.job_no) == ["SUBMITTED"]
    assert counted(served, "submitted", "lost.early") == 1  # two runs, one committed: counted once


async def test_when_nobody_can_tell_the_answer_says_so(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database refuses connections after the lost reply: UNAVAILABLE COMMIT_UNKNOWN at once, never a guess.

    At once: while the lookup waits, its write lane (and every write queued behind it) waits too.
    """
    lose = LoseReply(monkeypatch)
    lose.after_commit("INSERT INTO job (")
    refused = 0

    async def unreachable(self: writer.MySQLConnections) -> object:
        nonlocal refused
        refused += 1
        raise asyncmy.errors.OperationalError(2003, "Can't connect to MySQL server")

    connect = writer.MySQLConnections._connect

    async def connect_until_lost(self: writer.MySQLConnections) -> object:
        if lose.hits:
            return await unreachable(self)
        return await connect(self)

    monkeypatch.setattr(writer.MySQLConnections, "_connect", connect_until_lost)
    code = await rpc_error(served.jobs.Submit(job_pb2.SubmitRequest(job_type="lost.unknown")))
    assert code == (grpc.StatusCode.UNAVAILABLE, "COMMIT_UNKNOWN")
    assert refused == 1  # asked once, not for CONFIRM_BUDGET_S


async def test_an_unanswered_lookup_keeps_asking_within_its_budget(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup that fails otherwise (a blip, a timeout) asks again until the database answers."""
    lose = LoseReply(monkeypatch)
    lose.after_commit("INSERT INTO job (")
    monkeypatch.setattr(writer, "CONFIRM_PAUSE_S", 0.01)
    blips = 0
    connect = writer.MySQLConnections._connect

    async def flaky(self: writer.MySQLConnections) -> object:
        nonlocal blips
        if lose.hits and blips < 3:
            blips += 1
            raise asyncmy.errors.OperationalError(2013, "Lost connection to MySQL server during query")
        return await connect(self)

    monkeypatch.setattr(writer.MySQLConnections, "_connect", flaky)
    made = await submit(served, "lost.blip")
    assert blips == 3 and lose.hits == 1
    assert [r["job_no"] for r in await _jobs(served, "lost.blip")] == [made.job_no]


async def test_housekeeping_purges_old_markers_only(served: Served) -> None:
    from jobwire.db import commit_markers

    await submit(served, "markers")
    db = served.runtime.store.db
    before = await db_query(served, sa.select(sa.func.count()).select_from(commit_marker))
    assert before[0]["count_1"] >= 1  # type: ignore[operator]
    assert db.write(commit_markers.purge) == 0  # all of them are seconds old
    future = 10**9 * 3600 * 24 * 365 * 100
    assert db.write(lambda conn: commit_markers.purge(conn, now_ns=future)) == before[0]["count_1"]
