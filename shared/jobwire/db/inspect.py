"""Operator findings: stalled leases, and the two invariants that must stay empty."""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.engine import db_now
from jobwire.db.reads import Row, clock
from jobwire.db.sql import BLOBS
from jobwire.db.tables import job
from jobwire.domain.states import LEASED, TERMINAL

MAX_FINDINGS = 1000
_COLUMNS = [
    *(column for column in job.c if column.name not in BLOBS),
    job.c.checkpoint.is_not(None).label("has_checkpoint"),
]


class FindingKind(StrEnum):
    STALLED = "STALLED"
    RUNNING_WITHOUT_LEASE = "RUNNING_WITHOUT_LEASE"
    TERMINAL_WITH_TOKEN = "TERMINAL_WITH_TOKEN"


def _conditions(kind: FindingKind, stalled_after: timedelta, now: sa.ColumnElement) -> list[sa.ColumnElement[bool]]:  # type: ignore[type-arg]
    leased = job.c.status.in_([s.value for s in LEASED])
    if kind is FindingKind.STALLED:
        return [leased, job.c.worker_token.is_not(None), job.c.lease_expires_at < now]
    if kind is FindingKind.RUNNING_WITHOUT_LEASE:
        return [leased, sa.or_(job.c.worker_token.is_(None), job.c.lease_expires_at.is_(None))]
    return [job.c.status.in_([s.value for s in TERMINAL]), job.c.worker_token.is_not(None)]


def findings(
    conn: Connection,
    tenant: str,
    *,
    stalled_after: timedelta = timedelta(0),
    queue: str = "",
    kinds: Collection[FindingKind] = (),
) -> list[tuple[FindingKind, Row]]:
    """Each finding with its job row; a lease counts as stalled `stalled_after` past expiry."""
    now = clock(conn)
    cutoff = sa.literal(now - stalled_after, type_=job.c.lease_expires_at.type)
    out: list[tuple[FindingKind, Row]] = []
    for kind in kinds or list(FindingKind):
        where = [job.c.tenant == tenant, *_conditions(kind, stalled_after, cutoff)]
        if queue:
            where.append(job.c.queue == queue)
        # Without the blobs (a payload of up to 1 MiB each, the checkpoint): a finding shows
        # only whether a checkpoint exists.
        query = sa.select(*_COLUMNS, db_now().label("db_now")).where(*where).order_by(job.c.id).limit(MAX_FINDINGS)
        out += [(kind, dict(r)) for r in conn.execute(query).mappings()]
    return out
