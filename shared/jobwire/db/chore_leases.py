"""The lease row that makes one serving process of all replicas the runner of a set of chores.

A row per set (`housekeeping`, `schedules`) names its holder and when its lease ends, by
the database clock (`transaction_time`: every process reads the same time, and a test
moves it). A candidate that holds the row renews it with an UPDATE fenced by its holder
id, so a holder that was replaced can never extend its successor's lease; anyone takes
over a lease past its end with an UPDATE fenced by that end, so two candidates never both
win it; the first candidate ever inserts the row. A clean stop deletes the holder's row,
so the next candidate to look finds it free rather than waiting out the lease.

Each attempt is one statement in the steady state: the holder's UPDATE, or another's
SELECT of who holds it until when (jobwire.runtime.leadership paces the attempts by it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from jobwire.db.engine import transaction_time
from jobwire.db.tables import chore_leader
from jobwire.db.writer import RetryTransaction


@dataclass(frozen=True)
class Term:
    """Who holds the lease of a set of chores and until when, as read at `now` (database clock)."""

    holder: str
    expires_at: datetime
    now: datetime


def elect(conn: Connection, name: str, candidate: str, lease: timedelta, *, holding: bool) -> Term:
    """Renew or take the lease `name` for `candidate`, or learn who holds it: the term after.

    `holding`: the candidate believes it holds the lease, so its renewal comes first.
    """
    now = transaction_time(conn)
    mine = Term(candidate, now + lease, now)
    if holding and _renew(conn, name, candidate, mine.expires_at):
        return mine
    row = conn.execute(
        sa.select(chore_leader.c.holder, chore_leader.c.expires_at).where(chore_leader.c.name == name)
    ).first()
    if row is None:
        try:
            conn.execute(
                sa.insert(chore_leader).values(name=name, holder=candidate, elected_at=now, expires_at=mine.expires_at)
            )
        except IntegrityError:
            raise RetryTransaction() from None  # another candidate made it first: read it on the rerun
        return mine
    if row.holder == candidate:
        renewed = _renew(conn, name, candidate, mine.expires_at)
    elif row.expires_at <= now:
        renewed = _take_over(conn, name, candidate, now, mine.expires_at)
    else:
        return Term(row.holder, row.expires_at, now)
    if not renewed:
        raise RetryTransaction()  # another candidate changed it since the read: read it again
    return mine


def resign(conn: Connection, name: str, holder: str) -> bool:
    """Give up the lease `name` if `holder` has it: whether it had."""
    return bool(
        conn.execute(
            sa.delete(chore_leader).where(chore_leader.c.name == name, chore_leader.c.holder == holder)
        ).rowcount
    )


def _renew(conn: Connection, name: str, holder: str, until: datetime) -> bool:
    """Extend `holder`'s lease; refused (False) once another holds it."""
    fenced = sa.update(chore_leader).where(chore_leader.c.name == name, chore_leader.c.holder == holder)
    return bool(conn.execute(fenced.values(expires_at=until)).rowcount)


def _take_over(conn: Connection, name: str, candidate: str, now: datetime, until: datetime) -> bool:
    """Take a lease that has ended; refused (False) when another took or renewed it first."""
    fenced = sa.update(chore_leader).where(chore_leader.c.name == name, chore_leader.c.expires_at <= now)
    return bool(conn.execute(fenced.values(holder=candidate, elected_at=now, expires_at=until)).rowcount)
