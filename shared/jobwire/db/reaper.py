"""The lease reaper: an expired lease makes a job stalled, then the job's policy decides.

Two steps, each one short transaction per job, so a reaper never holds many locks:

1. `mark_stalled`: a lease past `lease_expires_at` becomes `stalled=true`, with a visible
   LEASE_EXPIRED event carrying the evidence. Expiry alone revokes nothing: the holder's
   next heartbeat or report revives it.
2. `apply_policy`, once the lease is `grace` past expiry: CANCEL_REQUESTED ends CANCELLED
   (nobody is executing it); RETRY requeues while attempts remain, else FAILED with category
   WORKER_LOST; INSPECT leaves the job RUNNING and stalled for an operator.

Only the database clock decides. Every write is guarded by id, version, status, token and
epoch, and by the lease expiry (a heartbeat renews a lease without a new version); the row
is read FOR UPDATE SKIP LOCKED on MySQL. So reapers in many processes never act twice on
one lease: the loser matches no row, reruns, and finds nothing left to do.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.engine import Database, db_now
from jobwire.db.tables import job
from jobwire.db.writes import UNSTAGED, Row, apply, clock
from jobwire.domain.errors import Conflict
from jobwire.domain.job import ErrorCategory
from jobwire.domain.retry import OnLeaseLost
from jobwire.domain.states import LEASED, Action, Status

LEASE_EXPIRED = "LEASE_EXPIRED"  # marked stalled
LEASE_REVOKED_REQUEUED = "LEASE_REVOKED_REQUEUED"  # RETRY with attempts left
LEASE_REVOKED_FAILED = "LEASE_REVOKED_FAILED"  # RETRY with no attempts left: FAILED WORKER_LOST
LEASE_REVOKED_CANCELLED = "LEASE_REVOKED_CANCELLED"  # a cancel was pending: CANCELLED
REAPER_KINDS = (LEASE_EXPIRED, LEASE_REVOKED_REQUEUED, LEASE_REVOKED_FAILED, LEASE_REVOKED_CANCELLED)

WORKER_LOST_MESSAGE = "The worker running this job stopped responding."
BATCH = 200  # jobs per step and run; the rest wait for the next run
_LEASED = [s.value for s in LEASED]
log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Reaped:
    """What one run did: leases marked stalled, and the policy actions taken."""

    stalled: int = 0
    requeued: int = 0
    failed: int = 0
    cancelled: int = 0

    def __bool__(self) -> bool:
        return any((self.stalled, self.requeued, self.failed, self.cancelled))


def reap(db: Database, grace: timedelta, *, by: str, batch: int = BATCH) -> Reaped:
    """One run: mark expired leases stalled, then apply the policies due; a transaction per job."""
    marked = 0
    for job_id in db.read(partial(expired, limit=batch)):
        marked += bool(_each(db, partial(mark_stalled, job_id=job_id, by=by, skip_locked=db.is_mysql)))
    actions: Counter[str] = Counter()
    for job_id in db.read(partial(overdue, grace=grace, limit=batch)):
        kind = _each(db, partial(apply_policy, job_id=job_id, grace=grace, by=by, skip_locked=db.is_mysql))
        if isinstance(kind, str):
            actions[kind] += 1
    return Reaped(
        stalled=marked,
        requeued=actions[LEASE_REVOKED_REQUEUED],
        failed=actions[LEASE_REVOKED_FAILED],
        cancelled=actions[LEASE_REVOKED_CANCELLED],
    )


def _each(db: Database, step: Callable[[Connection], T]) -> T | None:
    try:
        return db.write(step)
    except Conflict:
        # Contended past the retries: whoever won has acted; the next run looks again.
        log.info("reaper: a job was contended; it will be looked at again next run")
        return None


def expired(conn: Connection, limit: int) -> list[int]:
    """Ids of leases past expiry not yet marked stalled, oldest expiry first."""
    query = (
        sa.select(job.c.id)
        .where(
            job.c.status.in_(_LEASED),
            job.c.lease_expires_at < db_now(),
            job.c.stalled == sa.false(),
            job.c.worker_token.is_not(None),
        )
        .order_by(job.c.lease_expires_at)
        .limit(limit)
    )
    return list(conn.execute(query).scalars())


def overdue(conn: Connection, grace: timedelta, limit: int) -> list[int]:
    """Ids of stalled leases `grace` past expiry whose policy acts: RETRY, or a pending cancel."""
    cutoff = clock(conn) - grace
    acts = sa.or_(job.c.status == Status.CANCEL_REQUESTED.value, job.c.on_lease_lost == OnLeaseLost.RETRY.value)
    query = (
        sa.select(job.c.id)
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
    return list(conn.execute(query).scalars())


def _locked(conn: Connection, job_id: int, skip_locked: bool) -> Row | None:
    """The leased row with the database clock; None when gone, not leased, or locked by another."""
    query = sa.select(job, db_now().label("db_now")).where(
        job.c.id == job_id, job.c.status.in_(_LEASED), job.c.worker_token.is_not(None)
    )
    if skip_locked:
        # Another reaper (or the holder's own report) has it: leave it to them this round.
        query = query.with_for_update(skip_locked=True)
    found = conn.execute(query).mappings().first()
    return dict(found) if found is not None else None


def mark_stalled(conn: Connection, job_id: int, *, by: str, skip_locked: bool) -> bool:
    """Mark one expired lease stalled, with the evidence; False if there was nothing to do."""
    row = _locked(conn, job_id, skip_locked)
    if row is None or row["stalled"] or row["lease_expires_at"] is None:
        return False
    now: datetime = row["db_now"]
    if row["lease_expires_at"] >= now:
        return False
    apply(
        conn, row, {"stalled": True}, action=Action.LEASE_EXPIRED, kind=LEASE_EXPIRED, now=now, token_guard=True,
        detail=evidence(row, by), guards=[job.c.lease_expires_at < now],
    )  # fmt: skip
    return True


def apply_policy(conn: Connection, job_id: int, grace: timedelta, *, by: str, skip_locked: bool) -> str | None:
    """Apply the job's lease-lost policy to one stalled lease; the event kind written, or None."""
    row = _locked(conn, job_id, skip_locked)
    if row is None or not row["stalled"] or row["lease_expires_at"] is None:
        return None
    now: datetime = row["db_now"]
    cutoff = now - grace
    if row["lease_expires_at"] > cutoff:
        return None
    kind, changes = _decide(row, now)
    if kind is None:
        return None
    detail = f"{evidence(row, by)}; {kind}"
    apply(
        conn, row, changes, action=Action.LEASE_EXPIRED, kind=kind, now=now, token_guard=True, detail=detail,
        guards=[job.c.stalled == sa.true(), job.c.lease_expires_at <= cutoff],
    )  # fmt: skip
    return kind


def _decide(row: Row, now: datetime) -> tuple[str | None, dict[str, object]]:
    # Revoking the lease: no token, no expiry, and a new epoch so the old token can never match.
    revoked = {"worker_token": None, "lease_expires_at": None, "stalled": False, "lease_epoch": row["lease_epoch"] + 1}
    if row["status"] == Status.CANCEL_REQUESTED.value:
        return LEASE_REVOKED_CANCELLED, {**revoked, "status": Status.CANCELLED.value, "finished_at": now}
    if row["on_lease_lost"] != OnLeaseLost.RETRY.value:
        return None, {}
    if row["attempt"] - row["attempt_base"] < row["max_attempts"]:
        # The attempt stays charged; the checkpoint stays for the next one.
        return LEASE_REVOKED_REQUEUED, {**revoked, **UNSTAGED, "status": Status.QUEUED.value, "run_after": now}
    return LEASE_REVOKED_FAILED, {
        **revoked,
        "status": Status.FAILED.value,
        "finished_at": now,
        "error_category": ErrorCategory.WORKER_LOST.value,
        "error_stage": row["stage"],
        "error_message": WORKER_LOST_MESSAGE,
        "error_retryable": True,
        "error_detail": evidence(row, ""),
    }


def evidence(row: Row, by: str) -> str:
    """What an operator needs to judge a lost lease, as one line."""
    total = row["total_units"]
    units = f"{row['processed_units']}/{total}" if total is not None else f"{row['processed_units']}/?"
    parts = [
        f"lease of epoch {row['lease_epoch']} expired at {_iso(row['lease_expires_at'])} (database clock)",
        f"worker {row['worker_id'] or '?'}",
        f"last heartbeat {_iso(row['heartbeat_at'])}",
        f"stage {row['stage'] or '-'} {row['stage_index']}/{row['stage_count']}",
        f"units {units}",
        f"checkpoint {'present' if row['checkpoint'] is not None else 'none'}",
        f"attempt {row['attempt']} of {row['attempt_base'] + row['max_attempts']}",
        f"policy {row['on_lease_lost']}",
    ]
    if by:
        parts.append(f"reaper {by}")
    return "; ".join(parts)


def _iso(value: datetime | None) -> str:
    return value.isoformat(sep=" ", timespec="milliseconds") if value is not None else "never"
