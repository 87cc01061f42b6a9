"""What a worker Session is sent unasked: a standing claim's leases, cancels, lost leases.

`PushHub` is the process's one: it knows every session here and the leases each holds
(jobwire.worker.server.holdings), and hears every job's changes from the event tail
(jobwire.runtime.tail), whichever replica made them. While some session here holds a lease
the tail polls every 50 ms with no backoff (`prompt`: twenty statements a second per
process), so a cancel requested on another replica reaches the worker within a poll
(bench/session_push.py: p50 55 ms), not at its next heartbeat; one requested in this
process or its family has the tail poll at once (`Runtime.news`):

- a job a session holds went CANCEL_REQUESTED: `cancel_requested`, at once;
- a job a session holds left its lease (requeued, revoked, timed out, ended by someone
  else): `lease_lost`, once a read confirms the token no longer holds it, so a change the
  tail delivers late (the QUEUED version of a job the session has since claimed) or the
  session's own ending in flight pushes nothing;
- a lease a session holds was marked disconnected (WORKER_DISCONNECTED) by the end of
  another session, here or on another replica: its worker is alive on this one, so the
  lease is renewed at once, as its heartbeat would. The mark's guard (renewed since that
  session last heard of it) compares times the two sessions' servers took apart: a worker
  that moved while its old session's last call was still on its way can have its new
  session's renewal land before that call's, and the mark then takes it for dead.

`SessionPush` is one session's side: its holdings, its standing claim (one task claiming
through Leasing.claim as a Claim does, with the same fencing, shares, limits and wake-ups,
pushing `leased` until max_jobs have gone out; the same worker asking again adds how many
more it wants, without ending a claim in its transaction; one for other work replaces it),
and its end: what it still holds goes to jobwire.worker.server.disconnects, unless the
session ended in silence (jobwire.worker.server.session).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from jobwire.db.feed import FeedRow
from jobwire.domain.commands import EVERY_TENANT, Claimant
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import Name
from jobwire.domain.lease import Lease, LeaseState
from jobwire.domain.limits import MAX_JOBS_PER_CLAIM
from jobwire.domain.states import LEASED, Status
from jobwire.rpc.metrics import Metrics
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.tail import EventTail
from jobwire.v1 import worker_pb2
from jobwire.worker.server.disconnects import Disconnects
from jobwire.worker.server.holdings import Held, Holdings
from jobwire.worker.server.leasing import Leasing

log = logging.getLogger(__name__)

# A standing claim's long poll: as long as a Claim may wait; an empty one looks again at once.
STANDING_WAIT_S = 60.0
RETRY_AFTER_S = 1.0  # a standing claim refused on the way (an outage, no room to wait) claims again after this
_LOST = {LeaseState.LOST: worker_pb2.LeaseState.LOST, LeaseState.TIMED_OUT: worker_pb2.LeaseState.TIMED_OUT}

Decode = Callable[[worker_pb2.ClaimRequest], tuple[Claimant, int, float]]
EncodeLease = Callable[[Lease], worker_pb2.Lease]


class Outlet(Protocol):
    """Where a session's pushes go: its stream, after the answers before them."""

    def push(self, frame: worker_pb2.ServerFrame, done: Callable[[bool], None] | None = None) -> None:
        """Write `frame`; `done(written)` once it was, or once the session ended without it."""


class PushHub:
    """Every worker Session of this process, and the leases each holds, for the tail's news."""

    def __init__(
        self,
        tail: EventTail,
        leasing: Leasing,
        disconnects: Disconnects,
        *,
        blocking: Blocking,
        metrics: Metrics,
        decode: Decode,
        encode: EncodeLease,
    ) -> None:
        self.leasing = leasing
        self.disconnects = disconnects
        self.blocking = blocking
        self.metrics = metrics
        self.decode = decode  # a ClaimRequest checked as Claim checks it
        self.encode = encode  # a lease as a Claim's answer carries it
        self._tail = tail
        self._by_job: dict[Name, dict[Held, SessionPush]] = {}
        self._checks: dict[Held, asyncio.Task[None]] = {}
        self._renewals: set[asyncio.Task[None]] = set()
        tail.subscribe(self._deliver, listening=self._holding, prompt=self._holding)

    async def ready(self) -> None:
        """Wait until the tail has its start position: a session opened after it hears every
        change to a lease it learns (one before it is the lease's own past)."""
        await self._tail.ready()

    def open(self, outlet: Outlet, tenant: str) -> SessionPush:
        return SessionPush(self, outlet, tenant)

    def now(self) -> datetime:
        return self.leasing.store.now()

    def place(self, job_no: str, token: str) -> Name | None:
        """Whose job of this number the lease `token` is, if this process has its row (a shared fleet's call)."""
        return self.leasing.store.cache.holder(job_no, token)

    def index(self, held: Held, session: SessionPush) -> None:
        if held.tenant == EVERY_TENANT:
            return  # a lease not placed gets no pushes: its worker's calls tell it
        if not self._by_job:
            self._tail.wake()  # its pause began idle (a second): from now on it polls promptly
        self._by_job.setdefault((held.tenant, held.job_no), {})[held] = session

    def unindex(self, held: Held) -> None:
        key = (held.tenant, held.job_no)
        holders = self._by_job.get(key)
        if holders is not None:
            holders.pop(held, None)
            if not holders:
                del self._by_job[key]

    def _holding(self) -> bool:
        return bool(self._by_job)

    def _deliver(self, rows: Sequence[FeedRow], seq: int) -> None:
        for row in rows:
            holders = self._by_job.get((row.tenant, row.job_no))
            if not holders:
                continue
            if row.kind == EventKind.CANCEL_REQUESTED and row.to_status == Status.CANCEL_REQUESTED:
                for held, session in list(holders.items()):
                    session.tell_cancel(held)
            elif row.kind == EventKind.WORKER_DISCONNECTED:
                for held, session in list(holders.items()):
                    if held.written and not held.endings:
                        self._renew(held, session)
            elif row.to_status not in LEASED:
                for held, session in list(holders.items()):
                    if row.version > held.since and not held.endings and held not in self._checks:
                        self._check(held, session)

    def _renew(self, held: Held, session: SessionPush) -> None:
        """Renew a lease another session's end marked: this session's worker holds it."""

        async def renew() -> None:
            try:
                status = await self.leasing.renew(held.tenant, held.job_no, held.token)
            except Exception:  # the worker's next renewal, within the grace, keeps it instead
                log.warning("session push: cannot renew the lease of %s", held.job_no, exc_info=True)
                return
            if status.state in _LOST:  # gone before the renewal came (the grace ran out first)
                session.tell_lost(held, _LOST[status.state])
            else:
                self.metrics.disconnected("renewed", 1)

        task = asyncio.get_running_loop().create_task(renew())
        self._renewals.add(task)
        task.add_done_callback(self._renewals.discard)

    def _check(self, held: Held, session: SessionPush) -> None:
        """Read where the lease stands; push lease_lost if it is gone."""

        async def check() -> None:
            try:
                state = await self.blocking(self.leasing.store.lease_state, held.tenant, held.job_no, held.token)
            except Exception:  # the worker's next call tells it instead
                log.warning("session push: cannot read the lease of %s", held.job_no, exc_info=True)
                return
            finally:
                self._checks.pop(held, None)
            if state in _LOST:
                session.tell_lost(held, _LOST[state])

        self._checks[held] = asyncio.get_running_loop().create_task(check())


class SessionPush:
    """One session's leases, its standing claim, and the frames pushed to it."""

    def __init__(self, hub: PushHub, outlet: Outlet, tenant: str) -> None:
        self._hub = hub
        self._outlet = outlet
        self.holdings = Holdings(
            tenant, now=hub.now, place=hub.place, on_hold=lambda held: hub.index(held, self), on_drop=hub.unindex
        )
        self._standing: asyncio.Task[None] | None = None
        self._who: Claimant | None = None  # whom the standing claim claims for
        self._left = 0  # leases the standing claim may still push
        self._winding = asyncio.Event()  # the standing claim's: claim no more once set
        self._look_again = asyncio.Event()  # a claim waiting for work stops waiting (wound down, or asked anew)
        self._closed = False

    async def standing_claim(self, request: worker_pb2.ClaimRequest, context: Any) -> worker_pb2.ClaimResponse:
        """A StandingClaim frame's call: checked as a Claim, answered at once, then pushed to."""
        who, max_jobs, _ = self._hub.decode(request)  # its wait is ignored
        standing = self._standing
        if standing is not None and not standing.done() and who == self._who and not self._winding.is_set():
            # The same worker asking again as its slots free up: `max_jobs` more than it was
            # still owed. Added, not put in the place of what is left: leases pushed and still on
            # their way when it asked were owed by the count before, and replaced by this one,
            # they came on top of it (bench/noop.py: 18% of no-op jobs pushed to a worker with
            # no slot). The claim goes on: one waiting for work looks again; one in its
            # transaction ends it, its leases counted. Cancelled instead, it handed those back,
            # to be claimed once more (2,226 handed back for 2,000 no-op jobs).
            self._left = min(self._left + max_jobs, MAX_JOBS_PER_CLAIM)
            self._look_again.set()
            return worker_pb2.ClaimResponse()
        self._left = max_jobs  # a new claim: what its worker had free when it asked
        self.stop_standing()
        self._who, self._winding, self._look_again = who, asyncio.Event(), asyncio.Event()
        self._standing = asyncio.get_running_loop().create_task(
            self._claim_standing(who, self._winding, self._look_again)
        )
        return worker_pb2.ClaimResponse()

    def stop_standing(self) -> asyncio.Task[None] | None:
        """End the standing claim (a claim in its transaction hands its leases back); the task, to wait for."""
        standing, self._standing = self._standing, None
        if standing is not None:
            standing.cancel()
        return standing

    def wind_down(self) -> asyncio.Task[None] | None:
        """The worker half-closed (it moves to a new stream, or stops): the standing claim waits
        no more, but a claim in its transaction ends and its leases are pushed, where a cancel
        would hand them back and their jobs be claimed twice. The task, to write those before
        the session ends."""
        self._winding.set()
        self._look_again.set()
        return self._standing

    async def _claim_standing(self, who: Claimant, winding: asyncio.Event, look_again: asyncio.Event) -> None:
        while self._left > 0 and not winding.is_set():
            look_again.clear()
            try:
                leases = await self._hub.leasing.claim(who, self._left, STANDING_WAIT_S, stop=look_again)
            except Exception:  # a standing claim outlasts an outage, a full server, a bug in one round
                log.warning("standing claim of %s: claim failed; again in %g s", who.worker_id, RETRY_AFTER_S,
                            exc_info=True)  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(winding.wait(), RETRY_AFTER_S)
                continue
            if leases:
                self._left -= len(leases)
                if not await self._push_leases(who.tenant, leases):
                    return

    async def _push_leases(self, tenant: str, leases: list[Lease]) -> bool:
        """Push `leases`; whether they were written (not written, they are handed back as an
        undelivered Claim's are)."""
        written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        frame = worker_pb2.ServerFrame(leased=worker_pb2.ClaimResponse(leases=[self._hub.encode(x) for x in leases]))
        # Held from now: a cancel the event tail brings before the frame is written (a Cancel
        # has the tail poll at once) is pushed after it, not lost for want of a holder.
        pushed = self.holdings.pushing(frame.leased.leases, [x.version for x in leases])

        def done(delivered: bool) -> None:
            for held in pushed:
                if delivered:
                    held.written = True
                else:
                    self.holdings.drop(held)
            if not delivered:
                self._hub.leasing.hand_back(tenant, leases, "the session ended before they were pushed")
            if not written.done():
                written.set_result(delivered)

        self._push(frame, "leased", done)
        return await written

    def tell_cancel(self, held: Held) -> None:
        if not held.cancel_told:
            held.cancel_told = True
            state = worker_pb2.LeaseState(job_no=held.job_no, state=worker_pb2.LeaseState.CANCEL_REQUESTED)
            self._push(worker_pb2.ServerFrame(cancel_requested=state), "cancel_requested")

    def tell_lost(self, held: Held, state: worker_pb2.LeaseState.State.ValueType) -> None:
        if held in self.holdings and not held.endings:
            self.holdings.drop(held)
            self._push(worker_pb2.ServerFrame(lease_lost=worker_pb2.LeaseState(job_no=held.job_no, state=state)),
                       "lease_lost")  # fmt: skip

    def close(self, why: str | None) -> None:
        """The session ended (`why`): nothing more is pushed; the leases it holds are taken for
        a dead worker's (jobwire.worker.server.disconnects). None: it ended in silence, as the
        keepalive ends a stopped worker's too: they expire at their end and the stall grace."""
        self._closed = True
        left = [held for held in self.holdings.clear() if held.written]  # the others are handed back
        if why is None:
            self._hub.metrics.disconnected("silent", len(left))
        else:
            self._hub.disconnects.ended(left, why)

    def _push(self, frame: worker_pb2.ServerFrame, kind: str, done: Callable[[bool], None] | None = None) -> None:
        if self._closed:
            if done is not None:
                done(False)
            return
        self._hub.metrics.pushed(kind)
        self._outlet.push(frame, done)
