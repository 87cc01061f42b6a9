"""A worker's Session as the service tests drive it: frames written, answers and pushes read."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from served import Served, eventually
from service_support import duration, spec

from jobwire.v1 import worker_pb2
from jobwire.worker.server import session as session_module

SESSION = "jobwire.v1.WorkerService/Session"


class Session:
    """A worker's Session stream, written and read by the test."""

    def __init__(self, served: Served, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.call = served.workers.Session(metadata=metadata)

    async def send(self, call_id: int, **call: Message) -> None:
        await self.call.write(worker_pb2.WorkerFrame(call_id=call_id, **call))

    async def reply(self) -> worker_pb2.ServerFrame:
        frame = await asyncio.wait_for(self.call.read(), 30)
        assert frame is not grpc.aio.EOF, "the session ended"
        return frame  # type: ignore[no-any-return]

    async def ask(self, call_id: int, **call: Message) -> worker_pb2.ServerFrame:
        await self.send(call_id, **call)
        reply = await self.reply()
        assert reply.call_id == call_id
        return reply

    async def pushed(self) -> worker_pb2.ServerFrame:
        """The next frame, which must be one the server sent unasked (call_id 0)."""
        frame = await self.reply()
        assert frame.call_id == 0 and frame.WhichOneof("reply") in PUSHES, frame
        return frame

    async def close(self) -> grpc.StatusCode:
        """Half-close, read to the end: the stream's status code."""
        await self.call.done_writing()
        assert await asyncio.wait_for(self.call.read(), 30) is grpc.aio.EOF
        return await self.call.code()  # type: ignore[no-any-return]


def claim_request(job_type: str, wait: float = 0) -> worker_pb2.ClaimRequest:
    return worker_pb2.ClaimRequest(worker_id="w1", job_types=[spec(job_type)], wait=duration(wait))


def ref(lease: worker_pb2.Lease, token: str | None = None) -> dict[str, str]:
    return {"job_no": lease.job_no, "worker_token": token or lease.worker_token}


PUSHES = ("leased", "cancel_requested", "lease_lost")


async def claims_waiting(served: Served, n: int = 1) -> None:
    async def probe() -> bool:
        return served.runtime.host.metrics.claims_waiting() >= n

    await eventually(probe, what=f"{n} claim(s) waiting for work")


def hold_writes(
    monkeypatch: pytest.MonkeyPatch, which: Callable[[worker_pb2.ServerFrame], bool]
) -> tuple[asyncio.Event, asyncio.Event]:
    """Frames `which` picks wait, unwritten, at a gate until the test opens it: (held, gate)."""
    held, gate, write = asyncio.Event(), asyncio.Event(), session_module.written

    async def withheld(context: Any, frame: worker_pb2.ServerFrame) -> None:
        if which(frame):
            held.set()
            await gate.wait()
        await write(context, frame)

    monkeypatch.setattr(session_module, "written", withheld)
    return held, gate
