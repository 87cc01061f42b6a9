"""The console's queue overview (AdminService.ListQueues): counts, limits and per-minute activity.

Counts walk ix_job_status over the unfinished statuses only (a tenant's finished jobs are
most of its rows and none of these counts); the window's endings walk ix_job_finished by
finished_at. The submissions are counted by created_at, which no index leads: the read
walks the tenant's jobs, which is why only an operator's page asks for it, never a claim.
Minutes are counted by the database (one row per queue and minute), never a row per job.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.queue_limits import every as every_limits
from jobwire.db.reads import clock, scoped
from jobwire.db.tables import job, queue_limits
from jobwire.domain.commands import Scope
from jobwire.domain.flow import QueueLimits
from jobwire.domain.queues import MAX_QUEUES, Minute, QueueOverview, QueueSummary, window_start
from jobwire.domain.states import LEASED, Status

_HELD = [Status.QUEUED.value, Status.WAITING.value, *sorted(s.value for s in LEASED)]
_ENDED = [Status.READY.value, Status.FAILED.value]


def overview(conn: Connection, scope: Scope, queue: str, minutes: int) -> QueueOverview:
    """The queues `scope` sees (only `queue`, if given) that hold jobs or limits, by name."""
    now = clock(conn)
    names = _queue_names(conn, scope, queue)
    shown, omitted = names[:MAX_QUEUES], max(0, len(names) - MAX_QUEUES)
    if not shown:
        return QueueOverview(queues=[], read_at=now)
    start = window_start(now, minutes)
    held = _held(conn, scope, shown)
    activity = _activity(conn, scope, shown, start, minutes)
    limits = every_limits(conn, scope.tenant, shown)
    queues = [
        QueueSummary(
            queue=name,
            queued=held[name, Status.QUEUED.value],
            running=sum(held[name, s.value] for s in LEASED),
            waiting=held[name, Status.WAITING.value],
            oldest_runnable_s=_oldest(conn, scope, name, now) if held[name, Status.QUEUED.value] else None,
            limits=limits.get(name, QueueLimits()),
            minutes=[
                Minute(
                    start=start + timedelta(minutes=i),
                    submitted=activity[name, "submitted", i],
                    finished=activity[name, Status.READY.value, i],
                    failed=activity[name, Status.FAILED.value, i],
                )
                for i in range(minutes)
            ],
        )
        for name in shown
    ]
    return QueueOverview(queues=queues, read_at=now, omitted=omitted)


def _queue_names(conn: Connection, scope: Scope, queue: str) -> list[str]:
    with_jobs = sa.select(job.c.queue).where(*scoped(scope)).distinct()
    with_limits = sa.select(queue_limits.c.queue).where(*scoped(scope, queue_limits))
    if queue:
        with_jobs, with_limits = with_jobs.where(job.c.queue == queue), with_limits.where(queue_limits.c.queue == queue)
    found = set(conn.execute(with_jobs).scalars()) | set(conn.execute(with_limits).scalars())
    return sorted(found)


def _held(conn: Connection, scope: Scope, names: list[str]) -> Counter[tuple[str, str]]:
    query = (
        sa.select(job.c.queue, job.c.status, sa.func.count().label("n"))
        .where(*scoped(scope), job.c.status.in_(_HELD), job.c.queue.in_(names))
        .group_by(job.c.queue, job.c.status)
    )
    return Counter({(r.queue, r.status): int(r.n) for r in conn.execute(query)})


def _oldest(conn: Connection, scope: Scope, name: str, now: datetime) -> float | None:
    """As the oldest-runnable gauge reads it (jobwire.db.reads.census): QUEUED, past its run_after,
    waiting for no dependency; one queue at a time, down the claim index."""
    at = sa.literal(now, type_=job.c.run_after.type)
    query = sa.select(sa.func.min(job.c.run_after)).where(
        *scoped(scope), job.c.queue == name, job.c.status == Status.QUEUED.value, job.c.waiting_on == 0,
        job.c.run_after <= at,
    )  # fmt: skip
    oldest = conn.execute(query).scalar()
    if oldest is None:
        return None
    if isinstance(oldest, str):  # SQLite hands back text for an aggregate of DATETIME
        oldest = datetime.fromisoformat(oldest)
    return max(0.0, (now - oldest).total_seconds())


def _activity(
    conn: Connection, scope: Scope, names: list[str], start: datetime, minutes: int
) -> Counter[tuple[str, str, int]]:
    """(queue, "submitted" or the status it ended in, minute index) -> jobs."""
    since = sa.literal(start, type_=job.c.created_at.type)
    made_at = _minute_of(conn, job.c.created_at, since).label("m")
    made = (
        sa.select(job.c.queue, made_at, sa.func.count().label("n"))
        .where(*scoped(scope), job.c.queue.in_(names), job.c.created_at >= since)
        .group_by(job.c.queue, made_at)
    )
    ended_at = _minute_of(conn, job.c.finished_at, since).label("m")
    ended = (
        sa.select(job.c.queue, job.c.status, ended_at, sa.func.count().label("n"))
        .where(job.c.status.in_(_ENDED), job.c.finished_at >= since, *scoped(scope), job.c.queue.in_(names))
        .group_by(job.c.queue, job.c.status, ended_at)
    )
    last = minutes - 1  # a row stamped past the read's clock (another replica's) counts in the minute running now
    found: Counter[tuple[str, str, int]] = Counter()
    for r in conn.execute(made):
        found[r.queue, "submitted", min(int(r.m), last)] += int(r.n)
    for r in conn.execute(ended):
        found[r.queue, r.status, min(int(r.m), last)] += int(r.n)
    return found


def _minute_of(conn: Connection, column: Any, since: Any) -> Any:
    """Whole minutes from `since` (a whole minute) to `column`, computed by the database."""
    if conn.dialect.name == "sqlite":
        seconds = sa.cast(sa.func.strftime("%s", column), sa.Integer) - sa.cast(
            sa.func.strftime("%s", since), sa.Integer
        )
        return seconds // 60
    return sa.func.timestampdiff(sa.literal_column("MINUTE"), since, column)
