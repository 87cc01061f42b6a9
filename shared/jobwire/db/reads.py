"""Reads: one job, page tokens, a job's events, kept results, the census.

Pages of ListJobs are jobwire.db.job_pages; workers are jobwire.db.workers; where a QUEUED
job stands, jobwire.db.standing.

Queries built per call (filters, pages) go through SQLAlchemy; state changes do not come
here (jobwire.db.changes).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.engine import transaction_time
from jobwire.db.rows import ARTIFACT_COLUMNS
from jobwire.db.sql import BLOBS
from jobwire.db.tables import artifact, job, job_event, worker_claim
from jobwire.db.tables import worker as worker_table
from jobwire.domain.census import Census, JobCount
from jobwire.domain.commands import EVERY_TENANT, Scope
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.evidence import JobEvent
from jobwire.domain.lease import LeaseState
from jobwire.domain.states import LEASED, Status

Row = dict[str, Any]
_JOINED = job.outerjoin(artifact, artifact.c.job_id == job.c.id)
_ROW_COLS = [column for column in job.c if column.name not in BLOBS] + [artifact.c[n] for n in ARTIFACT_COLUMNS]


def select_jobs(*where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """Job rows (without blobs) with their artifact: read them with `job_rows`."""
    return sa.select(*_ROW_COLS).select_from(_JOINED).where(*where)


def job_rows(conn: Connection, query: sa.Select[Any], params: dict[str, Any] | None = None) -> list[Row]:
    """The rows of a `select_jobs` query, each with the time of the read as `db_now` (where a
    QUEUED job stands, how long one has made no progress: jobwire.db.standing, rows)."""
    now = clock(conn)
    return [{**r, "db_now": now} for r in conn.execute(query, params or {}).mappings()]


def load(conn: Connection, *where: sa.ColumnElement[bool]) -> Row | None:
    found = job_rows(conn, select_jobs(*where).limit(1))
    return found[0] if found else None


def scoped(scope: Scope, table: sa.Table = job) -> list[sa.ColumnElement[bool]]:
    """The WHERE of the rows `scope` may see: its tenant's, in its queues when the token names some."""
    where = [table.c.tenant == scope.tenant]
    if scope.queues is not None:
        where.append(table.c.queue.in_(sorted(scope.queues)))
    return where


_BY_JOB_NO = select_jobs(job.c.tenant == sa.bindparam("w_tenant"), job.c.job_no == sa.bindparam("w_job_no"))


def load_job(conn: Connection, scope: Scope, job_no: str) -> Row | None:
    """One job by number as `load` reads it; None unless `scope` sees it (another tenant's, a
    queue the token may not use: as a job that does not exist)."""
    found = job_rows(conn, _BY_JOB_NO, {"w_tenant": scope.tenant, "w_job_no": job_no})
    return found[0] if found and scope.sees(found[0]["tenant"], found[0]["queue"]) else None


def clock(conn: Connection) -> datetime:
    """The time of this read or write: the store's clock as the transaction began (jobwire.db.clock)."""
    return transaction_time(conn)


def now_value(conn: Connection) -> sa.BindParameter[datetime]:
    """The time of this read or write, bound into a query (`deadline < now_value(conn)`)."""
    return sa.literal(clock(conn), type_=job.c.run_after.type)


def visible_jobs(conn: Connection, scope: Scope, job_nos: Sequence[str]) -> set[str]:
    """Those of `job_nos` that `scope` sees (uq_job_tenant_job_no)."""
    query = sa.select(job.c.job_no).where(job.c.job_no.in_(list(job_nos)), *scoped(scope))
    return set(conn.execute(query).scalars())


# Pages are bounded by size as well as by count: 120 jobs with 32 labels of the longest
# kind each, or 500 events with long details, made replies over the 4 MiB message limit,
# which the caller saw as an error after the read. A row's size is estimated from its stored text, which its
# message never exceeds by more than ROW_OVERHEAD_BYTES (rendered status text, framing).
PAGE_BYTES = 3 << 20
ROW_OVERHEAD_BYTES = 2048


def row_bytes(row: Row) -> int:
    size = ROW_OVERHEAD_BYTES
    for value in row.values():
        if isinstance(value, str):
            size += len(value) if value.isascii() else len(value.encode())
        elif isinstance(value, bytes | bytearray):
            size += len(value)
        else:
            size += 10
    return size


def fitpage_of(rows: Sequence[Row], budget: int = PAGE_BYTES) -> list[Row]:
    """The first of `rows` that fit `budget` together; always the first one."""
    out: list[Row] = []
    used = 0
    for row in rows:
        used += row_bytes(row)
        if out and used > budget:
            break
        out.append(row)
    return out


def page_of(rows: list[Row], page_size: int, key: str = "id") -> tuple[list[Row], Any]:
    """(the rows of this page, the key to continue after or None when this is the last page)."""
    page = fitpage_of(rows[:page_size])
    more = len(rows) > len(page)
    return page, (page[-1][key] if more and page else None)


def encode_page_token(last_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": last_id}).encode()).decode().rstrip("=")


# A token this server issues is {"after": <BIGINT>}: under 40 characters encoded.
_MAX_PAGE_TOKEN = 64


def decode_page_token(token: str) -> int | None:
    if not token:
        return None
    # The length bound comes first: deeply nested JSON would otherwise recurse in the parser.
    if len(token) > _MAX_PAGE_TOKEN:
        raise InvalidArgument("page_token", "is not a token this server issued")
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        after = raw["after"]
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError):
        raise InvalidArgument("page_token", "is not a token this server issued") from None
    # bool is an int to Python; ids are BIGINT: anything else is not a token this server issued.
    if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < 2**63:
        raise InvalidArgument("page_token", "is not a token this server issued")
    return after


def checkpoint(conn: Connection, scope: Scope, job_no: str) -> Row | None:
    """A job's latest checkpoint (`checkpoint`: its bytes, or None when none was saved); None
    for a job `scope` does not see."""
    query = sa.select(job.c.tenant, job.c.queue, job.c.checkpoint).where(
        job.c.tenant == scope.tenant, job.c.job_no == job_no
    )
    found = conn.execute(query).mappings().first()
    return dict(found) if found is not None and scope.sees(found["tenant"], found["queue"]) else None


def list_events(
    conn: Connection, scope: Scope, job_no: str, page_size: int, page_token: str
) -> tuple[list[JobEvent], str, str] | None:
    """A job's evidence trail in order, the next page's token and the job's title; None for an unknown job."""
    row = load_job(conn, scope, job_no)
    if row is None:
        return None
    after = decode_page_token(page_token) or 0
    query = (
        sa.select(job_event)
        .where(job_event.c.job_id == row["id"], job_event.c.id > after)
        .order_by(job_event.c.id)
        .limit(page_size + 1)
    )
    events, last = page_of([dict(r) for r in conn.execute(query).mappings()], page_size)
    return [_event(e) for e in events], "" if last is None else encode_page_token(last), row["title"]


def _event(row: Row) -> JobEvent:
    def status(value: str | None) -> Status | None:
        return Status(value) if value else None

    return JobEvent(
        version=row["version"], kind=row["kind"], from_status=status(row["from_status"]),
        to_status=status(row["to_status"]), stage=row["stage"], processed_units=row["processed_units"],
        total_units=row["total_units"], worker_id=row["worker_id"], attempt=row["attempt"], detail=row["detail"],
        created_at=row["created_at"], key=row["entry_key"], size_bytes=row["size_bytes"], sha256=row["sha256"],
    )  # fmt: skip


def census(conn: Connection, now: datetime, live_after: timedelta) -> Census:
    """Jobs by tenant, queue and status with the runnable ones, in one GROUP BY (QUEUED ones by job
    type too); workers seen since `live_after`, and the kinds of job they claimed for since then.

    The metrics' gauges (jobwire.runtime.housekeeping reads this once a round): the GROUP
    BY walks ix_job_claim (tenant, queue, status) whole, which is why no scrape runs it.
    Only QUEUED rows are told apart by job type (NO_WORKER is about a queued job's kind), so
    terminal jobs of many types add no groups.
    """
    at = sa.literal(now, type_=job.c.run_after.type)
    queued = job.c.status == Status.QUEUED.value
    runnable = sa.and_(queued, job.c.waiting_on == 0, job.c.run_after <= at)
    kind = sa.case((queued, job.c.job_type), else_=sa.literal("")).label("kind")
    jobs = sa.select(
        job.c.tenant, job.c.queue, job.c.status, kind, sa.func.count().label("jobs"),
        sa.func.sum(sa.case((runnable, 1), else_=0)).label("runnable"),
        sa.func.min(sa.case((runnable, job.c.run_after))).label("oldest"),
    ).group_by(job.c.tenant, job.c.queue, job.c.status, kind)  # fmt: skip
    seen_since = sa.literal(now - live_after, type_=worker_table.c.last_seen_at.type)
    workers = (
        sa.select(worker_table.c.tenant, sa.func.count().label("n"))
        .where(worker_table.c.last_seen_at >= seen_since)
        .group_by(worker_table.c.tenant)
    )
    # as jobwire.db.standing reads it for one queue: a claim within the window serves the kind
    claimed_since = sa.literal(now - live_after, type_=worker_claim.c.claimed_at.type)
    served = sa.select(worker_claim.c.tenant, worker_claim.c.queue, worker_claim.c.job_type).where(
        worker_claim.c.claimed_at > claimed_since
    )
    return Census(
        counts=[_job_count(r, now) for r in conn.execute(jobs)],
        live_workers={r.tenant: int(r.n) for r in conn.execute(workers)},
        served=frozenset((r.tenant, r.queue, r.job_type) for r in conn.execute(served)),
    )


def _job_count(r: Any, now: datetime) -> JobCount:
    oldest = None if r.oldest is None else max(0.0, (now - r.oldest).total_seconds())
    return JobCount(
        tenant=r.tenant,
        queue=r.queue,
        status=r.status,
        jobs=int(r.jobs),
        runnable=int(r.runnable or 0),
        oldest_runnable_s=oldest,
        job_type=r.kind,
    )


@dataclass(frozen=True, kw_only=True)
class KeptRow:
    """A job's status and, when the server keeps its result, the artifact's bytes or their key."""

    status: str
    content_type: str
    inline: bytes | None
    stored_key: str | None


def kept_result(conn: Connection, scope: Scope, job_no: str) -> KeptRow | None:
    query = (
        sa.select(job.c.status, artifact.c.content_type, artifact.c.inline_data, artifact.c.stored_key)
        .select_from(_JOINED)
        .where(*scoped(scope), job.c.job_no == job_no)
    )
    found = conn.execute(query).mappings().first()
    if found is None:
        return None
    return KeptRow(
        status=found["status"], content_type=found["content_type"] or "", inline=found["inline_data"],
        stored_key=found["stored_key"],
    )  # fmt: skip


def payload(conn: Connection, scope: Scope, job_no: str, max_bytes: int) -> tuple[bytes, int] | None:
    """The first `max_bytes` of a job's payload and its whole size; None for a job `scope` does not see.
    Cut by the database, so a 1 MiB payload read for a preview crosses the wire as the preview."""
    query = sa.select(
        sa.func.substr(job.c.payload, 1, max_bytes).label("head"), sa.func.length(job.c.payload).label("size")
    ).where(*scoped(scope), job.c.job_no == job_no)
    found = conn.execute(query).first()
    return None if found is None else (bytes(found.head or b""), int(found.size or 0))


def lease_held(conn: Connection, tenant: str, job_no: str, token: str) -> bool:
    """True while `token` is the current lease of the job `job_no` of `tenant` (an upload is
    fenced on it); a shared fleet's (tenant "*"): of the tenant whose job of that number it leases."""
    where = [job.c.job_no == job_no, job.c.worker_token == token]
    if tenant != EVERY_TENANT:
        where.append(job.c.tenant == tenant)
    found = conn.execute(sa.select(job.c.status).where(*where)).first()
    return found is not None and Status(found.status) in LEASED


def lease_state(conn: Connection, tenant: str, job_no: str, token: str) -> LeaseState:
    """What a heartbeat naming `token` would be told of the lease, renewing nothing: held (OK,
    CANCEL_REQUESTED), revoked for time (TIMED_OUT), or else LOST; a shared fleet's (tenant "*"):
    of the tenant whose job of that number it is or was a lease of."""
    where = [job.c.job_no == job_no]
    if tenant != EVERY_TENANT:
        where.append(job.c.tenant == tenant)
    columns = (job.c.status, job.c.worker_token, job.c.ended_token, job.c.ended_kind)
    for status, held, ended, ended_kind in conn.execute(sa.select(*columns).where(*where)):
        if held == token and Status(status) in LEASED:
            return LeaseState.CANCEL_REQUESTED if status == Status.CANCEL_REQUESTED.value else LeaseState.OK
        if ended == token and ended_kind == LeaseState.TIMED_OUT.value:
            return LeaseState.TIMED_OUT
    return LeaseState.LOST


def stored_keys(conn: Connection, keys: Sequence[str]) -> set[str]:
    """Those of `keys` some artifact row names: the uploads a Complete kept."""
    if not keys:
        return set()
    query = sa.select(artifact.c.stored_key).where(artifact.c.stored_key.in_(list(keys)))
    return {r[0] for r in conn.execute(query)}
