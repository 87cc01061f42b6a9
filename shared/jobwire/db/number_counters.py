"""The counter row per tenant and UTC day that job numbers are reserved from, a block at a
time, in a transaction of its own (jobwire.process_state.job_numbers hands them out)."""

from __future__ import annotations

from jobwire.db.engine import Database
from jobwire.db.wire import Wire


async def reserve(db: Database, tenant: str, day: str, count: int) -> int:
    """Reserve `count` numbers of `tenant`'s `day`; the last one reserved."""

    async def reserving(wire: Wire) -> int:
        key = {"tenant": tenant, "day": day}
        await wire.run([(wire.sql.reserve_numbers, {**key, "last_seq": count})])
        (row,) = await wire.fetch(wire.sql.last_number, key, wire.sql.number_shape)
        await wire.commit()
        return int(row["last_seq"])

    return await db.transact(reserving)
