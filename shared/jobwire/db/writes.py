"""The one shape every state change takes: read, decide, guarded UPDATE, event.

A change reads the row together with the database clock, lets the domain decide, then
writes with an UPDATE guarded by the version it read (and the status, and for worker
calls the token and epoch). Zero matched rows means someone else won: the transaction
is retried whole. The event row that records the change commits with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection

from jobwire.db.engine import RetryTransaction, db_now
from jobwire.db.rows import snapshot
from jobwire.db.tables import artifact, job, job_event
from jobwire.domain.errors import InvalidTransition
from jobwire.domain.states import Action, Status, allowed

Row = dict[str, Any]

# A queued job shows no stage; the next attempt starts again at the first one.
UNSTAGED: Mapping[str, Any] = {"stage": None, "stage_index": 0, "processed_units": 0, "total_units": None}

_JOINED = job.outerjoin(artifact, artifact.c.job_id == job.c.id)
_ARTIFACT_COLS = [artifact.c[name] for name in ("uri", "size_bytes", "sha256", "content_type", "summary")]
# Row reads leave out the blobs (a payload of up to 1 MiB, the checkpoint, internal detail):
# no decision after Submit needs them, and reading them back on every progress report
# would cost more than the report. Claim and the reaper select them where they need them.
BLOBS = frozenset({"payload", "checkpoint", "error_detail"})
_ROW_COLS = [column for column in job.c if column.name not in BLOBS]


def select_jobs(*where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """Job rows (without blobs) with their artifact and the database clock as `db_now`."""
    return sa.select(*_ROW_COLS, *_ARTIFACT_COLS, db_now().label("db_now")).select_from(_JOINED).where(*where)


def load(conn: Connection, *where: sa.ColumnElement[bool]) -> Row | None:
    found = conn.execute(select_jobs(*where)).mappings().first()
    return dict(found) if found is not None else None


# The hot statements are built once with bind parameters: building SQLAlchemy statements
# per call cost more CPU than the database spent running them (bench/throughput.py).
_BY_JOB_NO = select_jobs(job.c.tenant == sa.bindparam("w_tenant"), job.c.job_no == sa.bindparam("w_job_no"))
_GUARDED = sa.update(job).where(
    job.c.id == sa.bindparam("g_id"),
    job.c.version == sa.bindparam("g_version"),
    job.c.status == sa.bindparam("g_status"),
)
_GUARDED_TOKEN = _GUARDED.where(
    job.c.worker_token == sa.bindparam("g_token"), job.c.lease_epoch == sa.bindparam("g_epoch")
)
INSERT_EVENT = sa.insert(job_event)


def load_job(conn: Connection, tenant: str, job_no: str) -> Row | None:
    """One job by number within a tenant, as `load` reads it."""
    found = conn.execute(_BY_JOB_NO, {"w_tenant": tenant, "w_job_no": job_no}).mappings().first()
    return dict(found) if found is not None else None


def clock(conn: Connection) -> datetime:
    now = conn.execute(sa.select(db_now())).scalar_one()
    assert isinstance(now, datetime)
    return now


def apply(
    conn: Connection,
    row: Row,
    changes: Mapping[str, Any],
    *,
    action: Action,
    kind: str,
    now: datetime,
    token_guard: bool = False,
    detail: str | None = None,
    guards: Sequence[sa.ColumnElement[bool]] = (),
) -> Row:
    """Write `changes` if the row is still as read; record the visible event; return the new row.

    `guards` add conditions on columns that change without a version (a heartbeat's lease).
    """
    before, after = Status(row["status"]), Status(changes.get("status", row["status"]))
    if not allowed(action, before, after):
        # The transition table (jobwire.domain.states) is the authority for every write.
        raise InvalidTransition(f"{action.value} cannot take a {before.value} job to {after.value}")
    values = {**changes, "version": row["version"] + 1, "updated_at": now}
    update_guarded(conn, row, values, token_guard=token_guard, guards=guards)
    new = {**row, **values}
    record_event(conn, new, kind=kind, from_status=row["status"], now=now, detail=detail)
    return new


def update_guarded(
    conn: Connection,
    row: Row,
    values: Mapping[str, Any],
    *,
    token_guard: bool = False,
    guards: Sequence[sa.ColumnElement[bool]] = (),
) -> None:
    """UPDATE the row to `values` only if its id, version and status (and token) are as read."""
    stmt = (_GUARDED_TOKEN if token_guard else _GUARDED).where(*guards)
    params = {**values, "g_id": row["id"], "g_version": row["version"], "g_status": row["status"]}
    if token_guard:
        params.update(g_token=row["worker_token"], g_epoch=row["lease_epoch"])
    # No .values(): the SET clause is every column named in `params` that is not a g_ guard.
    if conn.execute(stmt, params).rowcount != 1:
        raise RetryTransaction()


def record_event(
    conn: Connection,
    row: Mapping[str, Any],
    *,
    kind: str,
    now: datetime,
    from_status: str | None,
    visible: bool = True,
    detail: str | None = None,
    worker_id: str | None = None,
) -> None:
    conn.execute(INSERT_EVENT, event_values(row, kind, now, from_status, visible, detail, worker_id))


def event_values(
    row: Mapping[str, Any],
    kind: str,
    now: datetime,
    from_status: str | None,
    visible: bool = True,
    detail: str | None = None,
    worker_id: str | None = None,
) -> dict[str, Any]:
    return {
        "job_id": row["id"],
        "tenant": row["tenant"],
        "job_no": row["job_no"],
        "version": row["version"],
        "kind": kind,
        "visible": visible,
        "from_status": from_status,
        "to_status": row["status"],
        "stage": row["stage"],
        "processed_units": row["processed_units"],
        "total_units": row["total_units"],
        "worker_id": worker_id or row.get("worker_id"),
        "attempt": row["attempt"],
        "detail": detail,
        "snapshot": snapshot(row) if visible else None,
        "created_at": now,
    }


def upsert(conn: Connection, table: sa.Table, values: Mapping[str, Any], update: Mapping[str, Any]) -> None:
    """INSERT `values`, or apply `update` when the primary key exists (both dialects)."""
    if conn.dialect.name == "sqlite":
        lite = sqlite_dialect.insert(table).values(**values)
        keys = [c.name for c in table.primary_key.columns]
        conn.execute(lite.on_conflict_do_update(index_elements=keys, set_=dict(update)))
    else:
        ins = mysql_dialect.insert(table).values(**values)
        conn.execute(ins.on_duplicate_key_update(dict(update)))
