"""Leases whose holder's Session ended: their end brought near, then handled as expired.

A worker's Session stream that ends while it holds leases (the worker died, or its
connection did) is news the reaper never gets from a lease alone. `MarkDisconnected`
brings each lease's end to at most a short grace from now, with a WORKER_DISCONNECTED
event naming the worker and why; a worker that comes back within it names the token in a
Heartbeat or a report and its lease runs on as after any renewal. At the grace's end the
process that saw the session end runs the reaper's own two steps on those leases
(`expire`): marked stalled, then the job's policy, with no stall grace, for the worker
is known gone (an expired lease alone may be a paused worker that speaks again).

Every write is guarded as the reaper's are (token, epoch, version), so whoever acts first
(this process, another's reaper, the chore leader's) acts alone. A lease renewed after the
session last heard of it is another session's now (the worker came back elsewhere before
this one's end was noticed): it is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobwire.db.changes import Change, JobOp, Row
from jobwire.db.lease_tokens import issued, token_epoch
from jobwire.db.reaper import ApplyPolicy, MarkStalled, RunOps, apply_each, iso_time, leased
from jobwire.db.sql import Lock
from jobwire.domain.commands import EVERY_TENANT
from jobwire.domain.evidence import EventKind
from jobwire.domain.states import Action

NO_GRACE = timedelta(0)


@dataclass(frozen=True, kw_only=True)
class Disconnected:
    """A lease marked: whose job it is, its token, and when it now ends (the store's clock)."""

    tenant: str
    job_no: str
    token: str
    ends_at: datetime


@dataclass(frozen=True, kw_only=True)
class MarkDisconnected(JobOp[Disconnected | None]):
    """The lease of `token` ends within `grace` from now, unless renewed since `heard_at`."""

    tenant: str  # EVERY_TENANT: a shared fleet's lease, told by its token
    job_no: str
    token: str
    heard_at: datetime  # when the session last heard of the lease: a later renewal is not its own
    grace: timedelta
    why: str  # what ended the session, for the evidence

    def names(self, row: Row) -> bool:
        return issued(row, self.token) if self.tenant == EVERY_TENANT else super().names(row)

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if not leased(row, self.token) or row["lease_epoch"] != token_epoch(self.token):  # type: ignore[index]
            return None
        assert row is not None
        if row["heartbeat_at"] is None or row["heartbeat_at"] > self.heard_at:
            return None  # renewed by another session of its worker since: the lease is that one's
        ends = min(row["lease_expires_at"], now + self.grace)
        detail = (
            f"worker {row['worker_id'] or '?'}: its session ended ({self.why}); the lease of epoch "
            f"{row['lease_epoch']} now ends at {iso_time(ends)} (database clock) unless the worker names it again"
        )
        unrenewed = ("heartbeat_at <= :g_heard_at", {"g_heard_at": self.heard_at})
        return Change(
            action=Action.LEASE_EXPIRED, kind=EventKind.WORKER_DISCONNECTED, values={"lease_expires_at": ends},
            fenced=True, detail=detail, guards=(unrenewed,),
        )  # fmt: skip

    def outcome(self, row: Row | None, change: Change | None) -> Disconnected | None:
        if row is None or change is None:
            return None
        return Disconnected(
            tenant=row["tenant"], job_no=row["job_no"], token=self.token, ends_at=row["lease_expires_at"]
        )


async def expire(run: RunOps, gone: Sequence[Disconnected], *, by: str) -> list[Disconnected]:
    """The reaper's two steps for these leases alone, now, with no stall grace: those acted
    on (marked stalled, or their policy applied). Each waits for a lock another holds
    (Lock.UPDATE): skipped, the lease would wait for the reaper's next round and its grace."""
    marks = await apply_each(run, [
        MarkStalled(tenant=g.tenant, job_no=g.job_no, by=by, token=g.token, lock=Lock.UPDATE) for g in gone
    ])  # fmt: skip
    acts = await apply_each(run, [
        ApplyPolicy(tenant=g.tenant, job_no=g.job_no, grace=NO_GRACE, by=by, token=g.token, lock=Lock.UPDATE)
        for g in gone
    ])  # fmt: skip
    acted = {i for i, kind in enumerate(marks) if isinstance(kind, str)}
    acted |= {i for i, kind in enumerate(acts) if isinstance(kind, str)}
    return [g for i, g in enumerate(gone) if i in acted]
