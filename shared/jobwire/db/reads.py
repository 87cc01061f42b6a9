"""Reads: one job with its queue position, pages of jobs, a job's events, workers.

Queries built per call (filters, pages) go through SQLAlchemy; state changes do not come
here (jobwire.db.changes).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.engine import db_now
from jobwire.db.sql import ARTIFACT_COLUMNS, BLOBS
from jobwire.db.tables import artifact, job, job_event
from jobwire.db.tables import worker as worker_table
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.states import LEASED, Status

Row = dict[str, Any]
_JOINED = job.outerjoin(artifact, artifact.c.job_id == job.c.id)
_ROW_COLS = [column for column in job.c if column.name not in BLOBS] + [artifact.c[n] for n in ARTIFACT_COLUMNS]


def select_jobs(*where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """Job rows (without blobs) with their artifact and the database clock as `db_now`."""
    return sa.select(*_ROW_COLS, db_now().label("db_now")).select_from(_JOINED).where(*where)


def load(conn: Connection, *where: sa.ColumnElement[bool]) -> Row | None:
    found = conn.execute(select_jobs(*where)).mappings().first()
    return dict(found) if found is not None else None


_BY_JOB_NO = select_jobs(job.c.tenant == sa.bindparam("w_tenant"), job.c.job_no == sa.bindparam("w_job_no"))


def load_job(conn: Connection, tenant: str, job_no: str) -> Row | None:
    """One job by number within a tenant, as `load` reads it."""
    found = conn.execute(_BY_JOB_NO, {"w_tenant": tenant, "w_job_no": job_no}).mappings().first()
    return dict(found) if found is not None else None


def clock(conn: Connection) -> datetime:
    """The database clock, read in a statement of its own: for the cold paths (inspect, retention)."""
    now = conn.execute(sa.select(db_now())).scalar_one()
    assert isinstance(now, datetime)
    return now


def get(conn: Connection, tenant: str, job_no: str) -> tuple[Row, int | None] | None:
    row = load_job(conn, tenant, job_no)
    if row is None:
        return None
    return row, queue_position(conn, row)


def queue_position(conn: Connection, row: Row) -> int | None:
    """Runnable jobs ahead of a QUEUED job: a range count on the claim index."""
    if row["status"] != Status.QUEUED.value:
        return None
    ahead = sa.or_(
        job.c.priority > row["priority"],
        sa.and_(job.c.priority == row["priority"], job.c.id < row["id"]),
    )
    query = (
        sa.select(sa.func.count())
        .select_from(job)
        .where(
            job.c.tenant == row["tenant"],
            job.c.queue == row["queue"],
            job.c.status == Status.QUEUED.value,
            ahead,
            job.c.run_after <= row["db_now"],
        )
    )
    return int(conn.execute(query).scalar_one())


def queue_positions(conn: Connection, rows: Sequence[Row]) -> dict[int, int | None]:
    """`queue_position` of every row, in one query per queue instead of a count per job.

    The queue's runnable jobs up to the last of `rows` in claim order are numbered by a
    window function on the claim index; each QUEUED row takes its number. A row that is
    not runnable yet (run_after later) is not numbered there and is counted alone.
    """
    positions: dict[int, int | None] = {row["id"]: None for row in rows}
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if row["status"] == Status.QUEUED.value:
            groups.setdefault((row["tenant"], row["queue"]), []).append(row)
    for (tenant, queue), members in groups.items():
        last = max(members, key=lambda m: (-m["priority"], m["id"]))
        upto = sa.or_(
            job.c.priority > last["priority"], sa.and_(job.c.priority == last["priority"], job.c.id <= last["id"])
        )
        number = sa.func.row_number().over(order_by=(job.c.priority.desc(), job.c.id)) - 1
        ranked = (
            sa.select(job.c.id, number.label("position"))
            .where(
                job.c.tenant == tenant,
                job.c.queue == queue,
                job.c.status == Status.QUEUED.value,
                job.c.run_after <= last["db_now"],
                upto,
            )
            .subquery()
        )
        wanted = [m["id"] for m in members]
        found = conn.execute(sa.select(ranked.c.id, ranked.c.position).where(ranked.c.id.in_(wanted)))
        positions.update((int(i), int(p)) for i, p in found)
        for member in members:
            if positions[member["id"]] is None:
                positions[member["id"]] = queue_position(conn, member)
    return positions


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


@dataclass(frozen=True, kw_only=True)
class JobFilter:
    tenant: str
    owner: str = ""
    statuses: Sequence[Status] = ()
    job_type: str = ""


def list_jobs(conn: Connection, where: JobFilter, page_size: int, page_token: str) -> tuple[list[Row], str]:
    """Newest first; the token is the last id seen, so pages stay stable under inserts."""
    before = decode_page_token(page_token)
    clauses: list[sa.ColumnElement[bool]] = [job.c.tenant == where.tenant]
    if where.owner:
        clauses.append(job.c.owner == where.owner)
    if where.statuses:
        clauses.append(job.c.status.in_([s.value for s in where.statuses]))
    if where.job_type:
        clauses.append(job.c.job_type == where.job_type)
    if before is not None:
        clauses.append(job.c.id < before)
    query = select_jobs(*clauses).order_by(job.c.id.desc()).limit(page_size + 1)
    rows = [dict(r) for r in conn.execute(query).mappings()]
    more = len(rows) > page_size
    rows = rows[:page_size]
    return rows, encode_page_token(rows[-1]["id"]) if more and rows else ""


def list_events(
    conn: Connection, tenant: str, job_no: str, page_size: int, page_token: str
) -> tuple[list[Row], str] | None:
    """A job's evidence trail in order; None for an unknown job."""
    row = load_job(conn, tenant, job_no)
    if row is None:
        return None
    after = decode_page_token(page_token) or 0
    query = (
        sa.select(job_event)
        .where(job_event.c.job_id == row["id"], job_event.c.id > after)
        .order_by(job_event.c.id)
        .limit(page_size + 1)
    )
    events = [dict(r) for r in conn.execute(query).mappings()]
    more = len(events) > page_size
    events = events[:page_size]
    return events, encode_page_token(events[-1]["id"]) if more and events else ""


def list_workers(conn: Connection, tenant: str, queue: str) -> list[dict[str, Any]]:
    held = (
        sa.select(job.c.worker_id, sa.func.count().label("n"))
        .where(job.c.tenant == tenant, job.c.status.in_([s.value for s in LEASED]), job.c.worker_token.is_not(None))
        .group_by(job.c.worker_id)
    )
    counts = {r.worker_id: r.n for r in conn.execute(held)}
    query = sa.select(worker_table).where(worker_table.c.tenant == tenant).order_by(worker_table.c.worker_id)
    out = []
    for r in conn.execute(query).mappings():
        queues = json.loads(r["queues"])
        if queue and queue not in queues:
            continue
        out.append(
            {
                **r,
                "queues": queues,
                "job_types": json.loads(r["job_types"]),
                "leases_held": counts.get(r["worker_id"], 0),
            }
        )
    return out
