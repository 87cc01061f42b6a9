"""The lease reaper: an expired lease makes a job stalled, then the job's policy decides.

Two steps, each one short transaction for up to BATCH jobs (milliseconds of locks):

1. `mark_stalled`: a lease past `lease_expires_at` becomes `stalled=true`, with a visible
   LEASE_EXPIRED event carrying the evidence. Expiry alone revokes nothing: the holder's
   next heartbeat or report revives it.
2. `apply_policy`, once the lease is `grace` past expiry: CANCEL_REQUESTED ends CANCELLED
   (nobody is executing it); RETRY requeues while attempts remain, else FAILED with category
   WORKER_LOST; INSPECT leaves the job RUNNING and stalled for an operator.

A worker's Session that ended while holding a lease (jobwire.db.disconnects) has the same
two steps run on that lease alone (`token`), at once and with no grace: its worker is
known gone.

Only the store's clock decides (jobwire.db.clock): each row is read with its time. Every write is guarded by id,
version, status, token and epoch, and by the lease expiry (a heartbeat renews a lease
without a new version); rows are read FOR UPDATE SKIP LOCKED on MySQL. So reapers in many
processes never act twice on one lease: a loser matches no row, reads it again, and finds
nothing left to do.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.changes import Change, JobOp, Row
from jobwire.db.engine import Database
from jobwire.db.reads import now_value
from jobwire.db.rows import attempts_of, ending_values, holding_of, holding_values, policy_of
from jobwire.db.sql import Lock
from jobwire.db.tables import job
from jobwire.domain.endings import on_lease_lost
from jobwire.domain.errors import Conflict
from jobwire.domain.evidence import EventKind
from jobwire.domain.lease import revoke
from jobwire.domain.retry import OnLeaseLost
from jobwire.domain.states import LEASED, Action, Status
from jobwire.observe import logs

BATCH = 200  # jobs per step and run; the rest wait for the next run
_LEASED = [s.value for s in LEASED]
log = logging.getLogger(__name__)
RunOps = Callable[[Sequence[JobOp[Any]]], Awaitable[list[Any]]]
Read = Callable[[Callable[[Connection], Any]], Awaitable[Any]]


@dataclass(frozen=True, kw_only=True)
class Reaped:
    """What one run did: leases marked stalled, and the policy actions taken."""

    stalled: int = 0
    requeued: int = 0
    failed: int = 0
    cancelled: int = 0

    def __bool__(self) -> bool:
        return any((self.stalled, self.requeued, self.failed, self.cancelled))


async def reap(db: Database, read: Read, run: RunOps, grace: timedelta, *, by: str, batch: int = BATCH) -> Reaped:
    """One run: mark expired leases stalled, then apply the policies due.

    `read` runs a query (on a thread), `run` applies operations (on the loop).
    """
    found = await read(partial(expired, limit=batch))
    marks = await apply_each(run, [MarkStalled(tenant=t, job_no=n, by=by) for t, n in found])
    _said("leases expired, marked stalled", found, marks)
    cutoff = db.clock.now() - grace
    due = await read(partial(overdue, cutoff=cutoff, limit=batch))
    outcomes = await apply_each(run, [ApplyPolicy(tenant=t, job_no=n, grace=grace, by=by) for t, n in due])
    _said("stalled past the grace, their policy applied", due, outcomes)
    actions = Counter(outcomes)
    return Reaped(
        stalled=marks.count(EventKind.LEASE_EXPIRED),
        requeued=actions[EventKind.LEASE_REVOKED_REQUEUED],
        failed=actions[EventKind.LEASE_REVOKED_FAILED],
        cancelled=actions[EventKind.LEASE_REVOKED_CANCELLED],
    )


def _said(what: str, jobs: Sequence[tuple[str, str]], outcomes: Sequence[Any]) -> None:
    """An operator's log line: the jobs an expiry acted on, and what each became."""
    acted = [
        (tenant, f"{no} ({kind})") for (tenant, no), kind in zip(jobs, outcomes, strict=False) if isinstance(kind, str)
    ]
    if acted:
        log.info("%s: %s", what, logs.jobs_named(acted))


async def apply_each(run: RunOps, ops: Sequence[JobOp[Any]]) -> list[Any]:
    """Each op's outcome (a time-driven op's event kind, or None); none when contended past the retries."""
    if not ops:
        return []
    try:
        return await run(ops)
    except Conflict:
        # Contended past the retries: whoever won has acted; the next run looks again.
        log.info("housekeeping: jobs were contended; they will be looked at again next run")
        return []


def expired(conn: Connection, limit: int) -> list[tuple[str, str]]:
    """(tenant, job_no) of leases past expiry not yet marked stalled, oldest expiry first."""
    query = (
        sa.select(job.c.tenant, job.c.job_no)
        .where(
            job.c.status.in_(_LEASED),
            job.c.lease_expires_at < now_value(conn),
            job.c.stalled == sa.false(),
            job.c.worker_token.is_not(None),
        )
        .order_by(job.c.lease_expires_at)
        .limit(limit)
    )
    return [(r.tenant, r.job_no) for r in conn.execute(query)]


def overdue(conn: Connection, cutoff: datetime, limit: int) -> list[tuple[str, str]]:
    """(tenant, job_no) of stalled leases expired before `cutoff` whose policy acts: RETRY, or a pending cancel."""
    acts = sa.or_(job.c.status == Status.CANCEL_REQUESTED.value, job.c.on_lease_lost == OnLeaseLost.RETRY.value)
    query = (
        sa.select(job.c.tenant, job.c.job_no)
        .where(
            job.c.status.in_(_LEASED),
            job.c.lease_expires_at <= cutoff,
            job.c.stalled == sa.true(),
            job.c.worker_token.is_not(None),
            acts,
        )
        .order_by(job.c.lease_expires_at)
        .limit(limit)
    )
    return [(r.tenant, r.job_no) for r in conn.execute(query)]


def leased(row: Row | None, token: str | None = None) -> bool:
    """Whether `row` is a job under lease: any lease, or (`token`) that one."""
    held = row is not None and row["status"] in _LEASED and row["worker_token"] is not None
    return held and (token is None or row["worker_token"] == token)  # type: ignore[index]


class SweepOp(JobOp[str | None]):
    """A change housekeeping decides by time: on the database clock, on the row as it is now."""

    fresh = True  # never on a cached guess
    lock = Lock.SKIP_LOCKED  # another reaper (or the holder's own call) has it: theirs this round

    def outcome(self, row: Row | None, change: Change | None) -> str | None:
        return change.kind if change is not None else None


@dataclass(frozen=True, kw_only=True)
class MarkStalled(SweepOp):
    """Mark one expired lease stalled, with the evidence; nothing if there is nothing to do."""

    tenant: str
    job_no: str
    by: str
    lock: str = Lock.SKIP_LOCKED
    token: str | None = None  # only the lease of this token (a disconnected session's), not whichever is held

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if not leased(row, self.token) or row["stalled"] or row["lease_expires_at"] is None:  # type: ignore[index]
            return None
        assert row is not None
        clock = row["db_now"]
        if row["lease_expires_at"] >= clock:
            return None
        expired = ("lease_expires_at < :g_expired_before", {"g_expired_before": clock})
        return Change(
            action=Action.LEASE_EXPIRED, kind=EventKind.LEASE_EXPIRED, values={"stalled": True}, fenced=True,
            detail=evidence(row, self.by), guards=(expired,),
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ApplyPolicy(SweepOp):
    """Apply the job's lease-lost policy to one stalled lease past its grace."""

    tenant: str
    job_no: str
    grace: timedelta
    by: str
    lock: str = Lock.SKIP_LOCKED
    token: str | None = None  # as MarkStalled's

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if not leased(row, self.token) or not row["stalled"] or row["lease_expires_at"] is None:  # type: ignore[index]
            return None
        assert row is not None
        cutoff = row["db_now"] - self.grace
        if row["lease_expires_at"] > cutoff:
            return None
        kind, values = _policy(row, now)
        if kind is None:
            return None
        guards = (
            ("stalled = :g_still_stalled", {"g_still_stalled": True}),
            ("lease_expires_at <= :g_cutoff", {"g_cutoff": cutoff}),
        )
        return Change(
            action=Action.LEASE_EXPIRED, kind=kind, values=values, fenced=True,
            detail=f"{evidence(row, self.by)}; {kind}", guards=guards,
        )  # fmt: skip


def _policy(row: Row, now: datetime) -> tuple[EventKind | None, dict[str, object]]:
    policy = policy_of(row).on_lease_lost
    ending = on_lease_lost(Status(row["status"]), policy, attempts_of(row), row["stage"], now)
    if ending is None:
        return None, {}
    values = {**holding_values(revoke(holding_of(row))), **ending_values(ending, now)}
    if ending.error is not None:
        values["error_detail"] = evidence(row, "")
    return ending.kind, values


def evidence(row: Row, by: str) -> str:
    """What an operator needs to judge a lost lease, as one line."""
    total = row["total_units"]
    units = f"{row['processed_units']}/{total}" if total is not None else f"{row['processed_units']}/?"
    parts = [
        f"lease of epoch {row['lease_epoch']} expired at {iso_time(row['lease_expires_at'])} (database clock)",
        f"worker {row['worker_id'] or '?'}",
        f"last heartbeat {iso_time(row['heartbeat_at'])}",
        f"stage {row['stage'] or '-'} {row['stage_index']}/{row['stage_count']}",
        f"units {units}",
        f"checkpoint {'present' if row['has_checkpoint'] else 'none'}",
        f"attempt {row['attempt']} of {row['attempt_base'] + row['max_attempts']}",
        f"policy {row['on_lease_lost']}",
    ]
    if by:
        parts.append(f"reaper {by}")
    return "; ".join(parts)


def iso_time(value: datetime | None) -> str:
    """A time in evidence: to the millisecond, or `never`."""
    return value.isoformat(sep=" ", timespec="milliseconds") if value is not None else "never"
