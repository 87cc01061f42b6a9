"""Batches: many jobs made in one transaction or none, a key that replays the whole batch, and counts.

A SubmitBatch runs inside the group commit's transaction like any submit
(jobwire.db.store): its key is looked up first (a replay reads the batch's jobs back), a
batch whose reply would not fit one message is refused (jobwire.domain.batches), its
dependencies are checked before anything is written (one refusal refuses the batch), then
the job_batch row and every job, event and edge go in one round trip. Two replays racing
with one key: the second insert of the key is refused by its UNIQUE index, and the
transaction runs again and finds the first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db import dependencies, submit
from jobwire.db.changes import Row
from jobwire.db.reads import scoped
from jobwire.db.rows import record_from_row
from jobwire.db.tables import job, job_batch
from jobwire.db.wire import Wire
from jobwire.db.writer import RetryTransaction
from jobwire.domain.batches import BatchRecord, NewBatch
from jobwire.domain.commands import NewJob, Scope
from jobwire.domain.errors import IdempotencyKeyReused, InvalidArgument, JobwireError
from jobwire.domain.job import JobRecord
from jobwire.domain.states import Status

# (batch_id, its jobs in request order, created) or the refusal
BatchAnswer = tuple[str, list[JobRecord], bool] | JobwireError


def fingerprint(batch: NewBatch) -> str:
    """What makes two SubmitBatch calls with one key "the same request": their jobs, in order."""
    h = hashlib.sha256()
    for new in batch.jobs:
        h.update(new.fingerprint().encode())
    return h.hexdigest()


async def submit_batch(
    wire: Wire, batch: NewBatch, numbered: Sequence[tuple[NewJob, str]], *, now: datetime, duplicate: type[Exception]
) -> BatchAnswer:
    """Make the batch (the transaction goes on), or answer with the one its key made."""
    if batch.idempotency_key:
        found = await _by_key(wire, batch)
        if found is not None:
            return _replay(found, fingerprint(batch), await _jobs(wire, found["batch_id"]))
    refused = batch.refusal()  # after the key: a batch made before this rule still replays
    if refused is not None:
        return refused
    for i, waits in enumerate(await dependencies.resolve(wire, [new for new, _ in numbered])):
        if isinstance(waits, JobwireError):
            return _in_batch(i, waits)
    values = {
        "batch_id": batch.batch_id, "tenant": batch.tenant, "idempotency_key": batch.idempotency_key,
        "fingerprint": fingerprint(batch), "total": len(numbered), "created_at": now,
    }  # fmt: skip
    try:
        await wire.run([(wire.sql.insert_batch, values)])
    except duplicate:
        raise RetryTransaction() from None  # a replay racing with us made it first: all again, to find it
    answers = await submit.submit(wire, numbered, now=now, duplicate=duplicate, commit=False)
    jobs = []
    for answer in answers:
        if isinstance(answer, JobwireError):
            raise RetryTransaction()  # a dependency ended since it was read: impossible under its lock
        jobs.append(record_from_row(answer[0]))
    return batch.batch_id, jobs, True


def _in_batch(i: int, refused: JobwireError) -> JobwireError:
    """A job's refusal as the batch's, naming the job: jobs[i].depends_on."""
    if isinstance(refused, InvalidArgument):
        return InvalidArgument(f"jobs[{i}].{refused.field}", refused.message.partition(": ")[2])
    refused.args = (f"jobs[{i}].{refused.message}",)
    return refused


def _replay(found: Row, fingerprint_now: str, jobs: list[JobRecord]) -> BatchAnswer:
    if found["fingerprint"] != fingerprint_now:
        return IdempotencyKeyReused()
    return found["batch_id"], jobs, False


async def _by_key(wire: Wire, batch: NewBatch) -> Row | None:
    params = {"tenant": batch.tenant, "key": batch.idempotency_key}
    rows = await wire.fetch(wire.sql.batch_by_key, params, wire.sql.batch_shape)
    return rows[0] if rows else None


async def _jobs(wire: Wire, batch_id: str) -> list[JobRecord]:
    rows = await wire.fetch(wire.sql.rows_by_batch, {"batch_id": batch_id}, wire.sql.row_shape)
    return [record_from_row(row) for row in rows]


# -- reads ----------------------------------------------------------------------------------


def get(conn: Connection, scope: Scope, batch_id: str) -> BatchRecord | None:
    """The batch with its jobs counted by status (ix_job_batch); another tenant's is None.

    A batch may span queues: a token of some queues sees the batch when it sees any of its
    jobs, and then only those (counted, listed, cancelled); one of none of them is None.
    """
    found = conn.execute(sa.select(job_batch).where(job_batch.c.batch_id == batch_id)).mappings().first()
    if found is None or found["tenant"] != scope.tenant:
        return None
    query = sa.select(job.c.status, sa.func.count()).where(job.c.batch_id == batch_id, *scoped(scope))
    counts = {Status(status): int(n) for status, n in conn.execute(query.group_by(job.c.status))}
    if scope.queues is not None and not counts:
        return None
    total = found["total"] if scope.queues is None else sum(counts.values())
    return BatchRecord(
        batch_id=batch_id, tenant=scope.tenant, total=total, created_at=found["created_at"], counts=counts
    )


def job_nos(conn: Connection, scope: Scope, batch_id: str, *, unfinished: bool = False) -> list[str]:
    """The numbers of the batch's jobs `scope` sees, in the order they were made (only the
    unfinished ones if asked)."""
    where: list[Any] = [job.c.batch_id == batch_id, *scoped(scope)]
    if unfinished:
        where.append(job.c.status.in_([s.value for s in Status if not s.terminal]))
    return list(conn.execute(sa.select(job.c.job_no).where(*where).order_by(job.c.id)).scalars())
