"""SessionStub: a worker's calls as frames over one WorkerService.Session stream.

It is a WorkerStub: each call becomes a frame with a fresh call_id and returns the reply of
the frame with that call_id, or raises what the unary call would (jobwire.worker.sdk._frames),
so the runner, lease keeper, reporter and finisher do not know which they use. A call's
timeout bounds its wait for a stream and for its answer (DEADLINE_EXCEEDED, here).
UploadResult, a client stream of its own, stays a unary call on the same channel.

The stream: opened when the worker starts; when it breaks, the calls waiting on it fail
UNAVAILABLE (transient: their callers retry, as for a unary call cut off) and a new one is
opened at once, then with backoff, while calls made in between fail as the last attempt did.
A server that answers the first frames of a stream UNIMPLEMENTED has no Session: those
calls and every later one are made unary, for the worker's life. When the channel's
connection changes (a server's GOAWAY at its connection age), a fresh stream is opened and
the old one half-closed, so the calls on it finish there rather than being cut.

The death rule: a stream that broke and is not open again within the grace
(JOBWIRE_SESSION_GRACE_SECONDS) means the server may have given this worker's leases to
others; the sink hears `gone` and every lease is taken as lost.

Pushes (call_id 0: leases of a standing claim, a cancel, a lost lease) go to the sink.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Protocol

import grpc
import grpc.aio
from google.protobuf.message import Message

from jobwire.client import Backoff, Pauses
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk import _frames as frames
from jobwire.worker.sdk._frames import Call
from jobwire.worker.sdk._rpc import REFUSED, WorkerStub, describe
from jobwire.worker.sdk._session_stream import NoSession, PushSink, SessionCall, SessionStream

# A worker holding leases says something on its session at least this often (a heartbeat
# when it has nothing else to say): a session that ends soon after its worker last spoke is
# taken for a dead worker's at once, and one silent as long as the servers' keepalive lets a
# connection be (jobwire.rpc.server.KEEPALIVE_SILENCE_S, 9 s) may be a stopped worker's.
SESSION_BEAT_S = 4.0
# A stopping worker reads its half-closed stream to the end for at most this long: the server
# answers the calls in flight and the standing claim's last transaction, then ends it.
SESSION_CLOSE_S = 5.0

log = logging.getLogger("jobwire.worker")


class ChannelStub(WorkerStub, Protocol):
    """A WorkerService stub that can open a Session (WorkerServiceStub; a test's fake)."""

    def Session(self) -> SessionCall: ...


class SessionStub:
    """WorkerStub over one Session stream at a time; unary calls when the server has none.

    Args:
        unary: The channel's WorkerService stub: it opens the streams, and makes the calls
            when the server has no Session, and UploadResult.
        grace: Seconds a broken session may take to open again before every lease is
            taken as lost (JOBWIRE_SESSION_GRACE_SECONDS).
    """

    def __init__(self, unary: ChannelStub, *, grace: float) -> None:
        self._unary = unary
        self._grace = grace
        self._ids = itertools.count(1)  # 0 is the server's own, for pushes
        self._stream: SessionStream | None = None
        self._outage: grpc.aio.AioRpcError | None = None  # why calls fail while no stream is open
        self._settled = asyncio.Event()  # set while there is a stream, an outage, or no session at all
        self._unary_only = False
        self._rotate = asyncio.Event()
        self._generation = 0
        self._answered = False
        self._grace_timer: asyncio.TimerHandle | None = None
        self._sink: PushSink | None = None
        self._retired: set[asyncio.Task[None]] = set()  # streams moved away from, finishing their calls
        self._closing = False  # the worker stops: calls go unary, no stream opens again
        self._ended = asyncio.Event()  # the upkeep (`run`) is over

    @property
    def generation(self) -> int:
        """Streams opened so far: what lives on a stream (a standing claim) lives while this stays."""
        return self._generation

    @property
    def unary_only(self) -> bool:
        """True once the server turned out to have no Session."""
        return self._unary_only

    # -- WorkerStub ----------------------------------------------------------------------

    def Claim(self, request: worker_pb2.ClaimRequest, *, timeout: float | None = None) -> Awaitable[Any]:
        return self._call(frames.CLAIM, request, timeout)

    def Heartbeat(self, request: worker_pb2.HeartbeatRequest, *, timeout: float | None = None) -> Awaitable[Any]:
        return self._call(frames.HEARTBEAT, request, timeout)

    def BatchReportStage(
        self, request: worker_pb2.BatchReportStageRequest, *, timeout: float | None = None
    ) -> Awaitable[Any]:
        return self._call(frames.BATCH_REPORT_STAGE, request, timeout)

    def Complete(self, request: worker_pb2.CompleteRequest, *, timeout: float | None = None) -> Awaitable[Any]:
        return self._call(frames.COMPLETE, request, timeout)

    def Fail(self, request: worker_pb2.FailRequest, *, timeout: float | None = None) -> Awaitable[Any]:
        return self._call(frames.FAIL, request, timeout)

    def ConfirmCancel(
        self, request: worker_pb2.ConfirmCancelRequest, *, timeout: float | None = None
    ) -> Awaitable[Any]:
        return self._call(frames.CONFIRM_CANCEL, request, timeout)

    def Release(self, request: worker_pb2.ReleaseRequest, *, timeout: float | None = None) -> Awaitable[Any]:
        return self._call(frames.RELEASE, request, timeout)

    def AwaitReview(self, request: worker_pb2.AwaitReviewRequest, *, timeout: float | None = None) -> Awaitable[Any]:
        return self._call(frames.AWAIT_REVIEW, request, timeout)

    def RecordEvidence(
        self, request: worker_pb2.RecordEvidenceRequest, *, timeout: float | None = None
    ) -> Awaitable[Any]:
        return self._call(frames.RECORD_EVIDENCE, request, timeout)

    def UploadResult(
        self, request_iterator: AsyncIterator[job_pb2.ResultChunk], *, timeout: float | None = None
    ) -> Awaitable[worker_pb2.UploadResultResponse]:
        return self._unary.UploadResult(request_iterator, timeout=timeout)

    async def close(self, timeout: float) -> None:
        """The worker stops: half-close the stream and read it to its end (up to `timeout`).

        A lease the server pushed in the session's last moments (its standing claim's last
        transaction) then reaches the worker, which hands it back, rather than staying with a
        session that is gone until the grace. Calls from here on (those hand-backs) are unary.
        """
        self._closing = True
        stream = self._stream
        if stream is None:
            return
        stream.retire()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), timeout)

    async def stand(self, request: worker_pb2.ClaimRequest, *, timeout: float) -> int:
        """Send a standing claim; returns the generation of the stream it stands on.

        Raises the refusal as Claim would, or UNIMPLEMENTED when the worker has no session.
        """
        call = frames.STANDING_CLAIM
        try:
            answer, generation = await self._framed(call, request, asyncio.get_running_loop().time() + timeout)
        except NoSession:
            raise frames.failed(grpc.StatusCode.UNIMPLEMENTED, "the server has no Session") from None
        frames.reply_of(call, answer)
        return generation

    # -- calls -----------------------------------------------------------------------------

    async def _call(self, call: Call, request: Message, timeout: float | None) -> Any:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            answer, _ = await self._framed(call, request, deadline)
        except NoSession:
            assert call.method is not None, "a frame-only call is never made unary"
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            return await getattr(self._unary, call.method)(request, timeout=remaining)
        return frames.reply_of(call, answer)

    async def _framed(self, call: Call, request: Message, deadline: float | None) -> tuple[worker_pb2.ServerFrame, int]:
        try:
            async with asyncio.timeout_at(deadline):
                return await self._exchange(call, request)
        except TimeoutError:
            raise frames.failed(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None

    async def _exchange(self, call: Call, request: Message) -> tuple[worker_pb2.ServerFrame, int]:
        stream = await self._current()
        call_id = next(self._ids)
        try:
            answer = await stream.send(frames.frame(call_id, call, request))
        finally:
            stream.forget(call_id)
        if not self._answered:
            self._answered = True
            log.info("worker transport: session")
        return answer, stream.generation

    async def _current(self) -> SessionStream:
        while True:
            if self._unary_only or self._closing:
                raise NoSession
            if self._stream is not None:
                return self._stream
            if self._outage is not None:
                raise frames.copy(self._outage)
            await self._settled.wait()

    # -- the stream's upkeep ---------------------------------------------------------------

    async def run(self, sink: PushSink, channel: grpc.aio.Channel | None = None) -> None:
        """Keep a stream open until cancelled (the worker's life), or until the server turns out to have none.

        Args:
            sink: Hears the pushes, each new stream, and the grace running out.
            channel: Watched for connection changes (a fresh stream for each); None in tests.
        """
        self._sink = sink
        watch = asyncio.create_task(self._watch(channel)) if channel is not None else None
        try:
            await self._upkeep()
        finally:
            self._ended.set()
            ending = [*self._retired, *([watch] if watch is not None else [])]
            for task in ending:
                task.cancel()
            if self._grace_timer is not None:
                self._grace_timer.cancel()
            # Waited for, not only cancelled: a channel watch left pending outlived the loop
            # and grpc then wrote "Event loop is closed" for each of its callbacks.
            await asyncio.gather(*ending, return_exceptions=True)

    async def _upkeep(self) -> None:
        backoff = Pauses(Backoff(initial=0.25, maximum=5.0, jitter=0.5))
        while not self._closing:
            opened = await self._open()
            if isinstance(opened, SessionStream):
                broken, ended = await self._keep(opened)
                if self._closing:  # it ended as asked: read to its end
                    self._stream = None
                    broken.fail(_call_failure(ended))
                    return
                if ended.code() is grpc.StatusCode.UNIMPLEMENTED and not broken.answered:
                    self._fall_back(broken)
                    return
                log.warning("worker session broke (%s); opening another", describe(ended))
                self._stream = None
                self._settled.clear()
                broken.fail(_call_failure(ended))
                self._start_grace()
                if broken.answered:  # it worked: open another at once
                    backoff.reset()
                    continue
                failure = ended  # refused as it opened (a token refused): not again at once
            elif opened.code() is grpc.StatusCode.UNIMPLEMENTED:
                self._fall_back(None)
                return
            else:
                failure = opened
            delay = backoff.next()
            log.warning("worker session could not open (%s); again in %.2fs", describe(failure), delay)
            self._outage = _call_failure(failure)
            self._settled.set()
            await asyncio.sleep(delay)
            self._outage = None
            self._settled.clear()

    async def _open(self) -> SessionStream | grpc.aio.AioRpcError:
        assert self._sink is not None
        call = self._unary.Session()
        try:
            await call.wait_for_connection()  # its headers reached a server
        except grpc.aio.AioRpcError as exc:
            return exc
        except asyncio.CancelledError:
            call.cancel()
            raise
        self._generation += 1
        return SessionStream(call, self._generation, self._sink)

    async def _keep(self, stream: SessionStream) -> tuple[SessionStream, grpc.aio.AioRpcError]:
        """Serve `stream`, moving to a fresh one at each connection change; returns the one that broke, and how.

        A fresh stream is opened beside the one serving, so a stream that breaks meanwhile is
        seen at once (the grace starts then), however long the new connection takes.
        """
        self._install(stream)
        serving = asyncio.create_task(stream.serve())
        try:
            while True:
                self._rotate.clear()
                rotate = asyncio.create_task(self._rotate.wait())
                await asyncio.wait({serving, rotate}, return_when=asyncio.FIRST_COMPLETED)
                rotate.cancel()
                if serving.done():
                    return stream, serving.result()
                opening = asyncio.create_task(self._open())
                await asyncio.wait({serving, opening}, return_when=asyncio.FIRST_COMPLETED)
                if serving.done():
                    opening.cancel()
                    await asyncio.gather(opening, return_exceptions=True)
                    if opening.done() and not opening.cancelled() and isinstance(opening.result(), SessionStream):
                        opening.result().call.cancel()
                    return stream, serving.result()
                fresh = opening.result()
                if isinstance(fresh, grpc.aio.AioRpcError):
                    continue  # no connection to move to yet: the old stream serves until it breaks
                retired = asyncio.create_task(_drain(stream, serving))
                self._retired.add(retired)
                retired.add_done_callback(self._retired.discard)
                stream, serving = fresh, asyncio.create_task(fresh.serve())
                self._install(stream)
        except asyncio.CancelledError:
            serving.cancel()
            stream.call.cancel()
            stream.fail(frames.failed(grpc.StatusCode.CANCELLED, "the worker is stopping"))
            raise

    def _install(self, stream: SessionStream) -> None:
        self._stream, self._outage = stream, None
        self._settled.set()
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None
        assert self._sink is not None
        self._sink.opened()

    def _fall_back(self, stream: SessionStream | None) -> None:
        log.info("worker transport: unary calls (the server has no Session)")
        self._unary_only, self._stream = True, None
        self._settled.set()
        if self._grace_timer is not None:  # its leases live on, kept by unary heartbeats
            self._grace_timer.cancel()
            self._grace_timer = None
        if stream is not None:
            stream.fail(NoSession())  # never run by the server: made unary by their callers

    def _start_grace(self) -> None:
        if self._grace_timer is None:
            self._grace_timer = asyncio.get_running_loop().call_later(self._grace, self._grace_over)

    def _grace_over(self) -> None:
        log.warning(
            "no worker session for %.1fs (JOBWIRE_SESSION_GRACE_SECONDS): every lease held is taken as lost",
            self._grace,
        )
        assert self._sink is not None
        self._sink.gone()

    def rotate(self) -> None:
        """Open a fresh stream and move to it (the channel's connection changed)."""
        self._rotate.set()

    async def _watch(self, channel: grpc.aio.Channel) -> None:
        state = channel.get_state()
        while True:
            await channel.wait_for_state_change(state)
            state = channel.get_state()
            self.rotate()


async def _drain(stream: SessionStream, serving: asyncio.Task[grpc.aio.AioRpcError]) -> None:
    """A stream moved away from: half-closed, its calls answered; any cut short fail as a break fails them."""
    stream.retire()
    try:
        ended = await serving
    except asyncio.CancelledError:
        stream.call.cancel()
        stream.fail(frames.failed(grpc.StatusCode.CANCELLED, "the worker is stopping"))
        raise
    stream.fail(_call_failure(ended, logged=False))


def _call_failure(ended: grpc.aio.AioRpcError, *, logged: bool = True) -> grpc.aio.AioRpcError:
    """What the calls a stream's end cut short raise: a refusal of the stream itself
    (a token refused) as it is, as a unary call would be refused; anything else UNAVAILABLE,
    a SessionDown where the session has logged its trouble (`logged`), so its callers need not."""
    if ended.code() in REFUSED:
        return ended
    details = f"the worker's session is down: {describe(ended)}"
    return frames.session_down(details) if logged else frames.failed(grpc.StatusCode.UNAVAILABLE, details)
