"""Schedules: their rows, the rounds' scan for due ones, the guarded advance, and when loops ran.

A firing's job goes through the normal submit (its idempotency key makes it once per fire
time); this module only keeps the schedule row. Every replica's round may find the same
schedule due: `advance` moves next_fire_at only WHERE it still holds the value the round
read, so one replica advances it and the others change nothing.

The scan takes every tenant's oldest due schedule before anyone's second (a window
function: SQLite 3.25+, MariaDB 10.2+, MySQL 8), so one tenant's thousands cannot hold
another's one back for more than a batch. `mark` keeps the loops' runs
(jobwire.domain.schedules.Run) that say whether a late fire time was missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from jobwire.db.reads import decode_page_token, encode_page_token, page_of, scoped
from jobwire.db.tables import job, schedule, schedule_run, schedule_tenant
from jobwire.db.wire import Wire
from jobwire.db.writer import RetryTransaction
from jobwire.domain.commands import Scope
from jobwire.domain.errors import ScheduleExists, TooManySchedules
from jobwire.domain.schedules import (
    RUN_HISTORY,
    Advance,
    Backlog,
    CatchUp,
    Due,
    Overlap,
    Run,
    ScheduleRecord,
    Timing,
    continues,
)
from jobwire.domain.states import TERMINAL

Row = dict[str, Any]


def create(conn: Connection, new: ScheduleRecord, limit: int) -> None:
    """Keep `new` unless its tenant has `limit` schedules already: exactly, under concurrent creates."""
    _lock_tenant(conn, new.tenant)
    held = conn.execute(sa.select(sa.func.count()).select_from(schedule).where(schedule.c.tenant == new.tenant))
    if held.scalar_one() >= limit:
        raise TooManySchedules(limit)
    try:
        conn.execute(sa.insert(schedule).values(**_values(new)))
    except IntegrityError:
        raise ScheduleExists() from None


def _lock_tenant(conn: Connection, tenant: str) -> None:
    """Hold the tenant's schedule_tenant row (made by its first create) until the transaction ends."""
    locked = sa.select(schedule_tenant.c.tenant).where(schedule_tenant.c.tenant == tenant).with_for_update()
    if conn.execute(locked).first() is not None:
        return
    try:
        conn.execute(sa.insert(schedule_tenant).values(tenant=tenant))  # held by this transaction from now on
    except IntegrityError:
        raise RetryTransaction() from None  # another create made it first: lock it on the rerun


def get(conn: Connection, scope: Scope, schedule_id: str) -> ScheduleRecord | None:
    row = conn.execute(sa.select(schedule).where(*_named(scope, schedule_id))).mappings().first()
    return None if row is None else from_row(dict(row))


def list_page(conn: Connection, scope: Scope, page_size: int, page_token: str) -> tuple[list[ScheduleRecord], str]:
    """Oldest first by row id; the token is the last id seen (as ListJobs pages)."""
    after = decode_page_token(page_token) or 0
    query = (
        sa.select(schedule)
        .where(*scoped(scope, schedule), schedule.c.id > after)
        .order_by(schedule.c.id)
        .limit(page_size + 1)
    )
    rows, last = page_of([dict(r) for r in conn.execute(query).mappings()], page_size)
    return [from_row(r) for r in rows], "" if last is None else encode_page_token(last)


def set_paused(conn: Connection, scope: Scope, schedule_id: str, next_fire_at: datetime | None) -> bool:
    """Pause (next_fire_at None) or resume at `next_fire_at`; False for an unknown schedule."""
    values = {"paused": next_fire_at is None, "next_fire_at": next_fire_at}
    return bool(conn.execute(sa.update(schedule).where(*_named(scope, schedule_id)).values(**values)).rowcount)


def delete(conn: Connection, scope: Scope, schedule_id: str) -> bool:
    return bool(conn.execute(sa.delete(schedule).where(*_named(scope, schedule_id))).rowcount)


def due(conn: Connection, now: datetime, limit: int) -> Backlog:
    """Up to `limit` schedules whose next fire time has come, with their previous job's state:
    each tenant's oldest first, then each one's second, and so on."""
    due_now = sa.and_(schedule.c.next_fire_at <= now, schedule.c.paused == sa.false())
    ranked = (
        sa.select(
            schedule.c.id,
            schedule.c.next_fire_at,
            sa.func.row_number()
            .over(partition_by=schedule.c.tenant, order_by=(schedule.c.next_fire_at, schedule.c.id))
            .label("turn"),
        )
        .where(due_now)
        .subquery("ranked")
    )
    # The batch is picked from the ids alone; only its rows are joined and read whole (a sort
    # of every due row with its template would spill to disk).
    picked = (
        sa.select(ranked.c.id, ranked.c.turn)
        .order_by(ranked.c.turn, ranked.c.next_fire_at, ranked.c.id)
        .limit(limit)
        .subquery("picked")
    )
    # An aggregate, not MIN() OVER (): MariaDB computes that one row by row over every due row.
    every_due = schedule.alias("every_due")
    oldest = (
        sa.select(sa.func.min(every_due.c.next_fire_at))
        .where(every_due.c.next_fire_at <= now, every_due.c.paused == sa.false())
        .scalar_subquery()
    )
    previous = job.alias("previous")
    query = (
        sa.select(schedule, previous.c.status.label("previous_status"), oldest.label("oldest"))
        .select_from(
            picked.join(schedule, schedule.c.id == picked.c.id).outerjoin(
                previous, sa.and_(previous.c.tenant == schedule.c.tenant, previous.c.job_no == schedule.c.last_job_no)
            )
        )
        .order_by(picked.c.turn, schedule.c.next_fire_at, schedule.c.id)
    )
    rows = [dict(r) for r in conn.execute(query).mappings()]
    return Backlog(due=[_due(r) for r in rows], oldest=rows[0]["oldest"] if rows else None)


_FINISHED = frozenset(s.value for s in TERMINAL)


def _due(row: Row) -> Due:
    previous = row["previous_status"]
    return Due(from_row(row), previous_unfinished=previous is not None and previous not in _FINISHED)


async def advance(wire: Wire, moves: Sequence[Advance]) -> list[bool]:
    """Move each schedule on from its `due_at`, recording its firing or skip, and commit; False for
    one another round (or a pause, resume or delete) changed first."""
    counts = await wire.run([(wire.sql.advance_schedule, _moved(move)) for move in moves])
    await wire.commit()
    return [bool(count) for count in counts]


def _moved(move: Advance) -> dict[str, Any]:
    fired_at, job_no = move.fired or (None, None)
    one = move.schedule
    return {
        "next_fire_at": move.next_fire_at, "fired_at": fired_at, "job_no": job_no, "skipped": int(move.skipped),
        "missed": int(move.missed),
        "tenant": one.tenant, "schedule_id": one.schedule_id, "due_at": move.due_at,
    }  # fmt: skip


def mark(conn: Connection, now: datetime, gap: timedelta) -> None:
    """A loop ran at `now`: extend the latest run, or after a silence past `gap` begin a new one
    (and forget runs older than RUN_HISTORY). Replicas racing may begin two: both hold."""
    latest = conn.execute(sa.select(schedule_run).order_by(schedule_run.c.id.desc()).limit(1)).mappings().first()
    if latest is not None and continues(latest["last_at"], now, gap):
        extend = sa.update(schedule_run).where(schedule_run.c.id == latest["id"], schedule_run.c.last_at < now)
        conn.execute(extend.values(last_at=now))
        return
    conn.execute(sa.insert(schedule_run).values(started_at=now, last_at=now))
    conn.execute(sa.delete(schedule_run).where(schedule_run.c.last_at < now - RUN_HISTORY))


def runs(conn: Connection, since: datetime) -> list[Run]:
    """The loops' runs that went on at or after `since`."""
    query = sa.select(schedule_run).where(schedule_run.c.last_at >= since).order_by(schedule_run.c.id)
    return [Run(started_at=r["started_at"], last_at=r["last_at"]) for r in conn.execute(query).mappings()]


def from_row(row: Row) -> ScheduleRecord:
    every = row["every_s"]
    return ScheduleRecord(
        tenant=row["tenant"],
        schedule_id=row["schedule_id"],
        queue=row["queue"],
        timing=Timing(
            cron=row["cron"],
            every=None if every is None else timedelta(seconds=every),
            time_zone=row["time_zone"],
            anchor=row["created_at"],
        ),
        template=bytes(row["template"]),
        overlap=Overlap(row["overlap"]),
        catch_up=CatchUp(row["catch_up"]),
        paused=bool(row["paused"]),
        next_fire_at=row["next_fire_at"],
        last_fire_at=row["last_fire_at"],
        last_job_no=row["last_job_no"],
        skipped_firings=int(row["skipped_firings"]),
        missed_firings=int(row["missed_firings"]),
    )


def _values(one: ScheduleRecord) -> Row:
    every = one.timing.every
    return {
        "tenant": one.tenant, "schedule_id": one.schedule_id, "queue": one.queue, "cron": one.timing.cron,
        "every_s": None if every is None else every.total_seconds(), "time_zone": one.timing.time_zone,
        "template": one.template, "overlap": one.overlap.value, "catch_up": one.catch_up.value,
        "paused": one.paused, "next_fire_at": one.next_fire_at, "created_at": one.created_at,
    }  # fmt: skip


def _named(scope: Scope, schedule_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    """The schedule `schedule_id` if `scope` sees it: its tenant's, of a queue its token may use."""
    return (*scoped(scope, schedule), schedule.c.schedule_id == schedule_id)
