"""One batched Heartbeat per worker, for every lease it holds.

The reply's CANCEL_REQUESTED, LOST and TIMED_OUT reach each handler's next safe point. Leases
are kept by (job_no, worker_token) and the reply read in the request's order: a shared fleet's
worker may hold two tenants' jobs of one number (numbers are per tenant). A failed
heartbeat is retried sooner than the interval (with backoff) but never faster than it
helps: the lease lasts three intervals, so one missed beat costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from jobwire.client import Backoff, Pauses
from jobwire.v1 import worker_pb2
from jobwire.worker.sdk._attempt import StopReason
from jobwire.worker.sdk._rpc import WorkerStub, describe, retry_level

log = logging.getLogger("jobwire.worker")
_STATE_STOPS = {
    worker_pb2.LeaseState.CANCEL_REQUESTED: StopReason.CANCEL,
    worker_pb2.LeaseState.LOST: StopReason.LOST,
    worker_pb2.LeaseState.TIMED_OUT: StopReason.TIMED_OUT,
}


Ref = tuple[str, str]  # (job_no, worker_token): one lease


@dataclass(frozen=True, kw_only=True)
class _Held:
    interval: float
    on_stop: Callable[[StopReason], None]


class LeaseKeeper:
    """Renews all of a worker's leases in one call every heartbeat interval."""

    def __init__(self, stub: WorkerStub, *, worker_id: str, default_interval: float, most: float | None = None) -> None:
        self._stub = stub
        self._worker_id = worker_id
        self._default_interval = default_interval
        self._most = most  # the longest interval whatever a lease asks for (on a Session)
        self._held: dict[Ref, _Held] = {}
        self._changed = asyncio.Event()
        self._due = asyncio.Event()  # beat now, not at the interval's end
        self._backoff = Pauses(Backoff(initial=0.5, maximum=default_interval, jitter=0.5))

    def add(self, job_no: str, token: str, *, interval: float, on_stop: Callable[[StopReason], None]) -> None:
        """Keep renewing the lease until `remove`; `on_stop` hears CANCEL_REQUESTED, LOST and TIMED_OUT."""
        self._held[job_no, token] = _Held(interval=interval or self._default_interval, on_stop=on_stop)
        self._changed.set()

    def remove(self, job_no: str, token: str) -> None:
        self._held.pop((job_no, token), None)

    def told(self, job_no: str, state: worker_pb2.LeaseState.State.ValueType) -> None:
        """The server pushed a lease's state (CANCEL_REQUESTED, LOST, TIMED_OUT): acted on as a heartbeat's answer.

        A push names the job only: when this worker holds two tenants' jobs of that number,
        the next heartbeat, which asks for each lease, tells them apart.
        """
        stop = _STATE_STOPS.get(state)
        held = [h for (no, _), h in self._held.items() if no == job_no]
        if stop is not None and len(held) == 1:
            held[0].on_stop(stop)

    def renew_now(self) -> None:
        """Heartbeat at once (a new session opened): a session that ended holding leases has
        them taken for a dead worker's unless they are named again within the server's grace
        (JOBWIRE_SESSION_GRACE_SECONDS, 3 s), sooner than the next beat may fall due."""
        self._due.set()

    def lose_all(self) -> None:
        """Take every lease held as lost (the session's grace ran out): each handler stops at its next check."""
        for held in list(self._held.values()):
            held.on_stop(StopReason.LOST)

    @property
    def held(self) -> int:
        return len(self._held)

    def interval(self) -> float:
        """The shortest interval any held lease asks for (and at most `most`)."""
        shortest = min((h.interval for h in self._held.values()), default=self._default_interval)
        return shortest if self._most is None else min(shortest, self._most)

    async def run(self) -> None:
        """Heartbeat until cancelled."""
        delay = self.interval()
        while True:
            if not self._held:
                # Nothing to renew: sleep until a lease arrives, then give it one interval.
                self._changed.clear()
                await self._changed.wait()
                self._due.clear()
                delay = self.interval()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._due.wait(), delay)
            self._due.clear()  # a renew_now during the beat below ends the next wait at once
            delay = await self.beat()

    async def beat(self) -> float:
        """Send one Heartbeat for every held lease; returns the delay until the next one."""
        held = dict(self._held)
        if not held:
            return self.interval()
        request = worker_pb2.HeartbeatRequest(
            worker_id=self._worker_id,
            leases=[worker_pb2.LeaseRef(job_no=no, worker_token=token) for no, token in held],
        )
        try:
            reply = await self._stub.Heartbeat(request, timeout=self.interval())
        except grpc.RpcError as exc:
            delay = min(self._backoff.next(), self.interval())
            log.log(
                retry_level(exc),
                "heartbeat for %d lease(s) failed (%s); again in %.1fs",
                len(held),
                describe(exc),
                delay,
            )
            return delay
        self._backoff.reset()
        for entry, state in zip(held.values(), reply.leases, strict=False):  # one state per lease, in order
            stop = _STATE_STOPS.get(state.state)
            if stop is not None:
                entry.on_stop(stop)
        return self.interval()
