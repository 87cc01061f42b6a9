"""Operator findings: stalled leases, jobs without progress or without a worker, and two invariants."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.reads import Row, clock, scoped
from jobwire.db.sql import BLOBS
from jobwire.db.tables import job, worker_claim
from jobwire.domain.commands import EVERY_TENANT, Scope
from jobwire.domain.evidence import Finding, FindingKind
from jobwire.domain.states import LEASED, TERMINAL, Status

MAX_FINDINGS = 1000
# Without the blobs (a payload of up to 1 MiB each, the checkpoint): a finding shows only
# whether a checkpoint exists.
_COLUMNS = [
    *(column for column in job.c if column.name not in BLOBS),
    job.c.checkpoint.is_not(None).label("has_checkpoint"),
]


def _conditions(kind: FindingKind, now: sa.ColumnElement, cutoff: sa.ColumnElement) -> list[sa.ColumnElement[bool]]:  # type: ignore[type-arg]
    leased = job.c.status.in_([s.value for s in LEASED])
    if kind is FindingKind.STALLED:
        return [leased, job.c.worker_token.is_not(None), job.c.lease_expires_at < cutoff]
    if kind is FindingKind.NO_PROGRESS:  # by the database clock, marked or not yet
        return [job.c.status == Status.RUNNING.value, job.c.progress_deadline < now]
    if kind is FindingKind.RUNNING_WITHOUT_LEASE:
        return [leased, sa.or_(job.c.worker_token.is_(None), job.c.lease_expires_at.is_(None))]
    # A WAITING job's lease ended when it asked for review: it must hold no token either.
    unheld = [*(s.value for s in TERMINAL), Status.WAITING.value]
    return [job.c.status.in_(unheld), job.c.worker_token.is_not(None)]


def findings(
    conn: Connection,
    scope: Scope,
    *,
    stalled_after: timedelta = timedelta(0),
    queue: str = "",
    kinds: Collection[FindingKind] = (),
    no_worker_after: timedelta = timedelta(seconds=300),
) -> list[Finding]:
    """Each finding; a lease counts as stalled `stalled_after` past expiry, a kind of job as
    unserved after `no_worker_after` without a claim."""
    now = clock(conn)
    at = sa.literal(now, type_=job.c.lease_expires_at.type)
    cutoff = sa.literal(now - stalled_after, type_=job.c.lease_expires_at.type)
    out: list[Finding] = []
    for kind in kinds or list(FindingKind):
        if kind is FindingKind.NO_WORKER:
            out += _no_worker(conn, scope, queue, now, no_worker_after)
            continue
        where = [*scoped(scope), *_conditions(kind, at, cutoff)]
        if queue:
            where.append(job.c.queue == queue)
        query = sa.select(*_COLUMNS).where(*where).order_by(job.c.id).limit(MAX_FINDINGS)
        out += [_finding(kind, {**r, "db_now": now}) for r in conn.execute(query).mappings()]
    return out


def _finding(kind: FindingKind, row: Row) -> Finding:
    lease, progress, claimed = row["lease_expires_at"], row["progress_at"], row.get("claimed_at")
    return Finding(
        kind=kind, job_no=row["job_no"], queue=row["queue"], status=Status(row["status"]), stage=row["stage"],
        attempt=row["attempt"], worker_id=row["worker_id"], processed_units=row["processed_units"],
        total_units=row["total_units"], checkpoint_present=bool(row["has_checkpoint"]),
        heartbeat_at=row["heartbeat_at"], lease_expires_at=lease,
        overdue_s=(row["db_now"] - lease).total_seconds() if lease is not None else None,
        marked_stalled=bool(row["stalled"]), on_lease_lost=row["on_lease_lost"],
        token_present=row["worker_token"] is not None,
        progress_at=progress, idle_s=(row["db_now"] - progress).total_seconds() if progress is not None else None,
        stage_timeout_s=row["stage_timeout_s"], marked_no_progress=bool(row["no_progress"]),
        on_no_progress=row["on_no_progress"],
        job_type=row["job_type"], claimed_at=claimed, title=row["title"],
        unclaimed_s=(row["db_now"] - claimed).total_seconds() if claimed is not None else None,
    )  # fmt: skip


# Claims for a job's kind by its tenant's workers, and by a shared fleet's (serving every tenant).
_OWN, _SHARED = worker_claim.alias("own_claim"), worker_claim.alias("shared_claim")
_CLAIMED = {
    claims: sa.and_(
        claims.c.tenant == (job.c.tenant if claims is _OWN else sa.literal(EVERY_TENANT)),
        claims.c.queue == job.c.queue,
        claims.c.job_type == job.c.job_type,
    )
    for claims in (_OWN, _SHARED)
}


def _no_worker(conn: Connection, scope: Scope, queue: str, now: datetime, after: timedelta) -> list[Finding]:
    """QUEUED jobs whose queue and job type no worker has claimed for `after` before `now` (or ever)."""
    cutoff = sa.literal(now - after, type_=worker_claim.c.claimed_at.type)
    where = [
        *scoped(scope),
        job.c.status == Status.QUEUED.value,
        *(sa.or_(c.c.claimed_at.is_(None), c.c.claimed_at <= cutoff) for c in (_OWN, _SHARED)),
    ]
    if queue:
        where.append(job.c.queue == queue)
    query = (
        sa.select(*_COLUMNS, _OWN.c.claimed_at, _SHARED.c.claimed_at.label("shared_claimed_at"))
        .select_from(job.outerjoin(_OWN, _CLAIMED[_OWN]).outerjoin(_SHARED, _CLAIMED[_SHARED]))
        .where(*where)
        .order_by(job.c.id)
        .limit(MAX_FINDINGS)
    )
    return [
        _finding(FindingKind.NO_WORKER, _latest_claim({**r, "db_now": now})) for r in conn.execute(query).mappings()
    ]


def _latest_claim(row: dict[str, Any]) -> dict[str, Any]:
    shared = row.pop("shared_claimed_at")
    if shared is not None and (row["claimed_at"] is None or shared > row["claimed_at"]):
        row["claimed_at"] = shared
    return row
