"""One Session stream of a worker: frames written in order, answers matched to their calls, pushes handed on.

jobwire.worker.sdk._session keeps one open (or several, while one is moved away from) and
decides what a stream's end means for the calls it cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

import grpc
import grpc.aio

from jobwire.v1 import worker_pb2
from jobwire.worker.sdk import _frames as frames

log = logging.getLogger("jobwire.worker")


class SessionCall(Protocol):
    """The part of a grpc.aio Session call (StreamStreamCall) used here; tests pass a fake."""

    async def wait_for_connection(self) -> None: ...

    async def write(self, request: worker_pb2.WorkerFrame) -> None: ...

    async def read(self) -> Any: ...  # a ServerFrame, or grpc.aio.EOF

    async def done_writing(self) -> None: ...

    def cancel(self) -> bool: ...


class PushSink(Protocol):
    """Who acts on what the server says of its own accord, and on the session's comings and goings."""

    def leased(self, reply: worker_pb2.ClaimResponse) -> None: ...

    def cancel_requested(self, state: worker_pb2.LeaseState) -> None: ...

    def lease_lost(self, state: worker_pb2.LeaseState) -> None: ...

    def opened(self) -> None:
        """A new stream is open: what lived on the last one (a standing claim) must be sent again."""

    def gone(self) -> None:
        """No stream for the grace: every lease this worker holds is to be taken as lost."""


class NoSession(Exception):
    """The server has no Session: make the call unary."""


class SessionStream:
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
        return frames.copy(failure) if isinstance(failure, grpc.aio.AioRpcError) else NoSession()

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
