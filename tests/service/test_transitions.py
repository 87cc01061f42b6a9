"""The transition table (jobwire.domain.states), cell by cell, through the real RPCs.

Every status is reached by real calls (no SQL), then every operation is tried on a fresh job
in that status. An allowed cell must land in the expected status; a refused one must answer
the expected canonical code and ErrorInfo reason and leave the job exactly as it was (the
whole user view compared, version included). The calls that end a lease (Complete, Fail,
ConfirmCancel, Release) replay with their own token and refuse every other call with it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import grpc
import pytest
from served import eventually
from service_support import (
    FORGED_TOKEN,
    LEASE_LOST,
    artifact,
    assert_invariants,
    claim,
    duration,
    get,
    rpc_failure,
    submit,
)

from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.both_databases  # every state change's guarded SQL, cell by cell

FP = grpc.StatusCode.FAILED_PRECONDITION
Status = job_pb2.Job.Status


# -- outcomes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class To:
    """Allowed: the call succeeds and the job is now in `status` with a new version."""

    status: str


@dataclass(frozen=True)
class Same:
    """Allowed but changes nothing: idempotent Cancel, a replayed ending, a Claim that finds
    nothing, a Heartbeat (whose lease state is `lease`). The user view stays identical."""

    lease: str = ""
    replay: bool = False


@dataclass(frozen=True)
class No:
    """Refused with `code` and ErrorInfo `reason`; the job stays exactly as it was."""

    code: grpc.StatusCode
    reason: str


LOST = No(*LEASE_LOST)
NOT_CANCELLABLE = No(FP, "JOB_NOT_CANCELLABLE")
NOT_RETRYABLE = No(FP, "NOT_RETRYABLE")
NOT_REQUEUEABLE = No(FP, "INVALID_STATE")
LEASE_ACTIVE = No(FP, "LEASE_ACTIVE")
CANCEL_NOT_REQUESTED = No(FP, "CANCEL_NOT_REQUESTED")
NOT_WAITING = No(FP, "JOB_NOT_WAITING")

OPS = (
    "Cancel",
    "Retry",
    "Claim",
    "ReportStage",
    "Heartbeat",
    "Complete",
    "Fail",
    "FailFinal",
    "ConfirmCancel",
    "Release",
    "Requeue",
    "AwaitReview",
    "Approve",
    "Reject",
)

# A job in a terminal status (or QUEUED again) refuses every worker call with the token it last
# had, except the very call that ended that lease, which replays.
_WORKER_OPS = ("ReportStage", "Complete", "Fail", "FailFinal", "ConfirmCancel", "Release", "AwaitReview")
# Only a WAITING job can be resolved.
_UNREVIEWED = {"Approve": NOT_WAITING, "Reject": NOT_WAITING}


def _leaseless(replays: tuple[str, ...] = ()) -> dict[str, object]:
    out: dict[str, object] = {op: (Same(replay=True) if op in replays else LOST) for op in _WORKER_OPS}
    out["Heartbeat"] = Same(lease="LOST")
    return {**out, **_UNREVIEWED}


TABLE: dict[str, dict[str, object]] = {
    # never leased; the worker calls carry a well-formed token nobody was given
    "QUEUED": {
        "Cancel": To("CANCELLED"),
        "Retry": NOT_RETRYABLE,
        "Claim": To("RUNNING"),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(),
    },
    # released by its worker: its old token replays Release and nothing else
    "QUEUED_RELEASED": {
        "Cancel": To("CANCELLED"),
        "Retry": NOT_RETRYABLE,
        "Claim": To("RUNNING"),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(replays=("Release",)),
    },
    # a retryable failure waiting out its backoff: not claimable yet; the old token replays Fail
    "QUEUED_BACKOFF": {
        "Cancel": To("CANCELLED"),
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(replays=("Fail", "FailFinal")),
    },
    "RUNNING": {
        "Cancel": To("CANCEL_REQUESTED"),
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "ReportStage": To("RUNNING"),
        "Heartbeat": Same(lease="OK"),
        "Complete": To("READY"),
        "Fail": To("QUEUED"),
        "FailFinal": To("FAILED"),
        "ConfirmCancel": CANCEL_NOT_REQUESTED,
        "Release": To("QUEUED"),
        "Requeue": LEASE_ACTIVE,  # its worker would run on: two workers at once
        "AwaitReview": To("WAITING"),
        **_UNREVIEWED,
    },
    # the lease ran out but nothing revoked it: the holder may still speak; an operator may requeue
    "RUNNING_EXPIRED": {
        "Cancel": To("CANCEL_REQUESTED"),
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "ReportStage": To("RUNNING"),
        "Heartbeat": Same(lease="OK"),
        "Complete": To("READY"),
        "Fail": To("QUEUED"),
        "FailFinal": To("FAILED"),
        "ConfirmCancel": CANCEL_NOT_REQUESTED,
        "Release": To("QUEUED"),
        "Requeue": To("QUEUED"),
        "AwaitReview": To("WAITING"),
        **_UNREVIEWED,
    },
    # DELIVERING is not cancellable; everything else is as in any RUNNING stage
    "RUNNING_DELIVERING": {
        "Cancel": NOT_CANCELLABLE,
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "ReportStage": To("RUNNING"),
        "Heartbeat": Same(lease="OK"),
        "Complete": To("READY"),
        "Fail": To("QUEUED"),
        "FailFinal": To("FAILED"),
        "ConfirmCancel": CANCEL_NOT_REQUESTED,
        "Release": To("QUEUED"),
        "Requeue": LEASE_ACTIVE,
        "AwaitReview": To("WAITING"),
        **_UNREVIEWED,
    },
    "CANCEL_REQUESTED": {
        "Cancel": Same(),
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "ReportStage": To("CANCEL_REQUESTED"),
        "Heartbeat": Same(lease="CANCEL_REQUESTED"),
        "Complete": To("READY"),
        "Fail": To("CANCELLED"),
        "FailFinal": To("CANCELLED"),
        "ConfirmCancel": To("CANCELLED"),
        "Release": To("CANCELLED"),
        "Requeue": NOT_REQUEUEABLE,
        "AwaitReview": To("CANCELLED"),  # the user asked it to stop: nobody needs to review it
        **_UNREVIEWED,
    },
    # handed to a person: no lease; its old token replays AwaitReview and nothing else
    "WAITING": {
        "Cancel": To("CANCELLED"),
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(replays=("AwaitReview",)),
        "Approve": To("QUEUED"),
        "Reject": To("FAILED"),
    },
    "READY": {
        "Cancel": NOT_CANCELLABLE,
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(replays=("Complete",)),
    },
    "FAILED_RETRYABLE": {
        "Cancel": NOT_CANCELLABLE,
        "Retry": To("QUEUED"),
        "Claim": Same(),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(replays=("Fail", "FailFinal")),
    },
    "FAILED_FINAL": {
        "Cancel": NOT_CANCELLABLE,
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(replays=("Fail", "FailFinal")),
    },
    # cancelled while queued: never leased
    "CANCELLED": {
        "Cancel": Same(),
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(),
    },
    "CANCELLED_CONFIRMED": {
        "Cancel": Same(),
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(replays=("ConfirmCancel",)),
    },
    "CANCELLED_BY_FAIL": {
        "Cancel": Same(),
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(replays=("Fail", "FailFinal")),
    },
    "CANCELLED_BY_RELEASE": {
        "Cancel": Same(),
        "Retry": NOT_RETRYABLE,
        "Claim": Same(),
        "Requeue": NOT_REQUEUEABLE,
        **_leaseless(replays=("Release",)),
    },
}

STATUS_OF = {
    "QUEUED": "QUEUED",
    "QUEUED_RELEASED": "QUEUED",
    "QUEUED_BACKOFF": "QUEUED",
    "RUNNING": "RUNNING",
    "RUNNING_DELIVERING": "RUNNING",
    "RUNNING_EXPIRED": "RUNNING",
    "CANCEL_REQUESTED": "CANCEL_REQUESTED",
    "WAITING": "WAITING",
    "READY": "READY",
    "FAILED_RETRYABLE": "FAILED",
    "FAILED_FINAL": "FAILED",
    "CANCELLED": "CANCELLED",
    "CANCELLED_CONFIRMED": "CANCELLED",
    "CANCELLED_BY_FAIL": "CANCELLED",
    "CANCELLED_BY_RELEASE": "CANCELLED",
}


def test_the_table_covers_every_status_and_operation() -> None:
    assert set(TABLE) == set(STATUS_OF)
    assert {STATUS_OF[s] for s in TABLE} == set(job_pb2.Job.Status.keys()) - {"STATUS_UNSPECIFIED"}
    for state, row in TABLE.items():
        assert set(row) == set(OPS), state


# -- reaching a status by real calls ------------------------------------------------------------


@dataclass
class Reached:
    job_no: str
    job_type: str
    token: str  # the token a worker would call with: the current or last lease, else forged
    ended: job_pb2.Job | None = None  # the reply of the call that ended the last lease


_types = itertools.count(1)


def _new_type() -> str:
    return f"cell{next(_types)}"


def _fail(job_no: str, token: str, *, retryable: bool) -> worker_pb2.FailRequest:
    return worker_pb2.FailRequest(
        job_no=job_no,
        worker_token=token,
        category=job_pb2.JobError.DEPENDENCY_FAILED,
        message="the upstream service did not answer",
        retryable=retryable,
        detail="timeout after 30s",
    )


async def reach(served, state: str) -> Reached:  # type: ignore[no-untyped-def]
    job_type = _new_type()
    policy = None
    if state == "QUEUED_BACKOFF":
        policy = job_pb2.RetryPolicy(max_attempts=3, initial_backoff=duration(600), max_backoff=duration(600))
    elif state == "FAILED_RETRYABLE":
        policy = job_pb2.RetryPolicy(max_attempts=1)
    fields = {"retry_policy": policy} if policy is not None else {}
    job = await submit(served, job_type, payload=b"{}", **fields)
    if state == "QUEUED":
        return Reached(job.job_no, job_type, FORGED_TOKEN)
    if state == "CANCELLED":
        cancelled = await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
        assert cancelled.status == Status.CANCELLED
        return Reached(job.job_no, job_type, FORGED_TOKEN)

    (lease,) = await claim(served, job_type, lease=1.0 if state == "RUNNING_EXPIRED" else None)
    n, token = lease.job_no, lease.worker_token
    if state == "RUNNING_EXPIRED":
        await _until_lease_expired(served, n)
    w = served.workers
    ended: job_pb2.Job | None = None
    if state == "RUNNING_DELIVERING":
        await w.ReportStage(worker_pb2.ReportStageRequest(job_no=n, worker_token=token, stage="DELIVERING"))
    elif state == "QUEUED_RELEASED":
        ended = await w.Release(worker_pb2.ReleaseRequest(job_no=n, worker_token=token, checkpoint=b"ck"))
    elif state in ("QUEUED_BACKOFF", "FAILED_RETRYABLE"):
        ended = await w.Fail(_fail(n, token, retryable=True))
    elif state == "FAILED_FINAL":
        ended = await w.Fail(_fail(n, token, retryable=False))
    elif state == "WAITING":
        ended = await w.AwaitReview(worker_pb2.AwaitReviewRequest(job_no=n, worker_token=token, assignee="alice"))
    elif state == "READY":
        ended = await w.Complete(worker_pb2.CompleteRequest(job_no=n, worker_token=token, result=artifact()))
    elif state.startswith("CANCEL"):
        await served.jobs.Cancel(job_pb2.CancelRequest(job_no=n))
        if state == "CANCELLED_CONFIRMED":
            ended = await w.ConfirmCancel(worker_pb2.ConfirmCancelRequest(job_no=n, worker_token=token))
        elif state == "CANCELLED_BY_FAIL":
            ended = await w.Fail(_fail(n, token, retryable=True))
        elif state == "CANCELLED_BY_RELEASE":
            ended = await w.Release(worker_pb2.ReleaseRequest(job_no=n, worker_token=token))
    reached = Reached(n, job_type, token, ended)
    now = await get(served, n)
    assert job_pb2.Job.Status.Name(now.status) == STATUS_OF[state], f"could not reach {state}"
    return reached


async def _until_lease_expired(served, job_no: str) -> None:  # type: ignore[no-untyped-def]
    """Wait (bounded) until Inspect, by the database clock, shows the lease past its expiry."""

    async def expired() -> bool:
        found = await served.admin.Inspect(admin_pb2.InspectRequest(kinds=[admin_pb2.Finding.STALLED]))
        return any(f.job_no == job_no for f in found.findings)

    await eventually(expired, timeout=5, what=f"the lease of {job_no} expires")


# -- doing an operation ------------------------------------------------------------------------


async def do(served, op: str, r: Reached):  # type: ignore[no-untyped-def]
    n, t, w = r.job_no, r.token, served.workers
    if op == "Cancel":
        return await served.jobs.Cancel(job_pb2.CancelRequest(job_no=n))
    if op == "Retry":
        return await served.jobs.Retry(job_pb2.RetryRequest(job_no=n))
    if op == "Claim":
        return await claim(served, r.job_type, worker_id="w-cell")
    if op == "ReportStage":
        current = await get(served, n)
        stage = current.stage or "PREPARING"
        request = worker_pb2.ReportStageRequest(job_no=n, worker_token=t, stage=stage, processed_units=1)
        return await w.ReportStage(request)
    if op == "Heartbeat":
        return await w.Heartbeat(
            worker_pb2.HeartbeatRequest(worker_id="w1", leases=[worker_pb2.LeaseRef(job_no=n, worker_token=t)])
        )
    if op == "Complete":
        return await w.Complete(worker_pb2.CompleteRequest(job_no=n, worker_token=t, result=artifact()))
    if op == "Fail":
        return await w.Fail(_fail(n, t, retryable=True))
    if op == "FailFinal":
        return await w.Fail(_fail(n, t, retryable=False))
    if op == "ConfirmCancel":
        return await w.ConfirmCancel(worker_pb2.ConfirmCancelRequest(job_no=n, worker_token=t))
    if op == "Release":
        return await w.Release(worker_pb2.ReleaseRequest(job_no=n, worker_token=t))
    if op == "Requeue":
        return await served.admin.Requeue(admin_pb2.RequeueRequest(job_no=n, reason="operator test"))
    if op == "AwaitReview":
        return await w.AwaitReview(worker_pb2.AwaitReviewRequest(job_no=n, worker_token=t, assignee="alice"))
    if op in ("Approve", "Reject"):
        decision = job_pb2.Review.APPROVE if op == "Approve" else job_pb2.Review.REJECT
        return await served.jobs.Resolve(job_pb2.ResolveRequest(job_no=n, decision=decision, note="checked"))
    raise AssertionError(op)


async def check_cell(served, state: str, op: str, r: Reached | None = None) -> None:  # type: ignore[no-untyped-def]
    """One cell; `r` is a job already in `state`, else one is made (an allowed move needs its own)."""
    expected = TABLE[state][op]
    r = r or await reach(served, state)
    before = await get(served, r.job_no)
    where = f"{op} on {state}"
    if isinstance(expected, No):
        exc = await rpc_failure(do(served, op, r))
        assert (exc.code(), error_reason(exc)) == (expected.code, expected.reason), f"{where}: {exc.details()}"
        assert await get(served, r.job_no) == before, f"{where} was refused but changed the job"
        return
    reply = await do(served, op, r)
    after = await get(served, r.job_no)
    if isinstance(expected, To):
        assert job_pb2.Job.Status.Name(after.status) == expected.status, where
        assert after.version > before.version, f"{where}: no new version"
        if isinstance(reply, job_pb2.Job):
            assert reply.status == after.status and reply.version == after.version, where
        if op == "Claim":
            assert [lease.job_no for lease in reply] == [r.job_no], where
            assert after.attempt == before.attempt + 1
        if op == "ReportStage":
            assert reply.cancel_requested == (expected.status == "CANCEL_REQUESTED"), where
        return
    assert isinstance(expected, Same)
    assert after == before, f"{where} must change nothing"
    if op == "Claim":
        assert reply == [], f"{where} must lease nothing"
    elif op == "Heartbeat":
        assert [(s.job_no, worker_pb2.LeaseState.State.Name(s.state)) for s in reply.leases] == [
            (r.job_no, expected.lease)
        ], where
    elif expected.replay:
        assert r.ended is not None
        assert reply == r.ended, f"{where}: a replay returns the job as the first call did"
    else:
        assert reply.status == before.status and reply.version == before.version, where


async def test_transition_table_cell_by_cell(serve) -> None:  # type: ignore[no-untyped-def]
    """All cells on one server; every wrong cell is reported. A cell that moves the job gets a
    fresh job of its own type; the cells that must change nothing share one job per status, so
    each of them also proves the ones before it left that job exactly as it was.

    The reaper is off: RUNNING_EXPIRED is a lease past its expiry that no reaper has marked
    yet, and a reaper's round in the middle of the cells would move the shared job (its
    marking, and a heartbeat's revival, are test_leases_reaper.py's)."""
    served = await serve(reaper_interval_seconds=0)
    problems: list[str] = []
    for state in TABLE:
        shared = await reach(served, state)
        for op in OPS:
            try:
                moves = isinstance(TABLE[state][op], To)
                await check_cell(served, state, op, None if moves else shared)
            except (AssertionError, grpc.aio.AioRpcError) as exc:
                problems.append(f"{op} on {state}: {exc}")
    assert not problems, "\n".join(problems)
    await assert_invariants(served)


# -- the fine print, spelled out --------------------------------------------------------------


async def test_replays_return_the_same_job_and_other_calls_with_that_token_are_lost(served) -> None:  # type: ignore[no-untyped-def]
    """Every lease-ending call, repeated with its token, returns the same job (twice over);
    any other call with that token is WORKER_LEASE_LOST and writes nothing the user sees."""
    w = served.workers
    endings = {
        "Complete": lambda n, t: w.Complete(worker_pb2.CompleteRequest(job_no=n, worker_token=t, result=artifact())),
        "Fail": lambda n, t: w.Fail(_fail(n, t, retryable=False)),
        "Release": lambda n, t: w.Release(worker_pb2.ReleaseRequest(job_no=n, worker_token=t)),
        "ConfirmCancel": lambda n, t: w.ConfirmCancel(worker_pb2.ConfirmCancelRequest(job_no=n, worker_token=t)),
    }
    for name, end in endings.items():
        job_type = _new_type()
        await submit(served, job_type)
        (lease,) = await claim(served, job_type)
        n, t = lease.job_no, lease.worker_token
        if name == "ConfirmCancel":
            await served.jobs.Cancel(job_pb2.CancelRequest(job_no=n))
        first = await end(n, t)
        assert await end(n, t) == first, name
        assert await end(n, t) == first, name
        seen = await get(served, n)
        assert seen.version == first.version
        for other, call in endings.items():
            if other != name:
                exc = await rpc_failure(call(n, t))
                assert (exc.code(), error_reason(exc)) == LEASE_LOST, f"{other} after {name}"
        exc = await rpc_failure(
            w.ReportStage(worker_pb2.ReportStageRequest(job_no=n, worker_token=t, stage="PREPARING"))
        )
        assert (exc.code(), error_reason(exc)) == LEASE_LOST
        assert await get(served, n) == seen, f"late calls after {name} changed the job"
    await assert_invariants(served)


async def test_release_replay_after_the_job_was_claimed_again_changes_nothing(served) -> None:  # type: ignore[no-untyped-def]
    await submit(served, "again")
    (first,) = await claim(served, "again")
    released = await served.workers.Release(
        worker_pb2.ReleaseRequest(job_no=first.job_no, worker_token=first.worker_token)
    )
    assert released.status == Status.QUEUED
    (second,) = await claim(served, "again", worker_id="w2")
    assert second.job_no == first.job_no and second.worker_token != first.worker_token
    before = await get(served, first.job_no)
    replay = await served.workers.Release(
        worker_pb2.ReleaseRequest(job_no=first.job_no, worker_token=first.worker_token)
    )
    assert replay.status == Status.RUNNING  # the job as it is now, with its new holder
    assert await get(served, first.job_no) == before
    # the old token cannot touch the new lease; the new token still can
    exc = await rpc_failure(
        served.workers.Complete(
            worker_pb2.CompleteRequest(job_no=first.job_no, worker_token=first.worker_token, result=artifact())
        )
    )
    assert (exc.code(), error_reason(exc)) == LEASE_LOST
    done = await served.workers.Complete(
        worker_pb2.CompleteRequest(job_no=second.job_no, worker_token=second.worker_token, result=artifact())
    )
    assert done.status == Status.READY and done.attempt == 2


async def test_requeue_revokes_the_lease(served) -> None:  # type: ignore[no-untyped-def]
    await submit(served, "stuck")
    (lease,) = await claim(served, "stuck", lease=1.0)
    await _until_lease_expired(served, lease.job_no)
    requeued = await served.admin.Requeue(admin_pb2.RequeueRequest(job_no=lease.job_no, reason="worker host died"))
    assert requeued.status == Status.QUEUED and requeued.stage == "" and requeued.progress.stage_index == 0
    hb = await served.workers.Heartbeat(
        worker_pb2.HeartbeatRequest(
            worker_id="w1", leases=[worker_pb2.LeaseRef(job_no=lease.job_no, worker_token=lease.worker_token)]
        )
    )
    assert hb.leases[0].state == worker_pb2.LeaseState.LOST
    for call in (
        served.workers.Complete(
            worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
        ),
        served.workers.Fail(_fail(lease.job_no, lease.worker_token, retryable=True)),
        served.workers.Release(worker_pb2.ReleaseRequest(job_no=lease.job_no, worker_token=lease.worker_token)),
        served.workers.ReportStage(
            worker_pb2.ReportStageRequest(job_no=lease.job_no, worker_token=lease.worker_token, stage="PREPARING")
        ),
    ):
        exc = await rpc_failure(call)
        assert (exc.code(), error_reason(exc)) == LEASE_LOST
    after = await get(served, lease.job_no)
    assert after.status == Status.QUEUED and after.version == requeued.version
    events = await served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=lease.job_no))
    requeue_events = [e for e in events.events if e.kind == "REQUEUED"]
    assert len(requeue_events) == 1 and requeue_events[0].detail == "requeued by admin anonymous: worker host died"


async def test_terminal_jobs_hold_no_token(served) -> None:  # type: ignore[no-untyped-def]
    for state in (
        "READY",
        "FAILED_FINAL",
        "FAILED_RETRYABLE",
        "CANCELLED",
        "CANCELLED_CONFIRMED",
        "CANCELLED_BY_FAIL",
        "CANCELLED_BY_RELEASE",
    ):
        await reach(served, state)
    await assert_invariants(served)
    import sqlalchemy as sa
    from service_support import db_query

    from jobwire.db.tables import job

    rows = await db_query(served, sa.select(job.c.status, job.c.worker_token, job.c.lease_expires_at))
    assert len(rows) == 7
    assert all(r["worker_token"] is None and r["lease_expires_at"] is None for r in rows), rows


# -- tokens that are not the lease --------------------------------------------------------------


def _worker_calls(w, job_no: str, token: str):  # type: ignore[no-untyped-def]
    return {
        "ReportStage": lambda: w.ReportStage(
            worker_pb2.ReportStageRequest(
                job_no=job_no, worker_token=token, stage="PROCESSING", processed_units=5, checkpoint=b"evil"
            )
        ),
        "Complete": lambda: w.Complete(
            worker_pb2.CompleteRequest(job_no=job_no, worker_token=token, result=artifact())
        ),
        "Fail": lambda: w.Fail(_fail(job_no, token, retryable=False)),
        "ConfirmCancel": lambda: w.ConfirmCancel(worker_pb2.ConfirmCancelRequest(job_no=job_no, worker_token=token)),
        "Release": lambda: w.Release(worker_pb2.ReleaseRequest(job_no=job_no, worker_token=token, checkpoint=b"evil")),
    }


async def _all_lost(served, job_no: str, token: str, replays: str = "") -> None:  # type: ignore[no-untyped-def]
    for name, call in _worker_calls(served.workers, job_no, token).items():
        if name == replays:
            before = await get(served, job_no)
            await call()  # the call that ended this token's lease replays: the job as it is now
            assert await get(served, job_no) == before
            continue
        exc = await rpc_failure(call())
        assert (exc.code(), error_reason(exc)) == LEASE_LOST, f"{name} with {token!r} on {job_no}: {exc.details()}"
    hb = await served.workers.Heartbeat(
        worker_pb2.HeartbeatRequest(worker_id="w1", leases=[worker_pb2.LeaseRef(job_no=job_no, worker_token=token)])
    )
    assert [(s.job_no, s.state) for s in hb.leases] == [(job_no, worker_pb2.LeaseState.LOST)], token


async def test_forged_malformed_and_foreign_tokens_are_lease_lost_and_change_nothing(served) -> None:  # type: ignore[no-untyped-def]
    from service_support import db_rows

    await submit(served, "victim")
    await submit(served, "victim")
    (old,) = await claim(served, "victim")
    await served.workers.Release(worker_pb2.ReleaseRequest(job_no=old.job_no, worker_token=old.worker_token))
    (mine, other) = await claim(served, "victim", max_jobs=2)  # mine is the same job, leased again (epoch 2)
    assert mine.job_no == old.job_no and other.job_no != mine.job_no
    epoch, _, secret = mine.worker_token.partition(".")
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    tokens = [
        FORGED_TOKEN,
        "",
        "garbage",
        "1.",
        ".abc",
        "0.abc",
        "-2.abc",
        f"{epoch}.",
        f"{epoch}.{flipped}",
        f"{int(epoch) + 1}.{secret}",
        f"{int(epoch) - 1}.{secret}",
        f"0{epoch}.{secret}",
        f"{epoch}.{secret}x",
        f" {mine.worker_token}",
        "9" * 18 + "." + secret,
        "9" * 30 + "." + secret,
        "²." + secret,
        "١." + secret,
        other.worker_token,  # another job's live lease
    ]
    before = {n: await get(served, n) for n in (mine.job_no, other.job_no)}
    visible_rows = await db_rows(served)
    for token in tokens:
        await _all_lost(served, mine.job_no, token)
    await _all_lost(served, mine.job_no, old.worker_token, replays="Release")  # this job's previous lease
    for n, job in before.items():
        assert await get(served, n) == job, "a refused call changed a job"
    after_rows = await db_rows(served)
    # nothing written but evidence: late calls of once-real epochs may add invisible events
    assert {k: v for k, v in after_rows.items() if k != "job_event"} == {
        k: v for k, v in visible_rows.items() if k != "job_event"
    }
    events = await served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=mine.job_no, page_size=500))
    extra = [e for e in events.events if e.version == before[mine.job_no].version and e.kind != "CLAIMED"]
    assert {e.kind for e in extra} <= {"LATE_CALL_REJECTED"}

    # the real holders were not disturbed
    for lease in (mine, other):
        done = await served.workers.Complete(
            worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
        )
        assert done.status == Status.READY
    await assert_invariants(served)


async def test_a_worker_call_on_an_unknown_job_is_lease_lost_not_not_found(served) -> None:  # type: ignore[no-untyped-def]
    from service_support import db_rows

    job = await submit(served, "real")
    (lease,) = await claim(served, "real")
    rows = await db_rows(served)
    day = job.job_no.split("-")[1]
    for unknown in (f"PT-{day}-999", "PT-20000101-001", "ZZ-20990101-123456"):
        for token in (lease.worker_token, FORGED_TOKEN, ""):
            await _all_lost(served, unknown, token)
    assert await db_rows(served) == rows
    # and the same job number on the job side is NOT_FOUND, as for any unknown job
    exc = await rpc_failure(served.jobs.Get(job_pb2.GetRequest(job_no=f"PT-{day}-999")))
    assert (exc.code(), error_reason(exc)) == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")


async def test_one_heartbeat_covers_all_of_a_workers_leases(served) -> None:  # type: ignore[no-untyped-def]
    """OK, CANCEL_REQUESTED and LOST each in one call, in the order asked, renewing without a new
    version; a renewal moves lease_expires_at forward from the database clock."""
    for _ in range(3):
        await submit(served, "many")
    a, b, c = await claim(served, "many", max_jobs=3, lease=5)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=b.job_no))
    await served.workers.Complete(
        worker_pb2.CompleteRequest(job_no=c.job_no, worker_token=c.worker_token, result=artifact())
    )
    before = [await get(served, lease.job_no) for lease in (a, b, c)]
    refs = [worker_pb2.LeaseRef(job_no=lease.job_no, worker_token=lease.worker_token) for lease in (c, a, b)]
    hb = await served.workers.Heartbeat(worker_pb2.HeartbeatRequest(worker_id="w1", leases=refs))
    states = [(s.job_no, worker_pb2.LeaseState.State.Name(s.state)) for s in hb.leases]
    assert states == [(c.job_no, "LOST"), (a.job_no, "OK"), (b.job_no, "CANCEL_REQUESTED")]
    assert not hb.leases[0].HasField("lease_expires_at")
    assert hb.leases[1].lease_expires_at.ToNanoseconds() >= a.lease_expires_at.ToNanoseconds()
    assert [await get(served, lease.job_no) for lease in (a, b, c)] == before
    empty = await served.workers.Heartbeat(worker_pb2.HeartbeatRequest(worker_id="w1"))
    assert list(empty.leases) == []
