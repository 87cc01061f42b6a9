"""Which tenants have runnable jobs in a queue: the listing a shared fleet's turns are fed
from (jobwire.process_state.turns), a read of its own outside any claim's transaction."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.reads import now_value
from jobwire.db.tables import job

MAX_TENANTS = 10_000  # per queue: a skip scan stops there


def runnable_tenants(conn: Connection, queue: str, job_types: Sequence[str]) -> list[str]:
    """The tenants with runnable jobs of `job_types` in `queue`: a skip scan, one statement per
    tenant in the job table (two index seeks each), never a scan of anyone's backlog.

    Driven from here: MariaDB does no loose index scan for a DISTINCT tenant on the claim
    index (every entry read), and in a recursive CTE the correlated seek became a full scan.
    """
    runnable = job.alias("runnable")
    found, after, now = [], "", now_value(conn)
    for _ in range(MAX_TENANTS):
        following = sa.select(job.c.tenant).where(job.c.tenant > after).order_by(job.c.tenant).limit(1).subquery()
        has_jobs = sa.exists().where(
            runnable.c.tenant == following.c.tenant,
            runnable.c.queue == queue,
            runnable.c.status == "QUEUED",
            runnable.c.waiting_on == 0,
            runnable.c.run_after <= now,
            runnable.c.job_type.in_(list(job_types)),
        )
        row = conn.execute(sa.select(following.c.tenant, has_jobs.label("runnable"))).first()
        if row is None:
            break
        after = row.tenant
        if row.runnable:
            found.append(after)
    return found
