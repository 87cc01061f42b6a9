"""The leases one worker Session holds, as its frames and their answers tell.

A lease is held once the session delivered it (a Claim's answer, a standing claim's push)
or once the worker named its token in a call answered as held (Heartbeat, ReportStage,
BatchReportStage, RecordEvidence): a worker that reconnects resumes its leases that way.
It is let go when an ending of it (Complete, Fail, ConfirmCancel, Release, AwaitReview)
is answered done or WORKER_LEASE_LOST, when a call is told it is lost, or when the server
pushes lease_lost. While an ending of it runs, the job's leaving its lease is that
ending's doing: no lease_lost is pushed for it.

What a session still holds when it ends is what jobwire.worker.server.disconnects marks.
Only facts the session has already seen are kept here: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from jobwire.domain.commands import EVERY_TENANT
from jobwire.domain.errors import WorkerLeaseLost
from jobwire.domain.job import Name
from jobwire.v1 import worker_pb2

ENDINGS = frozenset({"complete", "fail", "confirm_cancel", "release", "await_review"})
_HELD_STATES = frozenset({worker_pb2.LeaseState.OK, worker_pb2.LeaseState.CANCEL_REQUESTED})


@dataclass(eq=False)
class Held:
    """One lease a session holds."""

    tenant: str  # the job's; EVERY_TENANT for a shared fleet's lease this process could not place
    job_no: str
    token: str
    heard_at: datetime  # when the session last heard the lease was held (the store's clock)
    endings: int = 0  # endings of it the session runs now
    cancel_told: bool = False  # the worker knows a cancel was requested: pushed, or a call's answer said so
    # The job's version when it was leased, when known (a standing claim's lease): the event
    # tail's rows up to it (its Submit, read after the claim) are the lease's past, not news.
    since: int = 0
    # The worker was handed it. A standing claim's lease is held from its claim, so a cancel
    # read before its `leased` frame is written is pushed after it; until then it is not the
    # worker's, and a session that ends first hands it back rather than leaving it to expire.
    written: bool = True


class Holdings:
    """A session's leases, by job number and token."""

    def __init__(
        self,
        tenant: str,
        *,
        now: Callable[[], datetime],
        place: Callable[[str, str], Name | None],
        on_hold: Callable[[Held], None],
        on_drop: Callable[[Held], None],
    ) -> None:
        self._tenant = tenant  # the session's caller: EVERY_TENANT for a shared fleet
        self._now = now  # the store's clock
        self._place = place  # a shared fleet's lease: whose job it is, if this process knows
        self._on_hold, self._on_drop = on_hold, on_drop
        self._held: dict[tuple[str, str], Held] = {}

    def __iter__(self) -> Iterator[Held]:
        return iter(list(self._held.values()))

    def __contains__(self, held: Held) -> bool:
        return self._held.get((held.job_no, held.token)) is held

    def starting(self, kind: str, request: Message) -> None:
        """A call is about to run: an ending's lease leaves as that ending's doing, not as news."""
        if kind in ENDINGS:
            held = self._held.get((request.job_no, request.worker_token))  # type: ignore[attr-defined]
            if held is not None:
                held.endings += 1

    def answered(self, kind: str, request: Message, outcome: Message, *, delivered: bool) -> None:
        """A call's answer was written (`delivered`), or its session ended first.

        Undelivered, what the call did in the database still holds: an ending ended the lease,
        a renewal renewed it as this session's (its time is past `heard_at`, and a lease renewed
        past it is taken for another session's). Only a claim's leases went back, and the worker
        was told of no cancel.
        """
        if kind in ENDINGS:
            self._ended(request, outcome)
        elif kind == "claim" and isinstance(outcome, worker_pb2.ClaimResponse):
            if delivered:
                self.delivered(outcome.leases)
        elif kind == "heartbeat" and isinstance(outcome, worker_pb2.HeartbeatResponse):
            for ref, state in zip(request.leases, outcome.leases, strict=True):  # type: ignore[attr-defined]
                told_cancel = delivered and state.state == worker_pb2.LeaseState.CANCEL_REQUESTED
                self._named(ref.job_no, ref.worker_token, state.state in _HELD_STATES, told_cancel)
        elif kind == "batch_report_stage" and isinstance(outcome, worker_pb2.BatchReportStageResponse):
            for report, result in zip(request.reports, outcome.results, strict=True):  # type: ignore[attr-defined]
                self._reported(report, result.response if result.HasField("response") else result.error, delivered)
        elif kind in ("report_stage", "record_evidence"):
            self._reported(request, outcome, delivered)

    def delivered(self, leases: Sequence[worker_pb2.Lease]) -> None:
        """Leases the session handed its worker."""
        for lease in leases:
            self._hold(lease.tenant, lease.job_no, lease.worker_token)

    def pushing(self, leases: Sequence[worker_pb2.Lease], versions: Sequence[int]) -> list[Held]:
        """A standing claim's leases, about to be pushed, with the job's version at each: held
        from now, not yet `written`."""
        out = []
        for lease, version in zip(leases, versions, strict=True):
            held = self._hold(lease.tenant, lease.job_no, lease.worker_token)
            held.since, held.written = version, False
            out.append(held)
        return out

    def drop(self, held: Held) -> None:
        if self._held.pop((held.job_no, held.token), None) is not None:
            self._on_drop(held)

    def clear(self) -> list[Held]:
        """Every lease still held, let go (the session ended)."""
        left = list(self._held.values())
        for held in left:
            self.drop(held)
        return left

    def _ended(self, request: Message, outcome: Message) -> None:
        held = self._held.get((request.job_no, request.worker_token))  # type: ignore[attr-defined]
        if held is None:
            return
        held.endings = max(0, held.endings - 1)
        if not isinstance(outcome, status_pb2.Status) or _lost(outcome):
            self.drop(held)  # done (or done before: a replay), or no longer this worker's

    def _reported(self, request: Message, outcome: Message, delivered: bool) -> None:
        job_no, token = request.job_no, request.worker_token  # type: ignore[attr-defined]
        if isinstance(outcome, status_pb2.Status):
            if _lost(outcome):
                self._named(job_no, token, held=False)
            return
        told_cancel = delivered and isinstance(outcome, worker_pb2.ReportStageResponse) and outcome.cancel_requested
        self._named(job_no, token, held=True, told_cancel=told_cancel)

    def _named(self, job_no: str, token: str, held: bool, told_cancel: bool = False) -> None:
        if not held:
            found = self._held.get((job_no, token))
            if found is not None:
                self.drop(found)
            return
        tenant = self._tenant
        if tenant == EVERY_TENANT:
            placed = self._place(job_no, token)
            tenant = placed[0] if placed is not None else EVERY_TENANT
        self._hold(tenant, job_no, token).cancel_told |= told_cancel

    def _hold(self, tenant: str, job_no: str, token: str) -> Held:
        now = self._now()
        found = self._held.get((job_no, token))
        if found is not None:
            found.heard_at = now
            return found
        for older in [h for h in self._held.values() if h.job_no == job_no and h.tenant == tenant]:
            self.drop(older)  # an earlier lease of the same job: a new one means it is gone
        held = self._held[job_no, token] = Held(tenant=tenant, job_no=job_no, token=token, heard_at=now)
        self._on_hold(held)
        return held


def _lost(status: status_pb2.Status) -> bool:
    """Whether a refusal says the lease is no longer the caller's."""
    for packed in status.details:
        info = error_details_pb2.ErrorInfo()
        if packed.Unpack(info):
            return bool(info.reason == WorkerLeaseLost.reason)
    return False
