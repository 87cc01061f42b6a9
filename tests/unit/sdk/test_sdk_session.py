"""SessionStub against a fake Session stream: answers matched by call_id, errors as the unary
call's, a broken stream's calls UNAVAILABLE and the next on a new stream, the grace, a server
without Session, pushes, and a move to a fresh stream when the connection changes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import grpc
import pytest
from sdk_support import FakeSessions, FakeWorkerService, lease_lost, make_lease, rpc_error, status_of, unavailable
from served import eventually

from jobwire.client import error_reason
from jobwire.client.status import error_info
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk import _frames as frames
from jobwire.worker.sdk._rpc import CHANNEL_OPTIONS, describe, is_lease_lost, is_transient, refusal, retry_level
from jobwire.worker.sdk._session import SessionStub

BEAT = worker_pb2.HeartbeatRequest(worker_id="w-test")
UNAUTHENTICATED = rpc_error(grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", "unknown token")


@dataclass
class Sink:
    """What a SessionStub tells the worker, in order."""

    heard: list[tuple[str, object]] = field(default_factory=list)

    def leased(self, reply: worker_pb2.ClaimResponse) -> None:
        self.heard.append(("leased", [lease.job_no for lease in reply.leases]))

    def cancel_requested(self, state: worker_pb2.LeaseState) -> None:
        self.heard.append(("cancel_requested", state.job_no))

    def lease_lost(self, state: worker_pb2.LeaseState) -> None:
        self.heard.append(("lease_lost", state.job_no))

    def opened(self) -> None:
        self.heard.append(("opened", None))

    def gone(self) -> None:
        self.heard.append(("gone", None))

    def of(self, kind: str) -> list[object]:
        return [what for heard, what in self.heard if heard == kind]


@asynccontextmanager
async def session(sessions: FakeSessions, *, grace: float = 30.0) -> AsyncIterator[tuple[SessionStub, Sink]]:
    stub, sink = SessionStub(sessions, grace=grace), Sink()
    upkeep = asyncio.create_task(stub.run(sink))
    try:
        yield stub, sink
    finally:
        upkeep.cancel()
        await asyncio.gather(upkeep, return_exceptions=True)


def manual(fake: FakeWorkerService, **options: object) -> FakeSessions:
    """Sessions the test answers itself."""
    return FakeSessions(fake, serving=False, **options)  # type: ignore[arg-type]


async def test_answers_are_matched_to_their_calls_by_call_id_in_any_order(fake: FakeWorkerService) -> None:
    sessions = manual(fake)
    async with session(sessions) as (stub, _):
        stream = await sessions.stream(0)
        claim = asyncio.ensure_future(stub.Claim(worker_pb2.ClaimRequest(worker_id="w-test"), timeout=5))
        claim_frame = await stream.next_frame()
        beat = asyncio.ensure_future(stub.Heartbeat(BEAT, timeout=5))
        beat_frame = await stream.next_frame()
        assert 0 not in (claim_frame.call_id, beat_frame.call_id)  # 0 is the server's, for pushes
        assert claim_frame.call_id != beat_frame.call_id
        assert (claim_frame.WhichOneof("call"), beat_frame.WhichOneof("call")) == ("claim", "heartbeat")
        stream.answer(beat_frame.call_id, heartbeat=worker_pb2.HeartbeatResponse())  # the later call first
        lease = make_lease("PT-1")
        stream.answer(claim_frame.call_id, claim=worker_pb2.ClaimResponse(leases=[lease]))
        assert await beat == worker_pb2.HeartbeatResponse()
        assert list((await claim).leases) == [lease]


@pytest.mark.parametrize(
    "unary",
    [
        lease_lost(timed_out=True),
        unavailable(),
        UNAUTHENTICATED,
        rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "job_no: required"),
    ],
    ids=["lease-lost", "unavailable", "unauthenticated", "invalid"],
)
async def test_a_refused_frame_raises_what_the_unary_call_raises(
    fake: FakeWorkerService, unary: grpc.aio.AioRpcError
) -> None:
    sessions = manual(fake)
    async with session(sessions) as (stub, _):
        stream = await sessions.stream(0)
        call = asyncio.ensure_future(stub.Complete(worker_pb2.CompleteRequest(job_no="PT-1"), timeout=5))
        stream.answer((await stream.next_frame()).call_id, error=status_of(unary))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call
    framed = raised.value
    said = [(e.code(), e.details(), error_reason(e)) for e in (framed, unary)]
    assert said[0] == said[1]
    assert error_info(framed) == error_info(unary)
    assert describe(framed) == describe(unary)
    assert (is_transient(framed), is_lease_lost(framed)) == (is_transient(unary), is_lease_lost(unary))
    refused = {str(refusal(e, has_token=True, queues=("default",))) for e in (framed, unary)}
    assert len(refused) == 1  # the same WorkerRefused message, or None for both


async def test_a_call_past_its_timeout_fails_deadline_exceeded_and_its_late_answer_is_dropped(
    fake: FakeWorkerService,
) -> None:
    sessions = manual(fake)
    async with session(sessions) as (stub, _):
        stream = await sessions.stream(0)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Heartbeat(BEAT, timeout=0.05)
        assert raised.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED and is_transient(raised.value)
        late = await stream.next_frame()
        stream.answer(late.call_id, heartbeat=worker_pb2.HeartbeatResponse())
        beat = asyncio.ensure_future(stub.Heartbeat(BEAT, timeout=5))  # the stream goes on
        stream.answer((await stream.next_frame()).call_id, heartbeat=worker_pb2.HeartbeatResponse())
        assert await beat == worker_pb2.HeartbeatResponse()


async def test_a_broken_stream_fails_its_calls_unavailable_and_the_next_call_goes_on_a_new_one(
    fake: FakeWorkerService,
) -> None:
    sessions = manual(fake)
    async with session(sessions) as (stub, sink):
        first = await sessions.stream(0)
        call = asyncio.ensure_future(stub.Heartbeat(BEAT, timeout=5))
        await first.next_frame()
        first.end(rpc_error(grpc.StatusCode.UNAVAILABLE, None, "Socket closed"))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call
        assert raised.value.code() is grpc.StatusCode.UNAVAILABLE and is_transient(raised.value)
        assert "Socket closed" in raised.value.details()
        # the session warned of the break itself: the caller, told so, need not say it again
        assert isinstance(raised.value, frames.SessionDown) and retry_level(raised.value) == logging.DEBUG
        second = await sessions.stream(1)
        again = asyncio.ensure_future(stub.Heartbeat(BEAT, timeout=5))
        second.answer((await second.next_frame()).call_id, heartbeat=worker_pb2.HeartbeatResponse())
        assert await again == worker_pb2.HeartbeatResponse()
        assert first.frames.empty()
        assert sink.of("opened") == [None, None] and sink.of("gone") == []


async def test_a_stream_refused_as_it_opens_fails_its_calls_with_the_refusal(fake: FakeWorkerService) -> None:
    sessions = manual(fake)
    async with session(sessions) as (stub, _):
        stream = await sessions.stream(0)
        call = asyncio.ensure_future(stub.Claim(worker_pb2.ClaimRequest(worker_id="w-test"), timeout=5))
        await stream.next_frame()
        stream.end(UNAUTHENTICATED)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call
    refused = refusal(raised.value, has_token=True, queues=("default",))
    assert refused is not None and "does not know this worker's token" in str(refused)


async def test_calls_while_no_stream_can_open_fail_as_the_last_attempt_did(fake: FakeWorkerService) -> None:
    sessions = manual(fake, refusals=[unavailable()] * 3)
    async with session(sessions) as (stub, _):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Heartbeat(BEAT, timeout=5)
        assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
        assert isinstance(raised.value, frames.SessionDown)  # each call's copy of the outage keeps its kind
        stream = await sessions.stream(3)  # open at last
        beat = asyncio.ensure_future(stub.Heartbeat(BEAT, timeout=5))
        stream.answer((await stream.next_frame()).call_id, heartbeat=worker_pb2.HeartbeatResponse())
        assert await beat == worker_pb2.HeartbeatResponse()


async def test_a_session_not_open_again_within_the_grace_reports_every_lease_gone(
    fake: FakeWorkerService, caplog: pytest.LogCaptureFixture
) -> None:
    sessions = manual(fake, refusals=[])
    async with session(sessions, grace=0.2) as (_, sink):
        stream = await sessions.stream(0)
        sessions.refusals += [unavailable()] * 1000  # the server stays away
        stream.end(rpc_error(grpc.StatusCode.UNAVAILABLE, None, "keepalive watchdog timeout"))

        async def gone() -> bool:
            return bool(sink.of("gone"))

        await eventually(gone, what="the grace ran out")
    assert sink.of("gone") == [None]
    assert "no worker session for 0.2s" in caplog.text


async def test_a_server_without_session_gets_every_call_unary(
    fake: FakeWorkerService, caplog: pytest.LogCaptureFixture
) -> None:
    sessions = FakeSessions(fake, has_session=False)
    fake.pending.append(make_lease("PT-1"))
    async with session(sessions) as (stub, _):
        reply = await stub.Claim(worker_pb2.ClaimRequest(worker_id="w-test", max_jobs=1), timeout=5)
        assert [lease.job_no for lease in reply.leases] == ["PT-1"]
        await stub.Heartbeat(BEAT, timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.stand(worker_pb2.ClaimRequest(worker_id="w-test"), timeout=5)
        assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED
        assert stub.unary_only
    assert len(sessions.opened) == 1 and [c.method for c in fake.calls] == ["Claim", "Heartbeat"]
    assert caplog.text.count("worker transport: unary calls (the server has no Session)") == 1


async def test_the_first_answer_logs_the_session_transport_once(
    fake: FakeWorkerService, caplog: pytest.LogCaptureFixture
) -> None:
    async with session(FakeSessions(fake)) as (stub, _):
        for _ in range(3):
            await stub.Heartbeat(BEAT, timeout=5)
    assert caplog.text.count("worker transport: session") == 1
    assert [c.method for c in fake.calls] == ["Heartbeat"] * 3


async def test_pushes_reach_the_sink_in_order(fake: FakeWorkerService) -> None:
    sessions = manual(fake)
    async with session(sessions) as (_, sink):
        stream = await sessions.stream(0)
        stream.push(leased=worker_pb2.ClaimResponse(leases=[make_lease("PT-1"), make_lease("PT-2")]))
        stream.push(cancel_requested=worker_pb2.LeaseState(job_no="PT-1", state=worker_pb2.LeaseState.CANCEL_REQUESTED))
        stream.push(lease_lost=worker_pb2.LeaseState(job_no="PT-2", state=worker_pb2.LeaseState.LOST))

        async def all_heard() -> bool:
            return len(sink.heard) == 4

        await eventually(all_heard, what="three pushes")
    assert sink.heard[1:] == [("leased", ["PT-1", "PT-2"]), ("cancel_requested", "PT-1"), ("lease_lost", "PT-2")]


async def test_a_connection_change_moves_new_calls_to_a_fresh_stream_and_lets_the_old_finish(
    fake: FakeWorkerService,
) -> None:
    sessions = manual(fake)
    async with session(sessions) as (stub, sink):
        old = await sessions.stream(0)
        waiting = asyncio.ensure_future(stub.Claim(worker_pb2.ClaimRequest(worker_id="w-test"), timeout=5))
        claim_frame = await old.next_frame()
        stub.rotate()
        fresh = await sessions.stream(1)

        async def moved() -> bool:
            return len(sink.of("opened")) == 2

        await eventually(moved, what="the fresh stream in use")
        beat = asyncio.ensure_future(stub.Heartbeat(BEAT, timeout=5))
        fresh.answer((await fresh.next_frame()).call_id, heartbeat=worker_pb2.HeartbeatResponse())
        assert await beat == worker_pb2.HeartbeatResponse()
        assert old.half_closed and not old.cancelled
        old.answer(claim_frame.call_id, claim=worker_pb2.ClaimResponse(leases=[make_lease("PT-1")]))
        old.end()  # answered all, as a half-closed session ends
        assert [lease.job_no for lease in (await waiting).leases] == ["PT-1"]


async def test_close_reads_the_half_closed_stream_to_its_end_and_later_calls_go_unary(
    fake: FakeWorkerService,
) -> None:
    """A worker stopping half-closes: a lease the server pushes before the end still reaches
    it (to be handed back, unary), and no stream opens again."""
    sessions = manual(fake)
    async with session(sessions) as (stub, sink):
        stream = await sessions.stream(0)
        closing = asyncio.ensure_future(stub.close(5))

        async def half_closed() -> bool:
            return stream.half_closed

        await eventually(half_closed, what="the stream half-closed")
        stream.push(leased=worker_pb2.ClaimResponse(leases=[make_lease("PT-9")]))
        stream.end()
        await asyncio.wait_for(closing, 5)
        assert sink.of("leased") == [["PT-9"]]
        await stub.Heartbeat(BEAT, timeout=5)
        assert [c.method for c in fake.calls] == ["Heartbeat"] and len(sessions.opened) == 1
        assert not stream.cancelled


async def test_upload_result_stays_a_unary_call(fake: FakeWorkerService) -> None:
    uploaded: list[object] = []

    async def upload(chunks: AsyncIterator[job_pb2.ResultChunk], *, timeout: float | None = None) -> object:
        uploaded.extend([chunk async for chunk in chunks])
        return worker_pb2.UploadResultResponse(upload_id="u1")

    sessions = manual(fake)
    sessions.UploadResult = upload  # type: ignore[method-assign]

    async def chunks() -> AsyncIterator[job_pb2.ResultChunk]:
        yield job_pb2.ResultChunk(job_no="PT-1", data=b"x")

    async with session(sessions) as (stub, _):
        assert (await stub.UploadResult(chunks())).upload_id == "u1"
        assert (await sessions.stream(0)).frames.empty()
    assert len(uploaded) == 1


def test_the_workers_channel_notices_a_dead_server_in_seconds_and_the_server_lets_it() -> None:
    from jobwire.rpc.server import SERVER_OPTIONS

    worker, server = dict(CHANNEL_OPTIONS), dict(SERVER_OPTIONS)
    # grpc-core waits for a ping's answer ping_timeout_ms (60 s unless set), not keepalive_timeout_ms.
    noticed_within = worker["grpc.keepalive_time_ms"] + max(
        worker["grpc.keepalive_timeout_ms"], worker.get("grpc.http2.ping_timeout_ms", 60_000)
    )
    # A worker cut off in silence notices before its server's pings may close the connection
    # (its ping_timeout after the last word) and take the session for dead, graces alike.
    assert noticed_within < server["grpc.http2.ping_timeout_ms"]
    assert worker["grpc.keepalive_time_ms"] >= server["grpc.http2.min_ping_interval_without_data_ms"]
    assert worker["grpc.keepalive_permit_without_calls"] == 1
    assert worker["grpc.http2.max_pings_without_data"] == 0  # an idle worker is probed too


def test_a_channels_extra_options_replace_the_defaults_of_their_names() -> None:
    from jobwire.client.channel import _options

    options = _options(CHANNEL_OPTIONS)
    names = [name for name, _ in options]
    assert len(names) == len(set(names))
    assert dict(options)["grpc.keepalive_time_ms"] == 4_000


@pytest.fixture(autouse=True)
def _session_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.worker")
