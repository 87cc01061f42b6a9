"""The Worker over a fake Session: a standing claim and its pushed leases, long-poll frames when
the server takes no standing claim, pushed cancels and lost leases, the grace running out, and
unary calls against a server without Session."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import replace

import grpc
import pytest
from sdk_support import FakeSessions, FakeWorkerService, make_lease, rpc_error, unavailable, worker_running
from served import eventually

from jobwire.v1 import worker_pb2
from jobwire.worker.sdk import Handlers, JobContext, Result, Worker, WorkerConfig
from jobwire.worker.sdk._session import SessionStub

handlers = Handlers()


@handlers.job("quick")
def quick(ctx: JobContext) -> Result:
    return Result.from_json({"ok": True})


@handlers.job("endless")
def endless(ctx: JobContext) -> Result:
    """Works until it is stopped; each unit a safe point."""
    i = 0
    while True:
        i += 1
        ctx.progress(i)
        ctx.sleep(0.01)


def running(
    config: WorkerConfig, sessions: FakeSessions, *, grace: float = 30.0
) -> AbstractAsyncContextManager[tuple[Worker, asyncio.Task[int]]]:
    return worker_running(Worker(config, handlers, stub=SessionStub(sessions, grace=grace)))


def endings(fake: FakeWorkerService) -> list[str]:
    return [c.method for c in fake.calls if c.method in ("Complete", "Fail", "ConfirmCancel", "Release")]


def until(probe: Callable[[], object]) -> Callable[[], Awaitable[object]]:
    async def check() -> object:
        return probe()

    return check


async def test_a_standing_claim_takes_pushed_leases_and_is_renewed_as_slots_free(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    sessions = FakeSessions(fake)
    async with running(config, sessions):
        stream = await sessions.stream(0)
        await eventually(until(lambda: sessions.standing_claims), what="a standing claim")
        first = sessions.standing_claims[0]
        assert first.max_jobs == config.concurrency and not first.HasField("wait")
        assert [spec.name for spec in first.job_types] == ["quick", "endless"]
        stream.push(leased=worker_pb2.ClaimResponse(leases=[make_lease("PT-1", "quick")]))
        await fake.wait_for("Complete")
        # The slot PT-1 held is free again: the claim asks for it, on top of the one still owed.
        await eventually(until(lambda: len(sessions.standing_claims) >= 2), what="the claim renewed")
        assert sessions.standing_claims[-1].max_jobs == 1
    assert fake.of("Claim") == []  # no long poll while the standing claim stands
    assert fake.ended == {"PT-1": "Complete"}


async def test_a_lease_pushed_beyond_the_free_slots_is_handed_back_not_run(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    """Should a server push more leases than the worker has slots for, the one too many goes
    back at once, uncharged: the worker never runs more than its concurrency."""
    sessions = FakeSessions(fake)
    leases = [make_lease(f"PT-{i}", "endless", heartbeat_s=60) for i in range(config.concurrency + 1)]
    async with running(config, sessions):
        stream = await sessions.stream(0)
        await eventually(until(lambda: sessions.standing_claims), what="a standing claim")
        stream.push(leased=worker_pb2.ClaimResponse(leases=leases))
        await fake.wait_for("Release")
        [released] = fake.of("Release")
        assert released.job_no == leases[-1].job_no and "no free slot" in released.note
        reported = lambda: {report.job_no for report in fake.of("ReportStage")}  # noqa: E731
        await eventually(until(lambda: reported() >= {x.job_no for x in leases[:-1]}), what="each job with a slot")
        assert leases[-1].job_no not in reported()


async def test_a_new_stream_gets_the_standing_claim_again(config: WorkerConfig, fake: FakeWorkerService) -> None:
    sessions = FakeSessions(fake)
    async with running(config, sessions):
        stream = await sessions.stream(0)
        await eventually(until(lambda: sessions.standing_claims), what="a standing claim")
        stream.end(unavailable())
        await sessions.stream(1)
        await eventually(until(lambda: len(sessions.standing_claims) == 2), what="the claim sent on the new stream")


async def test_a_server_that_takes_no_standing_claim_is_long_polled_over_the_session(
    config: WorkerConfig, fake: FakeWorkerService, caplog: pytest.LogCaptureFixture
) -> None:
    sessions = FakeSessions(fake, standing=False)
    fake.pending.append(make_lease("PT-1", "quick"))
    async with running(config, sessions):
        await fake.wait_for("Complete")
    assert fake.ended == {"PT-1": "Complete"} and fake.of("Claim")
    assert len(sessions.opened) == 1  # every call on the one stream
    assert caplog.text.count("the server takes no standing claim") == 1
    assert "worker transport: session" in caplog.text


async def test_a_pushed_cancel_stops_the_handler_at_its_next_check(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    sessions = FakeSessions(fake)
    # Heartbeats far apart: only the push can tell the worker in time.
    lease = make_lease("PT-1", "endless", heartbeat_s=60)
    async with running(config, sessions):
        stream = await sessions.stream(0)
        await eventually(until(lambda: sessions.standing_claims), what="a standing claim")
        stream.push(leased=worker_pb2.ClaimResponse(leases=[lease]))
        await fake.wait_for("ReportStage")
        stream.push(cancel_requested=worker_pb2.LeaseState(job_no="PT-1", state=worker_pb2.LeaseState.CANCEL_REQUESTED))
        await fake.wait_for("ConfirmCancel")
    assert fake.of("Heartbeat") == [] and fake.ended == {"PT-1": "ConfirmCancel"}


@pytest.mark.parametrize("state", ["LOST", "TIMED_OUT"])
async def test_a_pushed_lost_lease_stops_the_handler_and_tells_nobody(
    config: WorkerConfig, fake: FakeWorkerService, caplog: pytest.LogCaptureFixture, state: str
) -> None:
    sessions = FakeSessions(fake)
    async with running(config, sessions) as (worker, _):
        stream = await sessions.stream(0)
        await eventually(until(lambda: sessions.standing_claims), what="a standing claim")
        stream.push(leased=worker_pb2.ClaimResponse(leases=[make_lease("PT-1", "endless", heartbeat_s=60)]))
        await fake.wait_for("ReportStage")
        stream.push(lease_lost=worker_pb2.LeaseState(job_no="PT-1", state=worker_pb2.LeaseState.State.Value(state)))
        await eventually(until(lambda: worker.running == 0), what="the job stopped")
    assert endings(fake) == [] and fake.of("Heartbeat") == []
    said = "timed out" if state == "TIMED_OUT" else "lease lost"
    assert f"PT-1 attempt 1: {said}" in caplog.text


async def test_past_the_grace_without_a_session_every_lease_is_lost(
    config: WorkerConfig, fake: FakeWorkerService, caplog: pytest.LogCaptureFixture
) -> None:
    sessions = FakeSessions(fake)
    async with running(config, sessions, grace=0.2) as (worker, _):
        stream = await sessions.stream(0)
        await eventually(until(lambda: sessions.standing_claims), what="a standing claim")
        leases = [make_lease(f"PT-{i}", "endless", heartbeat_s=60) for i in (1, 2)]
        stream.push(leased=worker_pb2.ClaimResponse(leases=leases))
        await fake.wait_for("ReportStage", 2)
        sessions.refusals += [unavailable()] * 1000  # the server is gone for good
        stream.end(rpc_error(grpc.StatusCode.UNAVAILABLE, None, "keepalive watchdog timeout"))
        await eventually(until(lambda: worker.running == 0), what="both jobs stopped")
    assert endings(fake) == []
    assert "PT-1 attempt 1: lease lost" in caplog.text and "PT-2 attempt 1: lease lost" in caplog.text


async def test_a_new_stream_names_every_lease_held_at_once(config: WorkerConfig, fake: FakeWorkerService) -> None:
    """The server takes the broken stream's leases for a dead worker's unless they are named
    again within its grace: a heartbeat on the new stream, not when the next falls due."""
    sessions = FakeSessions(fake)
    async with running(config, sessions):
        stream = await sessions.stream(0)
        await eventually(until(lambda: sessions.standing_claims), what="a standing claim")
        stream.push(leased=worker_pb2.ClaimResponse(leases=[make_lease("PT-1", "endless", heartbeat_s=60)]))
        await fake.wait_for("ReportStage")
        assert fake.of("Heartbeat") == []
        stream.end(unavailable())
        await sessions.stream(1)
        (beat,) = await fake.wait_for("Heartbeat", timeout=2.0)
    assert [ref.job_no for ref in beat.leases] == ["PT-1"]


async def test_against_a_server_without_session_the_worker_runs_on_unary_calls(
    config: WorkerConfig, fake: FakeWorkerService, caplog: pytest.LogCaptureFixture
) -> None:
    sessions = FakeSessions(fake, has_session=False)
    fake.pending += [make_lease("PT-1", "quick"), make_lease("PT-2", "quick")]
    async with running(config, sessions):
        await fake.wait_for("Complete", 2)
    assert fake.ended == {"PT-1": "Complete", "PT-2": "Complete"}
    assert len(sessions.opened) == 1 and sessions.standing_claims == []
    assert caplog.text.count("worker transport: unary calls (the server has no Session)") == 1


async def test_a_token_refused_on_the_session_stops_the_worker_as_on_a_claim(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    from jobwire.worker.sdk import WorkerRefused

    sessions = FakeSessions(fake, serving=False)
    worker = Worker(replace(config, token="wrong"), handlers, stub=SessionStub(sessions, grace=30))
    task = asyncio.create_task(worker.run())
    stream = await sessions.stream(0)
    await stream.next_frame()  # the standing claim
    stream.end(rpc_error(grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", "unknown token"))
    with pytest.raises(WorkerRefused, match="does not know this worker's token"):
        await asyncio.wait_for(task, 5)


async def test_a_claim_refused_after_a_refused_standing_claim_still_stops_the_worker(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    """The refused standing claim let no claim in: the first Claim's refusal is the first claim's."""
    from jobwire.worker.sdk import WorkerRefused

    sessions = FakeSessions(fake, standing=False)
    denied = rpc_error(grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", "this token may not use queue 'video'")
    fake.fail_next("Claim", denied)
    worker = Worker(config, handlers, stub=SessionStub(sessions, grace=30))
    with pytest.raises(WorkerRefused, match="may not use queue 'video'"):
        await asyncio.wait_for(worker.run(), 5)
