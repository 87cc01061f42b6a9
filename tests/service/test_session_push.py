"""What a worker's Session is sent unasked (call_id 0): a standing claim's leases, a cancel
requested for a job it holds (through any replica), a lease it held that is gone."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import grpc
from google.rpc import code_pb2
from served import Served, eventually, housekeeping_round
from service_support import claim, duration, events, spec, submit, when
from session_support import Session, claim_request, claims_waiting, hold_writes, ref

from jobwire.db.store import Claim
from jobwire.rpc.batching import Batcher
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2
from jobwire.worker.server.leasing import Leasing
from jobwire.worker.server.session_push import SessionPush

INVALID = code_pb2.INVALID_ARGUMENT


def standing(job_type: str, max_jobs: int) -> worker_pb2.ClaimRequest:
    return worker_pb2.ClaimRequest(worker_id="w1", job_types=[spec(job_type)], max_jobs=max_jobs, wait=duration(9))


async def held(served: Served, session: Session, job_type: str, **fields: Any) -> worker_pb2.Lease:
    """A job submitted and claimed through `session`: its lease, which the session now holds."""
    await submit(served, job_type, **fields)
    (lease,) = (await session.ask(1, claim=claim_request(job_type))).claim.leases
    return lease


async def test_a_standing_claim_pushes_jobs_as_they_come_up_to_max_jobs(served) -> None:  # type: ignore[no-untyped-def]
    session = Session(served)
    answer = await session.ask(1, standing_claim=standing("later", 2))
    assert answer.WhichOneof("reply") == "claim" and list(answer.claim.leases) == []  # answered at once, empty
    await claims_waiting(served)
    first = await submit(served, "later")
    pushed = await session.pushed()
    assert [lease.job_no for lease in pushed.leased.leases] == [first.job_no]
    more = [await submit(served, "later") for _ in range(2)]
    second = await session.pushed()
    assert [lease.job_no for lease in second.leased.leases] == [more[0].job_no]  # two pushed: no more

    async def ended() -> bool:
        return served.runtime.host.metrics.claims_waiting() == 0

    await eventually(ended, what="the standing claim ended after max_jobs")
    beat = await session.ask(2, heartbeat=worker_pb2.HeartbeatRequest(worker_id="w1"))  # no push came before it
    assert beat.WhichOneof("reply") == "heartbeat"
    assert (await served.jobs.Get(job_pb2.GetRequest(job_no=more[1].job_no))).status == job_pb2.Job.QUEUED
    # A new standing claim replaces the last and counts again from nothing.
    assert (await session.ask(3, standing_claim=standing("later", 1))).WhichOneof("reply") == "claim"
    third = await session.pushed()
    assert [lease.job_no for lease in third.leased.leases] == [more[1].job_no]
    assert served.runtime.host.metrics.pushes("leased") == 3
    assert await session.close() == grpc.StatusCode.OK


async def test_a_release_ends_the_standing_claim_so_the_job_goes_to_another_worker(served) -> None:  # type: ignore[no-untyped-def]
    stopping = Session(served)
    await stopping.ask(1, standing_claim=standing("handed", 2))
    await claims_waiting(served)
    job = await submit(served, "handed")
    (lease,) = (await stopping.pushed()).leased.leases
    await claims_waiting(served)  # the standing claim waits for its second job
    release = worker_pb2.ReleaseRequest(job_no=lease.job_no, worker_token=lease.worker_token, note="stopping")
    assert (await stopping.ask(2, release=release)).job.status == job_pb2.Job.QUEUED
    # Not pushed back to the worker that let it go: the next claim, anyone's, takes it.
    [again] = await claim(served, "handed")
    assert (again.job_no, again.attempt) == (job.job_no, 2)
    beat = await stopping.ask(3, heartbeat=worker_pb2.HeartbeatRequest(worker_id="w1"))  # no push came before it
    assert beat.WhichOneof("reply") == "heartbeat"
    assert served.runtime.host.metrics.pushes("leased") == 1
    assert await stopping.close() == grpc.StatusCode.OK


async def test_a_standing_claim_is_refused_as_a_claim_would_be(served) -> None:  # type: ignore[no-untyped-def]
    session = Session(served)
    refused = await session.ask(4, standing_claim=worker_pb2.ClaimRequest(worker_id="w1"))
    unary = await session.ask(5, claim=worker_pb2.ClaimRequest(worker_id="w1"))
    assert refused.error.code == INVALID and refused.error == unary.error
    session.call.cancel()


async def test_a_push_the_session_never_wrote_hands_its_lease_back(served, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    held_up, _ = hold_writes(
        monkeypatch, lambda frame: bool(frame.leased.leases)
    )  # never written: the session ends first
    session = Session(served)
    await session.ask(1, standing_claim=standing("unwritten", 1))
    job = await submit(served, "unwritten")
    await asyncio.wait_for(held_up.wait(), 10)
    session.call.cancel()
    back = await eventually(when(served, job.job_no, lambda j: j.status == job_pb2.Job.QUEUED and j.attempt == 1))
    assert back.status == job_pb2.Job.QUEUED
    trail = [(e.kind, e.detail) for e in await events(served, job.job_no)]
    assert trail[-1] == ("RELEASED", "claim not delivered: the session ended before they were pushed"), trail


async def held_in_its_transaction(
    served: Served, job_type: str, work_wanted: asyncio.Event, in_transaction: asyncio.Event
) -> tuple[Session, job_pb2.Job]:
    """A session's standing claim for one job of `job_type`, and that job submitted: its claim's
    transaction is held now (by the test's patch, once `work_wanted` is set)."""
    session = Session(served)
    await session.ask(1, standing_claim=standing(job_type, 1))
    await claims_waiting(served)
    work_wanted.set()
    job = await submit(served, job_type)
    await asyncio.wait_for(in_transaction.wait(), 10)
    return session, job


async def test_a_cancel_read_before_a_pushed_lease_is_written_is_pushed_after_it(served, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A Cancel has the event tail poll at once: it can bring the cancel while the lease's
    `leased` frame still waits to be written. The lease is held from its claim, so the cancel
    follows the lease instead of finding no holder (the worker heard it at its next heartbeat)."""
    holding, release = hold_writes(monkeypatch, lambda frame: bool(frame.leased.leases))
    session = Session(served)
    await session.ask(1, standing_claim=standing("raced", 1))
    await claims_waiting(served)
    job = await submit(served, "raced")
    await asyncio.wait_for(holding.wait(), 10)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
    await served.runtime.tail.sync()  # the cancel delivered while the lease is unwritten
    release.set()
    (lease,) = (await session.pushed()).leased.leases
    frame = await session.pushed()
    assert frame.cancel_requested == worker_pb2.LeaseState(
        job_no=lease.job_no, state=worker_pb2.LeaseState.CANCEL_REQUESTED
    )
    session.call.cancel()


async def test_a_half_close_during_a_standing_claims_transaction_pushes_its_lease_not_hands_it_back(
    served, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A worker moving to a new stream half-closes the old one: its standing claim waits no
    more, and a claim already in its transaction is pushed there, read by the worker before
    the stream's end, rather than handed back and claimed a second time."""
    wound, wind_down, claim_once = asyncio.Event(), SessionPush.wind_down, Leasing._claim_once

    def winding(self: SessionPush) -> Any:
        try:
            return wind_down(self)
        finally:
            wound.set()

    async def after_the_half_close(self: Leasing, who: Any, work: Any) -> Any:
        if "wound" in who.plans and not wound.is_set() and work_wanted.is_set():
            in_transaction.set()
            await wound.wait()  # the half-close is read while this claim's transaction runs
        return await claim_once(self, who, work)

    in_transaction, work_wanted = asyncio.Event(), asyncio.Event()
    monkeypatch.setattr(SessionPush, "wind_down", winding)
    monkeypatch.setattr(Leasing, "_claim_once", after_the_half_close)
    session, job = await held_in_its_transaction(served, "wound", work_wanted, in_transaction)
    await session.call.done_writing()
    (lease,) = (await session.pushed()).leased.leases
    assert lease.job_no == job.job_no
    assert await asyncio.wait_for(session.call.read(), 30) is grpc.aio.EOF
    assert await session.call.code() == grpc.StatusCode.OK
    kinds = [e.kind for e in await events(served, job.job_no)]
    # Claimed once, never handed back; the session ended holding it, as one moving away does.
    assert kinds == ["SUBMITTED", "CLAIMED", "WORKER_DISCONNECTED"], kinds


async def test_asking_again_during_a_standing_claims_transaction_pushes_its_lease_and_adds_to_the_count(
    served, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A worker asks again each time a slot frees up, for its free slots less the leases it is
    still owed. A claim in its transaction then is not cancelled (its lease handed back, to be
    claimed once more): its lease is pushed, counted against the first frame's max_jobs, and the
    new frame's are added: one asked first, two more, three pushed in all, never a fourth."""
    in_transaction, asked_again, work_wanted = asyncio.Event(), asyncio.Event(), asyncio.Event()
    commit = Batcher.__call__

    async def held_open(self: Batcher[Any, Any], work: Any) -> Any:
        if isinstance(work, Claim) and work_wanted.is_set() and not asked_again.is_set():
            in_transaction.set()
            await asked_again.wait()  # the new frame is read while this claim's transaction runs
        return await commit(self, work)

    monkeypatch.setattr(Batcher, "__call__", held_open)
    session, first = await held_in_its_transaction(served, "again", work_wanted, in_transaction)
    assert (await session.ask(2, standing_claim=standing("again", 2))).WhichOneof("reply") == "claim"
    asked_again.set()
    (lease,) = (await session.pushed()).leased.leases
    assert lease.job_no == first.job_no
    assert [e.kind for e in await events(served, first.job_no)] == ["SUBMITTED", "CLAIMED"]
    more = [await submit(served, "again") for _ in range(3)]
    pushed: list[str] = []
    while len(pushed) < 2:  # one frame or two: claims and submits may share a transaction
        pushed += [lease.job_no for lease in (await session.pushed()).leased.leases]
    assert pushed == [job.job_no for job in more[:2]]
    await eventually(lambda: _no_claim_waiting(served), what="the standing claim ended after 3 leases")
    assert (await served.jobs.Get(job_pb2.GetRequest(job_no=more[2].job_no))).status == job_pb2.Job.QUEUED
    assert served.runtime.host.metrics.pushes("leased") == 3
    assert await session.close() == grpc.StatusCode.OK


async def _no_claim_waiting(served: Served) -> bool:
    return served.runtime.host.metrics.claims_waiting() == 0


async def cancel_pushed(
    session: Session, jobs: Served, lease: worker_pb2.Lease
) -> tuple[worker_pb2.ServerFrame, float]:
    """Cancel the job through `jobs`: the frame its holder's session is pushed, and how long it took."""
    start = time.monotonic()
    await jobs.jobs.Cancel(job_pb2.CancelRequest(job_no=lease.job_no))
    frame = await session.pushed()
    return frame, time.monotonic() - start


async def test_a_cancel_is_pushed_to_the_session_holding_the_job(served) -> None:  # type: ignore[no-untyped-def]
    session = Session(served)
    lease = await held(served, session, "cancelled")
    frame, took = await cancel_pushed(session, served, lease)
    assert frame.cancel_requested == worker_pb2.LeaseState(
        job_no=lease.job_no, state=worker_pb2.LeaseState.CANCEL_REQUESTED
    ), took
    # The job's QUEUED version, which the tail may bring after the claim, pushed no lease_lost.
    assert served.runtime.host.metrics.pushes("lease_lost") == 0
    done = await session.ask(2, confirm_cancel=worker_pb2.ConfirmCancelRequest(**ref(lease)))
    assert done.job.status == job_pb2.Job.CANCELLED
    await served.runtime.tail.sync()  # every event so far delivered: its own ending pushed nothing
    assert served.runtime.host.metrics.pushes("lease_lost") == 0
    assert await session.close() == grpc.StatusCode.OK


async def test_a_cancel_through_another_replica_is_pushed(serve) -> None:  # type: ignore[no-untyped-def]
    jobapi_side, worker_side = await serve(), await serve()
    session = Session(worker_side)
    lease = await held(worker_side, session, "elsewhere")
    frame, took = await cancel_pushed(session, jobapi_side, lease)
    assert frame.cancel_requested.state == worker_pb2.LeaseState.CANCEL_REQUESTED, took
    session.call.cancel()


async def test_a_cancel_is_pushed_at_once_not_at_the_tails_next_poll(serve) -> None:  # type: ignore[no-untyped-def]
    """The Cancel that commits here has the event tail poll at once (and, in a family, its
    siblings' tails): with a poll an hour apart, the push still comes."""
    served = await serve(feed_poll_seconds=3600)
    session = Session(served)
    lease = await held(served, session, "at-once")
    await served.runtime.tail.sync()  # the lease's own past read: the tail now pauses for an hour
    frame, took = await cancel_pushed(session, served, lease)
    assert frame.cancel_requested.state == worker_pb2.LeaseState.CANCEL_REQUESTED, took
    session.call.cancel()


async def test_a_resumed_lease_is_pushed_its_cancel(served) -> None:  # type: ignore[no-untyped-def]
    """A lease named in a Heartbeat (a worker back on a new session) is held as a claimed one."""
    await submit(served, "resumed")
    (lease,) = (await served.workers.Claim(claim_request("resumed"))).leases
    session = Session(served)
    beat = worker_pb2.HeartbeatRequest(worker_id="w1", leases=[worker_pb2.LeaseRef(**ref(lease))])
    assert (await session.ask(1, heartbeat=beat)).heartbeat.leases[0].state == worker_pb2.LeaseState.OK
    frame, _ = await cancel_pushed(session, served, lease)
    assert frame.cancel_requested.job_no == lease.job_no
    session.call.cancel()


async def test_lease_lost_is_pushed_when_an_operator_requeues_the_job(served) -> None:  # type: ignore[no-untyped-def]
    session = Session(served)
    lease = await held(served, session, "requeued")
    served.clock.advance(timedelta(seconds=31))  # the lease has run out: an operator may requeue it
    await served.admin.Requeue(admin_pb2.RequeueRequest(job_no=lease.job_no, reason="stuck"))
    frame = await session.pushed()
    assert frame.lease_lost == worker_pb2.LeaseState(job_no=lease.job_no, state=worker_pb2.LeaseState.LOST)
    session.call.cancel()


async def test_a_standing_claims_lease_reads_nothing_for_its_past_and_hears_its_loss(served, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The tail brings a job's Submit after the standing claim pushed its lease (it polls every
    50 ms): that is the lease's past, and reading the lease for it cost a read per job."""
    store = served.runtime.store
    reads: list[str] = []
    real = store.lease_state

    def lease_state(tenant: str, job_no: str, token: str) -> Any:
        reads.append(job_no)
        return real(tenant, job_no, token)

    monkeypatch.setattr(store, "lease_state", lease_state)
    session = Session(served)
    await session.ask(1, standing_claim=standing("pushed", 1))
    await claims_waiting(served)
    job = await submit(served, "pushed")
    (lease,) = (await session.pushed()).leased.leases
    await served.runtime.tail.sync()  # its Submit and its claim delivered
    assert reads == []
    served.clock.advance(timedelta(seconds=31))
    await served.admin.Requeue(admin_pb2.RequeueRequest(job_no=job.job_no, reason="stuck"))
    frame = await session.pushed()  # a change after the lease is news: read, and pushed
    assert frame.lease_lost == worker_pb2.LeaseState(job_no=lease.job_no, state=worker_pb2.LeaseState.LOST)
    assert reads == [job.job_no]
    session.call.cancel()


async def test_lease_lost_is_pushed_timed_out_when_the_attempt_runs_out(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(reaper_interval_seconds=0)  # housekeeping runs only when the test runs a round
    session = Session(served)
    lease = await held(served, session, "slow", timeouts=job_pb2.Timeouts(attempt_timeout=duration(10)))
    served.clock.advance(timedelta(seconds=11))
    await housekeeping_round(served)
    frame = await session.pushed()
    assert frame.lease_lost == worker_pb2.LeaseState(job_no=lease.job_no, state=worker_pb2.LeaseState.TIMED_OUT)
    session.call.cancel()
