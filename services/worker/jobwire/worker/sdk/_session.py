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

log = logging.getLogger("jobwire.worker")


class SessionCall(Protocol):
    """The part of a grpc.aio Session call (StreamStreamCall) used here; tests pass a fake."""

    async def wait_for_connection(self) -> None: ...

    async def write(self, request: worker_pb2.WorkerFrame) -> None: ...

    async def read(self) -> Any: ...  # a ServerFrame, or grpc.aio.EOF

    async def done_writing(self) -> None: ...

    def cancel(self) -> bool: ...


class ChannelStub(WorkerStub, Protocol):
    """A WorkerService stub that can open a Session (WorkerServiceStub; a test's fake)."""

    def Session(self) -> SessionCall: ...


class PushSink(Protocol):
    """Who acts on what the server says of its own accord, and on the session's comings and goings."""

    def leased(self, reply: worker_pb2.ClaimResponse) -> None: ...

    def cancel_requested(self, state: worker_pb2.LeaseState) -> None: ...

    def lease_lost(self, state: worker_pb2.LeaseState) -> None: ...

    def opened(self) -> None:
        """A new stream is open: what lived on the last one (a standing claim) must be sent again."""

    def gone(self) -> None:
        """No stream for the grace: every lease this worker holds is to be taken as lost."""


class _NoSession(Exception):
    """The server has no Session: make the call unary."""


class _Stream:
    """One Session call: frames written in order by one task, answers matched by call_id."""

    def __init__(self, call: SessionCall, generation: int, sink: PushSink) -> None:
        self.call, self.generation = call, generation
        self._sink = sink
        self._outbox: asyncio.Queue[worker_pb2.WorkerFrame | None] = asyncio.Queue()  # None: half-close
        self._waiting: dict[int, asyncio.Future[worker_pb2.ServerFrame]] = {}
        self._failure: BaseException | None = None
        self.answered = False  # a frame came back: the server has Session

    def send(self, frame: worker_pb2.WorkerFrame) -> asyncio.Future[worker_pb2.ServerFrame]:
        future = asyncio.get_running_loop().create_future()
        if self._failure is not None:
            future.set_exception(self._failure_copy())
            return future
        self._waiting[frame.call_id] = future
        self._outbox.put_nowait(frame)
        return future

    def forget(self, call_id: int) -> None:
        self._waiting.pop(call_id, None)

    def retire(self) -> None:
        """Half-close once the frames queued are written: the calls in flight are answered, then it ends."""
        self._outbox.put_nowait(None)

    def fail(self, failure: BaseException) -> None:
        """End every call still waiting with `failure` (a copy each), and any sent later."""
        self._failure = failure
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(self._failure_copy())

    def _failure_copy(self) -> BaseException:
        failure = self._failure
        return frames.copy(failure) if isinstance(failure, grpc.aio.AioRpcError) else _NoSession()

    async def serve(self) -> grpc.aio.AioRpcError:
        """Write and read until the stream ends; returns how it ended."""
        writer = asyncio.create_task(self._write())
        try:
            return await self._read()
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    async def _write(self) -> None:
        while (frame := await self._outbox.get()) is not None:
            try:
                await self.call.write(frame)
            except Exception:  # noqa: BLE001 - the stream ended; its reader says how
                self.call.cancel()  # so the reader surely ends, whatever the write's reason
                return
        with contextlib.suppress(Exception):  # ended already: the reader says how
            await self.call.done_writing()

    async def _read(self) -> grpc.aio.AioRpcError:
        try:
            while (frame := await self.call.read()) is not grpc.aio.EOF:
                self._take(frame)
        except grpc.aio.AioRpcError as exc:
            return exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return frames.failed(grpc.StatusCode.UNAVAILABLE, "the session stream was cancelled")
        return frames.failed(grpc.StatusCode.UNAVAILABLE, "the server ended the session")

    def _take(self, frame: worker_pb2.ServerFrame) -> None:
        self.answered = True
        kind = frame.WhichOneof("reply")
        if kind in frames.PUSHES:
            try:
                getattr(self._sink, kind)(getattr(frame, kind))
            except Exception:  # a push acted on badly must not end the session
                log.exception("the server's %s push could not be acted on", kind)
            return
        future = self._waiting.pop(frame.call_id, None)
        if future is not None and not future.done():
            future.set_result(frame)


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
        self._stream: _Stream | None = None
        self._outage: grpc.aio.AioRpcError | None = None  # why calls fail while no stream is open
        self._settled = asyncio.Event()  # set while there is a stream, an outage, or no session at all
        self._unary_only = False
        self._rotate = asyncio.Event()
        self._generation = 0
        self._answered = False
        self._grace_timer: asyncio.TimerHandle | None = None
        self._sink: PushSink | None = None
        self._retired: set[asyncio.Task[None]] = set()  # streams moved away from, finishing their calls

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

    async def stand(self, request: worker_pb2.ClaimRequest, *, timeout: float) -> int:
        """Send a standing claim; returns the generation of the stream it stands on.

        Raises the refusal as Claim would, or UNIMPLEMENTED when the worker has no session.
        """
        call = frames.STANDING_CLAIM
        try:
            answer, generation = await self._framed(call, request, asyncio.get_running_loop().time() + timeout)
        except _NoSession:
            raise frames.failed(grpc.StatusCode.UNIMPLEMENTED, "the server has no Session") from None
        frames.reply_of(call, answer)
        return generation

    # -- calls -----------------------------------------------------------------------------

    async def _call(self, call: Call, request: Message, timeout: float | None) -> Any:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            answer, _ = await self._framed(call, request, deadline)
        except _NoSession:
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

    async def _current(self) -> _Stream:
        while True:
            if self._unary_only:
                raise _NoSession
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
            for task in (*self._retired, *([watch] if watch is not None else [])):
                task.cancel()
            if self._grace_timer is not None:
                self._grace_timer.cancel()

    async def _upkeep(self) -> None:
        backoff = Pauses(Backoff(initial=0.25, maximum=5.0, jitter=0.5))
        while True:
            opened = await self._open()
            if isinstance(opened, _Stream):
                broken, ended = await self._keep(opened)
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

    async def _open(self) -> _Stream | grpc.aio.AioRpcError:
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
        return _Stream(call, self._generation, self._sink)

    async def _keep(self, stream: _Stream) -> tuple[_Stream, grpc.aio.AioRpcError]:
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
                    if opening.done() and not opening.cancelled() and isinstance(opening.result(), _Stream):
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

    def _install(self, stream: _Stream) -> None:
        self._stream, self._outage = stream, None
        self._settled.set()
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None
        assert self._sink is not None
        self._sink.opened()

    def _fall_back(self, stream: _Stream | None) -> None:
        log.info("worker transport: unary calls (the server has no Session)")
        self._unary_only, self._stream = True, None
        self._settled.set()
        if self._grace_timer is not None:  # its leases live on, kept by unary heartbeats
            self._grace_timer.cancel()
            self._grace_timer = None
        if stream is not None:
            stream.fail(_NoSession())  # never run by the server: made unary by their callers

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


async def _drain(stream: _Stream, serving: asyncio.Task[grpc.aio.AioRpcError]) -> None:
    """A stream moved away from: half-closed, its calls answered; any cut short fail as a break fails them."""
    stream.retire()
    try:
        ended = await serving
    except asyncio.CancelledError:
        stream.call.cancel()
        stream.fail(frames.failed(grpc.StatusCode.CANCELLED, "the worker is stopping"))
        raise
    stream.fail(_call_failure(ended))


def _call_failure(ended: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
    """What the calls a stream's end cut short raise: a refusal of the stream itself
    (a token refused) as it is, as a unary call would be refused; anything else UNAVAILABLE."""
    if ended.code() in REFUSED:
        return ended
    return frames.failed(grpc.StatusCode.UNAVAILABLE, f"the worker's session is down: {describe(ended)}")
