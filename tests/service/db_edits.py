"""Writing straight into a running server's database, for tests that need a row no RPC makes.

The server's own engine, one committed transaction per call: what an operator's hand edit,
a bad migration or a bug elsewhere would leave behind.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa
from served import Served

from jobwire.db.tables import job


async def db_execute(served: Served, statement: sa.Executable) -> int:
    """Run one statement and commit it; the rows it matched."""
    engine = served.runtime.store.db.engine

    def write() -> int:
        with engine.begin() as conn:
            return int(conn.execute(statement).rowcount)  # type: ignore[attr-defined]

    return await asyncio.to_thread(write)


async def set_job(served: Served, job_no: str, **values: Any) -> None:
    """Overwrite columns of one job row."""
    matched = await db_execute(served, sa.update(job).where(job.c.job_no == job_no).values(**values))
    assert matched == 1, (job_no, values)


async def job_row(served: Served, job_no: str) -> dict[str, Any]:
    """The job's row as stored (without the blobs)."""
    engine = served.runtime.store.db.engine
    columns = [c for c in job.c if c.name not in ("payload", "checkpoint", "error_detail")]

    def read() -> dict[str, Any]:
        with engine.connect() as conn:
            return dict(conn.execute(sa.select(*columns).where(job.c.job_no == job_no)).mappings().one())

    return await asyncio.to_thread(read)
