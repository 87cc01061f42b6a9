"""WorkerService.Session: a worker's calls as frames over one stream, each run as its unary call.

A worker that keeps one stream open pays gRPC's cost of a call (headers, a stream, the
handler wrapping) once, not per report. Each WorkerFrame names a call and the worker's
call_id for it; the call runs through the very servicer method of its unary RPC (the same
decoding, limits, fencing and refusals) and is counted and logged as that RPC
(jobwire.rpc.handlers `answered`); its ServerFrame leaves as soon as it is done, so a Claim
waiting for work holds up nothing behind it.

The stream is the session's caller and its lifetime: authenticated once when it opens (the
handler wrapping), its calls ended with it. A half-close lets the calls in flight finish
(and a standing claim's transaction: its leases are pushed, not handed back); a
cancelled stream cancels them as a unary call's cancellation would, and a Claim whose reply
was never written hands its leases back (`FrameContext`).

The server also writes frames of its own accord (call_id 0: jobwire.worker.server.session_push):
a standing claim's leases, cancels, lost leases. They take no room of the frames read, and
they learn, as every answer written does, which leases the session holds; what it still
holds when it ends is taken for a dead worker's (jobwire.worker.server.disconnects).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import Message
from google.rpc import status_pb2

from jobwire.domain.errors import InvalidArgument, JobwireError
from jobwire.rpc import auth
from jobwire.rpc.errors import status_proto
from jobwire.rpc.handlers import answered, written
from jobwire.rpc.metrics import Metrics
from jobwire.rpc.server import KEEPALIVE_SILENCE_S
from jobwire.v1 import worker_pb2

if TYPE_CHECKING:
    from jobwire.worker.server.servicer import WorkerServicer
    from jobwire.worker.server.session_push import PushHub

# Frames of one session read and not yet answered (running, or their answer waiting to be
# written). Past it the session stops reading its stream until an answer is written, so
# HTTP/2 flow control holds the worker back, not the server's memory: a worker that sends
# and never reads is held too, refused frames included.
MAX_IN_FLIGHT = 64
SERVICE = "jobwire.v1.WorkerService"
STANDING_CLAIM = f"{SERVICE}/StandingClaim"  # no unary call: counted and logged under this name


@dataclass(frozen=True)
class Route:
    """Where a frame's call goes: its unary method and the ServerFrame field of its reply."""

    method: str  # as the unary call is counted and logged: jobwire.v1.WorkerService/Claim
    behavior: Callable[[Any, Any], Awaitable[Message]]
    reply: str

    def frame(self, call_id: int, outcome: Message) -> worker_pb2.ServerFrame:
        frame = worker_pb2.ServerFrame(call_id=call_id)
        if isinstance(outcome, status_pb2.Status):
            frame.error.CopyFrom(outcome)
        else:
            getattr(frame, self.reply).CopyFrom(outcome)
        return frame


def routes(servicer: WorkerServicer) -> Mapping[str, Route]:
    """Each call a WorkerFrame may carry (its `call` field), to the servicer's unary method;
    a standing claim, which has none, is the session's own (`SessionPush.standing_claim`)."""

    def to(name: str, behavior: Callable[[Any, Any], Awaitable[Message]], reply: str = "job") -> Route:
        return Route(f"{SERVICE}/{name}", behavior, reply)

    return {
        "claim": to("Claim", servicer.Claim, "claim"),
        "heartbeat": to("Heartbeat", servicer.Heartbeat, "heartbeat"),
        "report_stage": to("ReportStage", servicer.ReportStage, "report_stage"),
        "batch_report_stage": to("BatchReportStage", servicer.BatchReportStage, "batch_report_stage"),
        "complete": to("Complete", servicer.Complete),
        "fail": to("Fail", servicer.Fail),
        "confirm_cancel": to("ConfirmCancel", servicer.ConfirmCancel),
        "release": to("Release", servicer.Release),
        "await_review": to("AwaitReview", servicer.AwaitReview),
        "record_evidence": to("RecordEvidence", servicer.RecordEvidence, "record_evidence"),
    }


class FrameContext:
    """What a servicer method uses of its call's context, for a call a session carries.

    Of grpc.aio's ServicerContext the worker calls use the deadline (Claim answers before
    it) and done callbacks (Claim hands back leases whose reply did not reach the worker).
    A frame's call has the stream's deadline. It is done when its reply frame was written,
    or, cancelled, when the session ended without writing it.
    """

    def __init__(self, stream: grpc.aio.ServicerContext) -> None:
        self._stream = stream
        self._callbacks: list[Callable[[FrameContext], None]] = []
        self._cancelled = False

    def time_remaining(self) -> float | None:
        remaining: float | None = self._stream.time_remaining()
        return remaining

    def add_done_callback(self, callback: Callable[[FrameContext], None]) -> None:
        self._callbacks.append(callback)

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self, *, delivered: bool) -> None:
        self._cancelled = not delivered
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)


@dataclass(frozen=True)
class Outgoing:
    """A frame to write: an answer (of a frame read: `room` it gives back) or a push."""

    frame: worker_pb2.ServerFrame
    call: FrameContext | None  # done once written; None: a refused frame, no call ran
    room: bool = True


class WorkerSession:
    """One Session stream: its caller, its calls in flight, the replies on their way."""

    def __init__(
        self, routes: Mapping[str, Route], stream: grpc.aio.ServicerContext, metrics: Metrics, pushes: PushHub
    ) -> None:
        self.caller = auth.current()  # whose stream it is, set by the wrapping when it opened
        self._stream = stream
        self._metrics = metrics
        self._push = pushes.open(self, self.caller.tenant)
        standing = Route(STANDING_CLAIM, self._push.standing_claim, "claim")
        self._routes = {**routes, "standing_claim": standing}
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._unwritten: set[FrameContext] = set()  # calls begun (and pushes) whose frame was not written
        self._room = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._replies: asyncio.Queue[Outgoing | None] = asyncio.Queue()  # None: nothing more will come
        self._reading = True
        self._refusal: Exception | None = None  # what ended the reading, when not the worker's half-close
        self._heard_at = time.monotonic()  # when the last frame was read
        self._said: str | None = None  # a frame that did not parse ended it
        self._winding: asyncio.Task[None] | None = None  # the standing claim ending after a half-close
        self._finished = False  # the end of the replies is queued

    async def serve(self, frames: AsyncIterator[worker_pb2.WorkerFrame]) -> None:
        """Answer every frame until the worker half-closes and all are answered, or the stream ends."""
        reader = asyncio.create_task(self._read(frames))
        try:
            while (out := await self._replies.get()) is not None:
                await written(self._stream, out.frame)
                if out.room:
                    self._room.release()
                if out.call is not None:
                    self._done(out.call, delivered=True)
            if self._refusal is not None:
                raise self._refusal
        finally:
            # Cancelled (the worker left, the server stops) or refused: no call outlives the
            # stream, but only a claim is stopped, for it may wait long (its leases go back). Any
            # other call is one transaction, sent to the database and committed whether or not
            # its caller still waits (jobwire.rpc.batching): it runs to its end, so what it did
            # is known here. A renewal committed unbeknown to the session would look like its
            # worker's from a new session elsewhere, and the dead worker's lease would not be
            # marked (jobwire.db.disconnects): its job would wait for the lease's end.
            calls = list(self._in_flight.values())
            standing = self._push.stop_standing()
            for task in (reader, *(c for c in calls if c.get_name() == "claim")):
                task.cancel()
            await asyncio.gather(reader, *calls, *([standing] if standing else []), return_exceptions=True)
            for call in list(self._unwritten):
                self._done(call, delivered=False)
            self._push.close(self._why_ended())

    def _why_ended(self) -> str | None:
        """How the session ended, for the evidence; None when it may have been the keepalive's
        doing (nothing heard for its span): a silent worker may be stopped, not dead."""
        if self._said is not None:
            return self._said
        if time.monotonic() - self._heard_at >= KEEPALIVE_SILENCE_S:
            return None
        return "its stream ended: half-closed, cancelled, or its connection broke"

    def push(self, frame: worker_pb2.ServerFrame, done: Callable[[bool], None] | None = None) -> None:
        """Write a frame of the server's own (call_id 0) after those before it; `done(written)`."""
        call = FrameContext(self._stream)
        if done is not None:
            call.add_done_callback(lambda pushed: done(not pushed.cancelled()))
        self._unwritten.add(call)
        self._replies.put_nowait(Outgoing(frame, call, room=False))

    async def _read(self, frames: AsyncIterator[worker_pb2.WorkerFrame]) -> None:
        try:
            while True:
                await self._room.acquire()  # no room: the next frame stays unread; its answer's write gives it back
                frame = await anext(frames, None)
                if frame is None:  # a half-close, or (seen from here alike) a cancel or a dropped connection
                    self._room.release()
                    self._wind_down()
                    return
                self._heard_at = time.monotonic()
                self._take(frame)
        except Exception as refusal:  # noqa: BLE001 - a frame that did not parse, or the stream broke: the stream's status
            self._refusal = refusal
            if isinstance(refusal, JobwireError):
                self._said = "a frame did not parse"
        finally:
            self._reading = False
            self._finish_if_idle()

    def _take(self, frame: worker_pb2.WorkerFrame) -> None:
        kind, call_id = frame.WhichOneof("call"), frame.call_id
        route = self._routes.get(kind) if kind is not None else None
        if kind is None or route is None:
            # No call, or one this server does not route (a newer worker's): refused alike, and
            # the session goes on, as a server built before that call was added refuses it.
            self._refuse(call_id, InvalidArgument("call", f"a frame carries one call: {', '.join(self._routes)}"))
        elif call_id in self._in_flight:
            self._refuse(
                call_id, InvalidArgument("call_id", f"{call_id} is a call still in flight: number each call anew")
            )
        else:
            call = FrameContext(self._stream)
            self._unwritten.add(call)
            request = getattr(frame, kind)
            if kind == "release":
                # A worker handing a job back (most often as it stops) wants nothing pushed in
                # its place: its standing claim took the released job again at once, pushed to a
                # worker about to close its session. It asks anew when it wants more.
                self._push.stop_standing()
            self._push.holdings.starting(kind, request)
            self._in_flight[call_id] = asyncio.create_task(self._answer(call_id, kind, request, call), name=kind)

    def _refuse(self, call_id: int, error: JobwireError) -> None:
        self._replies.put_nowait(Outgoing(worker_pb2.ServerFrame(call_id=call_id, error=status_proto(error)), None))

    async def _answer(self, call_id: int, kind: str, request: Message, call: FrameContext) -> None:
        route = self._routes[kind]
        try:
            outcome = await answered(route.method, route.behavior, request, call, self._metrics)
        finally:
            del self._in_flight[call_id]
        holdings = self._push.holdings
        call.add_done_callback(lambda done: holdings.answered(kind, request, outcome, delivered=not done.cancelled()))
        self._replies.put_nowait(Outgoing(route.frame(call_id, outcome), call))
        self._finish_if_idle()

    def _done(self, call: FrameContext, *, delivered: bool) -> None:
        self._unwritten.discard(call)
        call.done(delivered=delivered)

    def _wind_down(self) -> None:
        """The worker asks for nothing more: the standing claim ends, its last leases written first."""
        standing = self._push.wind_down()
        if standing is not None and not standing.done():
            self._winding = standing
            standing.add_done_callback(lambda _: self._finish_if_idle())

    def _finish_if_idle(self) -> None:
        winding = self._winding is not None and not self._winding.done()
        if not self._reading and not self._in_flight and not winding and not self._finished:
            self._finished = True
            self._replies.put_nowait(None)
