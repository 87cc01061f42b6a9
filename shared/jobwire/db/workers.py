"""Workers in the store: ListWorkers' pages (with the leases each holds) and forgetting the
workers, queues and job types not seen for a while (retention)."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.reads import clock, page_of, scoped
from jobwire.db.tables import job, worker_claim
from jobwire.db.tables import worker as worker_table
from jobwire.domain.commands import EVERY_TENANT, Scope
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.evidence import WorkerInfo
from jobwire.domain.states import LEASED


def list_workers(
    conn: Connection, scope: Scope, queue: str, page_size: int, page_token: str, gone_after: timedelta
) -> tuple[list[WorkerInfo], str]:
    """A page of the workers that serve the tenant, its own and shared fleets' (of those serving
    `queue`, if given), by id, with the leases each holds of its jobs; live: seen within
    `gone_after` by the database clock. A token of some queues sees the workers serving any of
    them, their queues and leases of those only."""
    after = decode_worker_token(page_token)
    clauses = [worker_table.c.tenant.in_([scope.tenant, EVERY_TENANT]), worker_table.c.worker_id > after]
    if queue:
        clauses.append(_serves(queue))
    if scope.queues is not None:
        clauses.append(sa.or_(*(_serves(q) for q in sorted(scope.queues))))
    query = sa.select(worker_table).where(*clauses).order_by(worker_table.c.worker_id).limit(page_size + 1)
    rows, last = page_of([dict(r) for r in conn.execute(query).mappings()], page_size, key="worker_id")
    if not rows:
        return [], ""
    held = (
        sa.select(
            job.c.worker_id,
            sa.func.count().label("n"),
            sa.func.sum(sa.case((job.c.stalled.is_(True), 1), else_=0)).label("stalled"),
        )
        .where(
            *scoped(scope),
            job.c.worker_id.in_([r["worker_id"] for r in rows]),
            job.c.status.in_([s.value for s in LEASED]),
            job.c.worker_token.is_not(None),
        )
        .group_by(job.c.worker_id)
    )
    counts = {r.worker_id: (r.n, int(r.stalled or 0)) for r in conn.execute(held)}
    none_held = (0, 0)
    now = clock(conn)
    workers = [
        WorkerInfo(
            worker_id=r["worker_id"],
            queues=[q for q in json.loads(r["queues"]) if scope.queues is None or q in scope.queues],
            job_types=json.loads(r["job_types"]),
            last_seen_at=r["last_seen_at"],
            leases_held=counts.get(r["worker_id"], none_held)[0],
            leases_stalled=counts.get(r["worker_id"], none_held)[1],
            live=now - r["last_seen_at"] <= gone_after,
            shared_fleet=r["tenant"] == EVERY_TENANT,
        )
        for r in rows
    ]
    return workers, "" if last is None else encode_worker_token(last)


def last_claim(conn: Connection, tenant: str, worker_id: str) -> tuple[list[str], list[str]]:
    """The queues and job types a worker's row records (its last claim's); none if it has no row."""
    query = sa.select(worker_table.c.queues, worker_table.c.job_types).where(
        worker_table.c.tenant == tenant, worker_table.c.worker_id == worker_id
    )
    found = conn.execute(query).first()
    return (json.loads(found.queues), json.loads(found.job_types)) if found is not None else ([], [])


def _serves(queue: str) -> sa.ColumnElement[bool]:
    # queues is a JSON list of names; names hold no quote, so '"name"' matches one whole entry
    return worker_table.c.queues.contains(f'"{queue}"', autoescape=True)


def encode_worker_token(last_worker_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after_worker": last_worker_id}).encode()).decode().rstrip("=")


def decode_worker_token(token: str) -> str:
    """The worker id a ListWorkers page token continues after ("" for the first page)."""
    if not token:
        return ""
    if len(token) > _MAX_WORKER_TOKEN:
        raise InvalidArgument("page_token", "is not a token this server issued")
    try:
        after = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["after_worker"]
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError):
        raise InvalidArgument("page_token", "is not a token this server issued") from None
    if not isinstance(after, str) or not 0 < len(after) <= 128:
        raise InvalidArgument("page_token", "is not a token this server issued")
    return after


# worker ids are at most 128 characters, 4 bytes each, JSON-escaped at worst 6 per character
_MAX_WORKER_TOKEN = 1100


def purge_workers(conn: Connection, older_than: timedelta) -> int:
    """Forget workers not seen for `older_than` (ListWorkers would list every restart forever),
    and the queues and job types nobody claimed for as long (ix_worker_claim_at): a kind of job
    once served and never again must not stay a row forever. How many rows went."""
    cutoff = clock(conn) - older_than
    seen = sa.literal(cutoff, type_=worker_table.c.last_seen_at.type)
    claimed = sa.literal(cutoff, type_=worker_claim.c.claimed_at.type)
    workers = conn.execute(sa.delete(worker_table).where(worker_table.c.last_seen_at < seen)).rowcount
    kinds = conn.execute(sa.delete(worker_claim).where(worker_claim.c.claimed_at < claimed)).rowcount
    return int(workers) + int(kinds)
