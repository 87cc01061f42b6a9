"""Schedules: their rows, the rounds' scan for due ones, and the guarded advance.

A firing's job goes through the normal submit (its idempotency key makes it once per fire
time); this module only keeps the schedule row. Every replica's round may find the same
schedule due: `advance` moves next_fire_at only WHERE it still holds the value the round
read, so one replica advances it and the others change nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from jobwire.db.reads import _page, decode_page_token, encode_page_token, scoped
from jobwire.db.tables import job, schedule
from jobwire.domain.commands import Scope
from jobwire.domain.errors import ScheduleExists
from jobwire.domain.schedules import CatchUp, Due, Overlap, ScheduleRecord, Timing
from jobwire.domain.states import TERMINAL

Row = dict[str, Any]


def create(conn: Connection, new: ScheduleRecord) -> None:
    try:
        conn.execute(sa.insert(schedule).values(**_values(new)))
    except IntegrityError:
        raise ScheduleExists() from None


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
    rows, last = _page([dict(r) for r in conn.execute(query).mappings()], page_size)
    return [from_row(r) for r in rows], "" if last is None else encode_page_token(last)


def set_paused(conn: Connection, scope: Scope, schedule_id: str, next_fire_at: datetime | None) -> bool:
    """Pause (next_fire_at None) or resume at `next_fire_at`; False for an unknown schedule."""
    values = {"paused": next_fire_at is None, "next_fire_at": next_fire_at}
    return bool(conn.execute(sa.update(schedule).where(*_named(scope, schedule_id)).values(**values)).rowcount)


def delete(conn: Connection, scope: Scope, schedule_id: str) -> bool:
    return bool(conn.execute(sa.delete(schedule).where(*_named(scope, schedule_id))).rowcount)


def due(conn: Connection, now: datetime, limit: int) -> list[Due]:
    """Schedules of every tenant whose next fire time has come, with their previous job's state."""
    previous = job.alias("previous")
    query = (
        sa.select(schedule, previous.c.status.label("previous_status"))
        .select_from(
            schedule.outerjoin(
                previous, sa.and_(previous.c.tenant == schedule.c.tenant, previous.c.job_no == schedule.c.last_job_no)
            )
        )
        .where(schedule.c.next_fire_at <= now, schedule.c.paused == sa.false())
        .order_by(schedule.c.next_fire_at)
        .limit(limit)
    )
    unfinished = {s.value for s in TERMINAL}
    return [
        Due(
            from_row(dict(r)),
            previous_unfinished=r["previous_status"] is not None and r["previous_status"] not in unfinished,
        )
        for r in conn.execute(query).mappings()
    ]


def advance(
    conn: Connection,
    one: ScheduleRecord,
    *,
    due_at: datetime,
    next_fire_at: datetime,
    fired: tuple[datetime, str] | None,
    skipped: bool,
) -> bool:
    """Move the schedule on from `due_at`, recording the firing (fire time, job) or a skip;
    False when another round (or a pause, resume or delete) changed it first."""
    values: dict[str, Any] = {"next_fire_at": next_fire_at}
    if fired is not None:
        values["last_fire_at"], values["last_job_no"] = fired
    if skipped:
        values["skipped_firings"] = schedule.c.skipped_firings + 1
    guarded = sa.update(schedule).where(
        *_named(Scope(tenant=one.tenant), one.schedule_id),
        schedule.c.next_fire_at == due_at,
        schedule.c.paused == sa.false(),
    )
    return bool(conn.execute(guarded.values(**values)).rowcount)


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
