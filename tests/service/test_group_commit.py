"""Group commit: calls from different workers share one transaction, yet each gets its own answer.

Every test here builds one real batch: two Heartbeats hold both commit lanes at a gate, the
calls under test arrive meanwhile (each its own RPC) and queue, and when the gate opens
they run together as the next batch, whose size is recorded. Then:

* a forged token, a stale epoch and a progress regression are each refused on their own,
  and the good calls beside them commit;
* a database error in the middle of that batch (before its COMMIT) reruns the whole batch,
  where each change lands once; one that persists fails every call in it, and the
  database shows none of them: never half a batch.

The errors are real where they can be: on MariaDB the batch's connection is KILLed by
another session just before COMMIT; SQLite cannot lose a connection, so the driver's
own errors are raised at that point (a busy lock, which is rerun; an I/O error, which is not).
"""

from __future__ import annotations

import asyncio
import contextvars
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
import pymysql
import pytest
import sqlalchemy as sa
from served import Served, eventually
from service_support import FORGED_TOKEN, LEASE_LOST, claim, complete_request, db_query, db_rows, get, running

from jobwire.client.status import error_reason
from jobwire.db.tables import job_event
from jobwire.db.wire import Wire
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = pytest.mark.both_databases  # commits grouped into one transaction

FP = grpc.StatusCode.FAILED_PRECONDITION
UNDER_TEST = 6  # the calls of the batch under test
_in_batch: contextvars.ContextVar[bool] = contextvars.ContextVar("in_batch", default=False)


class Gate:
    """Holds both commit lanes closed, then lets the queued calls through as one batch."""

    def __init__(self, served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
        self.commits = served.runtime.commits
        self.opened = asyncio.Event()
        self.sizes: list[int] = []
        self._held = 0
        run = self.commits._run  # the store's apply, as the batcher was given it

        async def gated(work: Sequence[Any]) -> Sequence[Any]:
            if self._held < 2:
                self._held += 1
                await self.opened.wait()
                return await run(work)
            self.sizes.append(len(work))
            _in_batch.set(True)  # this lane's task only: the injected errors hit this batch
            return await run(work)

        monkeypatch.setattr(self.commits, "_run", gated)

    async def through(self, served: Served, hold: worker_pb2.Lease, calls: Callable[[], list[Any]]) -> list[Any]:
        """Make `calls()` as one batch behind two held Heartbeats; each call's reply or error.

        A grpc.aio call starts when it is made, so the calls are made only once the lanes are held.
        """
        beat = worker_pb2.HeartbeatRequest(
            worker_id="w1", leases=[worker_pb2.LeaseRef(job_no=hold.job_no, worker_token=hold.worker_token)]
        )
        # One at a time: calls made together would share one lane's batch.
        holders = []
        try:
            for held in (1, 2):
                holders.append(asyncio.ensure_future(served.workers.Heartbeat(beat)))
                await eventually(self._holding(held), what=f"{held} lane(s) held at the gate")
            tasks = [asyncio.ensure_future(c) for c in calls()]
            await eventually(self._queued(len(tasks)), what="the calls queued behind the gate")
        finally:
            self.opened.set()  # a failed wait must not leave the lanes (and the server's stop) held
        await asyncio.gather(*holders)
        return await asyncio.gather(*tasks, return_exceptions=True)

    def _holding(self, n: int) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            return self._held == n

        return probe

    def _queued(self, n: int) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            return self.commits.waiting == n

        return probe


def before_commit(served: Served, monkeypatch: pytest.MonkeyPatch, fail: Callable[[Wire], Awaitable[None]]) -> None:
    """Call `fail(wire)` just before the batch under test sends its COMMIT (every attempt)."""
    db = served.runtime.store.db
    transact = db.transact

    async def injected(fn: Callable[[Wire], Awaitable[Any]]) -> Any:
        if not _in_batch.get():
            return await transact(fn)

        async def run(wire: Wire) -> Any:
            commit = wire.commit

            async def failing_commit(batch: Sequence[Any] = ()) -> None:
                await fail(wire)
                await commit(batch)

            wire.commit = failing_commit  # type: ignore[method-assign]
            return await fn(wire)

        return await transact(run)

    monkeypatch.setattr(db, "transact", injected)


def lose_connection(served: Served, *, times: int, attempts: list[int]) -> Callable[[Wire], Awaitable[None]]:
    """The batch's connection dies before COMMIT (its first `times` attempts); counts attempts."""
    left = [times]

    async def fail(wire: Wire) -> None:
        attempts.append(1)
        if left[0] == 0:
            return
        left[0] -= 1
        if served.is_mysql:
            killer = pymysql.connect(host="127.0.0.1", user="root", password="")
            try:
                with killer.cursor() as cur:
                    cur.execute(f"KILL CONNECTION {int(wire.connection.thread_id())}")
            finally:
                killer.close()
        else:
            raise sqlite3.OperationalError("database is locked" if times == 1 else "disk I/O error")

    return fail


class Scene:
    """Six running jobs and the six calls of one batch: three good, three refused."""

    def __init__(self, served: Served) -> None:
        self.served = served

    async def set_up(self) -> None:
        s = self.served
        _, self.reported = await running(s)
        _, self.beating = await running(s)
        _, self.completing = await running(s)
        _, self.forged = await running(s)
        job, stale = await running(s)
        await s.workers.Release(worker_pb2.ReleaseRequest(job_no=job.job_no, worker_token=stale.worker_token))
        (self.reclaimed,) = await claim(s)
        assert self.reclaimed.job_no == job.job_no and self.reclaimed.worker_token != stale.worker_token
        self.stale = stale
        _, self.regressing = await running(s)
        await s.workers.ReportStage(_report(self.regressing, 40))
        _, self.holder = await running(s)  # the Heartbeats that hold the lanes renew this one

    def good(self) -> list[worker_pb2.Lease]:
        """The leases of the good calls: report, heartbeat (no event), complete."""
        return [self.reported, self.beating, self.completing]

    def calls(self) -> list[Any]:
        w = self.served.workers
        return [
            w.ReportStage(_report(self.reported, 10)),
            w.Heartbeat(worker_pb2.HeartbeatRequest(worker_id="w1", leases=[_ref(self.beating)])),
            w.Complete(complete_request(self.completing)),
            w.ReportStage(_report(self.forged, 10, token=FORGED_TOKEN)),
            w.ReportStage(_report(self.stale, 10)),
            w.ReportStage(_report(self.regressing, 39)),
        ]

    async def events(self) -> dict[str, int]:
        """Events per job."""
        rows = await db_query(
            self.served, sa.select(job_event.c.job_no, sa.func.count().label("n")).group_by(job_event.c.job_no)
        )
        return {str(r["job_no"]): int(r["n"]) for r in rows}  # type: ignore[call-overload]


def _report(lease: worker_pb2.Lease, processed: int, token: str | None = None) -> worker_pb2.ReportStageRequest:
    return worker_pb2.ReportStageRequest(
        job_no=lease.job_no,
        worker_token=token or lease.worker_token,
        stage="PROCESSING",
        processed_units=processed,
        total_units=100,
    )


def _ref(lease: worker_pb2.Lease) -> worker_pb2.LeaseRef:
    return worker_pb2.LeaseRef(job_no=lease.job_no, worker_token=lease.worker_token)


def _refusal(answer: object) -> tuple[grpc.StatusCode, str | None]:
    assert isinstance(answer, grpc.aio.AioRpcError), answer
    return answer.code(), error_reason(answer)


async def test_each_bad_call_is_refused_alone_and_the_rest_commit(served: Served, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    scene = Scene(served)
    await scene.set_up()
    events_before = await scene.events()
    gate = Gate(served, monkeypatch)

    answers = await gate.through(served, scene.holder, scene.calls)

    assert gate.sizes[:1] == [UNDER_TEST], gate.sizes  # one batch, one transaction
    reported, beat, completed, *refused = answers
    assert isinstance(reported, worker_pb2.ReportStageResponse), reported
    assert [s.state for s in beat.leases] == [worker_pb2.LeaseState.State.OK]
    assert completed.status == job_pb2.Job.READY
    assert [_refusal(a) for a in refused] == [LEASE_LOST, LEASE_LOST, (FP, "PROGRESS_REGRESSION")]
    assert (await get(served, scene.reported.job_no)).progress.processed_units == 10
    assert (await get(served, scene.completing.job_no)).status == job_pb2.Job.READY
    regressing = await get(served, scene.regressing.job_no)
    assert regressing.progress.processed_units == 40
    reclaimed = await get(served, scene.reclaimed.job_no)
    assert reclaimed.status == job_pb2.Job.RUNNING and reclaimed.progress.processed_units == 0
    events = await scene.events()
    assert [events[lease.job_no] - events_before[lease.job_no] for lease in scene.good()] == [1, 0, 1]


async def test_a_batch_that_loses_its_connection_before_commit_runs_again_whole(served: Served, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    scene = Scene(served)
    await scene.set_up()
    events_before = await scene.events()
    gate = Gate(served, monkeypatch)
    attempts: list[int] = []
    before_commit(served, monkeypatch, lose_connection(served, times=1, attempts=attempts))

    answers = await gate.through(served, scene.holder, scene.calls)

    assert len(attempts) == 2  # lost once, then run again whole
    reported, beat, completed, *refused = answers
    assert isinstance(reported, worker_pb2.ReportStageResponse), reported
    assert [s.state for s in beat.leases] == [worker_pb2.LeaseState.State.OK]
    assert completed.status == job_pb2.Job.READY
    assert [_refusal(a) for a in refused] == [LEASE_LOST, LEASE_LOST, (FP, "PROGRESS_REGRESSION")]
    # the rerun applied each change once: one new PROGRESS event, the job once READY
    events = await scene.events()
    assert [events[lease.job_no] - events_before[lease.job_no] for lease in scene.good()] == [1, 0, 1]
    assert (await get(served, scene.reported.job_no)).progress.processed_units == 10
    assert (await get(served, scene.completing.job_no)).status == job_pb2.Job.READY


async def test_a_batch_whose_database_keeps_failing_fails_every_call_and_writes_nothing(  # type: ignore[no-untyped-def]
    served: Served, monkeypatch
) -> None:
    scene = Scene(served)
    await scene.set_up()
    gate = Gate(served, monkeypatch)
    attempts: list[int] = []
    before_commit(served, monkeypatch, lose_connection(served, times=1_000, attempts=attempts))
    jobs = [scene.reported, scene.beating, scene.completing, scene.forged, scene.reclaimed, scene.regressing]
    before = [await get(served, lease.job_no) for lease in jobs]

    rows = await db_rows(served)  # after set_up; the held Heartbeats add no rows
    answers = await gate.through(served, scene.holder, scene.calls)

    assert [a.code() if isinstance(a, grpc.aio.AioRpcError) else a for a in answers] == [
        grpc.StatusCode.UNAVAILABLE
    ] * UNDER_TEST
    assert len(attempts) >= 1
    assert [await get(served, lease.job_no) for lease in jobs] == before
    assert await db_rows(served) == rows
