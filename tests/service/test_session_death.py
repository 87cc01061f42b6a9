"""A worker's Session that ends holding leases: its worker is taken for dead after the grace.

The leases end within JOBWIRE_SESSION_GRACE_SECONDS (evidence: WORKER_DISCONNECTED); then,
unless the worker named them again, they are handled as expired leases are, at the grace's
end and with no stall grace. The grace is a real timer: these servers run a short one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import grpc
from served import Served, eventually
from service_support import LEASE_LOST, complete_request, events, get, rpc_error, submit, when
from session_support import Session, claim_request, hold_writes, ref

from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.server import session as session_module
from jobwire.worker.server.session_push import SessionPush

GRACE_S = 1.0


def retry(max_attempts: int = 3) -> job_pb2.RetryPolicy:
    return job_pb2.RetryPolicy(max_attempts=max_attempts, on_lease_lost=job_pb2.RetryPolicy.RETRY)


async def claimed(served: Served, session: Session, job_type: str, **fields: object) -> worker_pb2.Lease:
    await submit(served, job_type, **fields)
    (lease,) = (await session.ask(1, claim=claim_request(job_type))).claim.leases
    return lease


def disconnected(served: Served, step: str, leases: int = 1):  # type: ignore[no-untyped-def]
    async def probe() -> bool:
        return served.runtime.host.metrics.disconnected_leases(step) >= leases

    return probe


async def test_a_dead_session_requeues_its_retry_job_at_the_grace_end(serve, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="jobwire.worker.server.disconnects")
    served = await serve(session_grace_seconds=GRACE_S)
    session = Session(served)
    lease = await claimed(served, session, "dies", retry_policy=retry())
    start = time.monotonic()
    session.call.cancel()  # the worker is gone: killed, or its connection with it
    back = await eventually(when(served, lease.job_no, lambda j: j.status == job_pb2.Job.QUEUED), GRACE_S + 5)
    took = time.monotonic() - start
    assert took <= GRACE_S + 1, took
    assert (back.attempt, back.stalled) == (1, False)  # the next claim is attempt 2
    trail = [e.kind for e in await events(served, lease.job_no)]
    assert trail[-3:] == ["WORKER_DISCONNECTED", "LEASE_EXPIRED", "LEASE_REVOKED_REQUEUED"], trail
    assert await rpc_error(served.workers.Complete(complete_request(lease))) == LEASE_LOST  # the old token is refused
    (again,) = (await served.workers.Claim(claim_request("dies"))).leases
    assert again.attempt == 2 and again.worker_token != lease.worker_token
    assert served.runtime.host.metrics.disconnected_leases("expired") == 1
    # an operator's log says it too, naming the job: the session's end, then the lease's
    said = [r.getMessage() for r in caplog.records if r.name == "jobwire.worker.server.disconnects"]
    assert len(said) == 2 and all(lease.job_no in line for line in said), said
    assert said[0].startswith("a worker session ended") and said[1].startswith("leases of an ended session expired")


async def test_a_dead_session_flags_its_inspect_job_and_reruns_nothing(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(session_grace_seconds=GRACE_S)
    session = Session(served)
    lease = await claimed(served, session, "inspected")  # INSPECT: the default policy
    session.call.cancel()
    flagged = await eventually(when(served, lease.job_no, lambda j: j.stalled), GRACE_S + 5)
    assert (flagged.status, flagged.attempt) == (job_pb2.Job.RUNNING, 1)
    trail = [e.kind for e in await events(served, lease.job_no)]
    assert trail[-2:] == ["WORKER_DISCONNECTED", "LEASE_EXPIRED"], trail
    assert list((await served.workers.Claim(claim_request("inspected"))).leases) == []


def heartbeat(lease: worker_pb2.Lease) -> worker_pb2.HeartbeatRequest:
    return worker_pb2.HeartbeatRequest(worker_id="w1", leases=[worker_pb2.LeaseRef(**ref(lease))])


async def test_a_dead_sessions_renewal_whose_answer_was_never_written_is_its_own(serve, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The worker died after its heartbeat reached the database, before the answer reached it:
    the renewal is the session's, not a sign its worker came back elsewhere."""
    served = await serve(session_grace_seconds=GRACE_S)
    session = Session(served)
    lease = await claimed(served, session, "beats", retry_policy=retry())
    held, _ = hold_writes(monkeypatch, lambda frame: frame.HasField("heartbeat"))
    await session.send(2, heartbeat=heartbeat(lease))
    await asyncio.wait_for(held.wait(), 30)  # renewed in the database, its answer unwritten
    start = time.monotonic()
    session.call.cancel()
    back = await eventually(when(served, lease.job_no, lambda j: j.status == job_pb2.Job.QUEUED), GRACE_S + 5)
    assert time.monotonic() - start <= GRACE_S + 1
    assert back.attempt == 1
    assert served.runtime.host.metrics.disconnected_leases("marked") == 1


async def test_a_dead_sessions_renewal_committing_as_it_ends_is_its_own(serve, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The worker died while its heartbeat's transaction was committing: the session waits
    for it (it commits whoever waits), so the renewal is known as its own."""
    served = await serve(session_grace_seconds=GRACE_S)
    session = Session(served)
    lease = await claimed(served, session, "commits", retry_policy=retry())
    commits, committed, gate = served.runtime.commits, asyncio.Event(), asyncio.Event()
    run = commits._run  # the store's apply, as the batcher was given it

    async def answered_late(work: Sequence[Any]) -> Sequence[Any]:
        results = await run(work)
        if not committed.is_set():  # the heartbeat's: committed, its answer held back
            committed.set()
            await gate.wait()
        return results

    monkeypatch.setattr(commits, "_run", answered_late)
    ending, stop_standing = asyncio.Event(), SessionPush.stop_standing

    def stopping(push: SessionPush) -> asyncio.Task[None] | None:
        ending.set()  # the session's end has begun
        return stop_standing(push)

    monkeypatch.setattr(SessionPush, "stop_standing", stopping)
    await session.send(2, heartbeat=heartbeat(lease))
    await asyncio.wait_for(committed.wait(), 30)
    start = time.monotonic()
    session.call.cancel()
    await asyncio.wait_for(ending.wait(), 30)
    gate.set()
    back = await eventually(when(served, lease.job_no, lambda j: j.status == job_pb2.Job.QUEUED), GRACE_S + 5)
    assert time.monotonic() - start <= GRACE_S + 1
    assert back.attempt == 1
    assert served.runtime.host.metrics.disconnected_leases("marked") == 1


async def test_a_worker_that_moved_keeps_its_lease_when_its_old_sessions_renewal_lands_late(serve, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The worker moved to a new session (its old stream cut, say) while a heartbeat on the old
    one was committed but unanswered, and renewed on the new one first: the old session's end,
    handled after both, marks the lease (its guard sees no renewal past its own). The new
    session holds the lease and hears of the mark: it renews it, and the worker keeps it."""
    served = await serve(session_grace_seconds=GRACE_S)
    old = Session(served)
    lease = await claimed(served, old, "moves", retry_policy=retry())
    once = [True]

    def first_heartbeat(frame: worker_pb2.ServerFrame) -> bool:
        if frame.HasField("heartbeat") and once:
            once.pop()
            return True
        return False

    held, _ = hold_writes(monkeypatch, first_heartbeat)
    await old.send(2, heartbeat=heartbeat(lease))
    await asyncio.wait_for(held.wait(), 30)  # renewed on the old session, its answer unwritten
    new = Session(served)
    assert (await new.ask(1, heartbeat=heartbeat(lease))).heartbeat.leases[0].state == worker_pb2.LeaseState.OK
    old.call.cancel()
    await eventually(disconnected(served, "marked"), what="the old session's end marked the lease")
    await eventually(disconnected(served, "untouched"), GRACE_S + 5, "the grace's end found the lease renewed")
    assert served.runtime.host.metrics.disconnected_leases("renewed") == 1
    job = await get(served, lease.job_no)
    assert (job.status, job.attempt, job.stalled) == (job_pb2.Job.RUNNING, 1, False)
    done = await new.ask(2, complete=complete_request(lease))
    assert not done.HasField("error"), done.error


async def test_a_worker_back_within_the_grace_keeps_its_lease(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(session_grace_seconds=3.0)  # the new session speaks well within it
    first = Session(served)
    lease = await claimed(served, first, "back", retry_policy=retry())
    first.call.cancel()
    await eventually(disconnected(served, "marked"), what="the lease marked")
    again = Session(served)
    beat = worker_pb2.HeartbeatRequest(worker_id="w1", leases=[worker_pb2.LeaseRef(**ref(lease))])
    assert (await again.ask(1, heartbeat=beat)).heartbeat.leases[0].state == worker_pb2.LeaseState.OK
    await eventually(disconnected(served, "untouched"), 10, "the grace's end found the lease renewed")
    done = await again.ask(2, complete=complete_request(lease))
    assert done.job.status == job_pb2.Job.READY
    assert await again.close() == grpc.StatusCode.OK  # it holds nothing now: nothing more is marked
    assert [e.kind for e in await events(served, lease.job_no)][-2:] == ["WORKER_DISCONNECTED", "COMPLETED"]


async def test_a_session_that_let_go_of_every_lease_marks_nothing(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(session_grace_seconds=GRACE_S)
    tidy = Session(served)
    jobs = [await submit(served, "tidy") for _ in range(2)]
    done, given_back = (await tidy.ask(1, claim=worker_pb2.ClaimRequest(
        worker_id="w1", job_types=[claim_request("tidy").job_types[0]], max_jobs=2,
    ))).claim.leases  # fmt: skip
    await tidy.ask(2, complete=complete_request(done))
    await tidy.ask(3, release=worker_pb2.ReleaseRequest(**ref(given_back)))
    assert await tidy.close() == grpc.StatusCode.OK
    # A session ending after it, holding a lease, is marked: the marks go through the one
    # ordered commit queue, so the tidy session's would have come first.
    other = Session(served)
    await claimed(served, other, "untidy")
    assert await other.close() == grpc.StatusCode.OK  # half-closed, its lease still held
    await eventually(disconnected(served, "marked"), what="the untidy session's lease marked")
    assert served.runtime.host.metrics.disconnected_leases("marked") == 1
    for job in jobs:
        assert "WORKER_DISCONNECTED" not in [e.kind for e in await events(served, job.job_no)]
    assert (await get(served, given_back.job_no)).status == job_pb2.Job.QUEUED


async def test_a_server_that_stops_marks_nothing(serve) -> None:  # type: ignore[no-untyped-def]
    """Its sessions end, their workers do not: they name their leases to another replica."""
    leaving = await serve(session_grace_seconds=GRACE_S)
    session = Session(leaving)
    lease = await claimed(leaving, session, "stays")
    await leaving.close()
    staying = await serve()
    assert "WORKER_DISCONNECTED" not in [e.kind for e in await events(staying, lease.job_no)]
    beat = worker_pb2.HeartbeatRequest(worker_id="w1", leases=[worker_pb2.LeaseRef(**ref(lease))])
    assert (await staying.workers.Heartbeat(beat)).leases[0].state == worker_pb2.LeaseState.OK


async def test_a_session_that_ended_in_silence_leaves_its_leases_to_their_end(serve, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The keepalive closes a stopped worker's connection as a dead host's: a session that
    heard nothing for the keepalive's span is no evidence of death (here: any span will do)."""
    monkeypatch.setattr(session_module, "KEEPALIVE_SILENCE_S", 0.0)
    served = await serve(session_grace_seconds=GRACE_S)
    session = Session(served)
    lease = await claimed(served, session, "paused", retry_policy=retry())
    session.call.cancel()
    await eventually(disconnected(served, "silent"), what="the silent session's lease left to its end")
    assert served.runtime.host.metrics.disconnected_leases("marked") == 0
    assert "WORKER_DISCONNECTED" not in [e.kind for e in await events(served, lease.job_no)]
    beat = worker_pb2.HeartbeatRequest(worker_id="w1", leases=[worker_pb2.LeaseRef(**ref(lease))])
    assert (await served.workers.Heartbeat(beat)).leases[0].state == worker_pb2.LeaseState.OK  # resumed, kept
