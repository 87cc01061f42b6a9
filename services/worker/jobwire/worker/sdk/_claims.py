"""How a worker gets its leases: one standing claim on its session, or long-poll Claims.

On a session whose server takes standing claims, the worker asks once for as many jobs as it
has free slots and the server pushes leases as jobs come (ServerFrame.leased); it asks again,
for the slots beyond what the server still owes it, whenever slots free up, and anew on every
new stream (a standing claim lives and dies with its stream). A server that refuses the
standing claim (UNIMPLEMENTED, INVALID_ARGUMENT: one built before it) is long-polled on that
stream, as a worker without a session always is.

A refusal of the worker's token on its first claim stops the worker (`refused`); any other
failure is waited out with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta

import grpc

from jobwire.client import Backoff, Pauses, status_code
from jobwire.codec import stages_to_proto
from jobwire.v1 import worker_pb2
from jobwire.worker.sdk._config import WorkerConfig
from jobwire.worker.sdk._handlers import Handlers
from jobwire.worker.sdk._rpc import CALL_TIMEOUT_S, WorkerRefused, WorkerStub, describe, refusal, retry_level
from jobwire.worker.sdk._session import SessionStub

log = logging.getLogger("jobwire.worker")
# A server that has Session but no standing claims refuses one as a call it does not know.
_NO_STANDING = frozenset({grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT})


class Claims:
    """Claims leases for a worker until it stops, and starts each one it is granted.

    Args:
        free: Slots free now (concurrency less the jobs running).
        start: Runs (or hands back) one granted lease.
        stop: Set when the worker stops claiming.
    """

    def __init__(
        self,
        config: WorkerConfig,
        handlers: Handlers,
        stub: WorkerStub,
        session: SessionStub | None,
        *,
        free: Callable[[], int],
        start: Callable[[worker_pb2.Lease], None],
        stop: asyncio.Event,
    ) -> None:
        self._config, self._handlers = config, handlers
        self._stub, self._session = stub, session
        self._free, self._start, self._stop = free, start, stop
        self._wake = asyncio.Event()
        self._stood_on = 0  # the stream generation the standing claim lives on (0: none)
        self._owed = 0  # leases the standing claim may still bring
        self._no_standing_on = -1  # the stream generation that refused a standing claim
        self.refused: WorkerRefused | None = None

    def wake(self) -> None:
        """Something changed: a slot freed, a new stream opened, or the worker stops."""
        self._wake.set()

    def leased(self, reply: worker_pb2.ClaimResponse) -> None:
        """Leases the server pushed for the standing claim."""
        self._owed = max(0, self._owed - len(reply.leases))
        for lease in reply.leases:
            self._start(lease)

    async def run(self) -> None:
        """Claim until the worker stops, or its token is refused on the first claim (`refused`)."""
        backoff = Pauses(Backoff(initial=0.5, maximum=10.0, jitter=0.5))
        claimed = False  # once the token was let in, a later refusal (an auth file reloaded) backs off
        while not self._stop.is_set():
            self._wake.clear()
            free = self._free()
            try:
                if free <= 0 or (self._standing() and free <= self._owed):
                    await self._wake.wait()
                    continue
                taken = await self._stand(free) if self._stands() else await self._poll(free)
            except grpc.RpcError as exc:
                refused = (
                    None if claimed else refusal(exc, has_token=bool(self._config.token), queues=self._config.queues)
                )
                if refused is not None:
                    self.refused = refused
                    return
                delay = backoff.next()
                log.log(retry_level(exc), "claim failed (%s); retrying in %.1fs", describe(exc), delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                continue
            if taken:  # not a standing claim refused as a call the server does not know
                backoff.reset()
                claimed = True

    def _stands(self) -> bool:
        """True when the claim to make is a standing one: on a session that has not refused one."""
        session = self._session
        return session is not None and not session.unary_only and self._no_standing_on != session.generation

    def _standing(self) -> bool:
        """True while a standing claim lives on the session's current stream."""
        return self._session is not None and self._stood_on == self._session.generation

    async def _stand(self, free: int) -> bool:
        assert self._session is not None
        # On the stream a standing claim lives on, asking again adds to what the server still
        # owes (leases on their way included): only the slots beyond it. A new stream's claim
        # starts from nothing.
        more = free - self._owed if self._standing() else free
        request = self.request(more)
        request.ClearField("wait")
        generation = self._session.generation
        # Owed from now: the server may push the first lease before this task hears the answer.
        self._owed = self._owed + more if self._standing() else more
        try:
            self._stood_on = await self._session.stand(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            self._owed = 0
            if status_code(exc) not in _NO_STANDING:
                raise
            if self._no_standing_on < 0:
                log.info("the server takes no standing claim (%s): long-polling Claims", describe(exc))
            self._no_standing_on = generation
            return False
        return True

    async def _poll(self, free: int) -> bool:
        reply = await self._stub.Claim(self.request(free), timeout=self._config.claim_wait + CALL_TIMEOUT_S)
        for lease in reply.leases:
            self._start(lease)
        return True

    def request(self, free: int) -> worker_pb2.ClaimRequest:
        config = self._config
        request = worker_pb2.ClaimRequest(
            worker_id=config.worker_id,
            queues=list(config.queues),
            job_types=[
                worker_pb2.JobTypeSpec(name=spec.job_type, stages=stages_to_proto(spec.stages))
                for spec in self._handlers
            ],
            max_jobs=free,
        )
        request.wait.FromTimedelta(timedelta(seconds=config.claim_wait))
        if config.lease_duration is not None:
            request.lease_duration.FromTimedelta(timedelta(seconds=config.lease_duration))
        return request
