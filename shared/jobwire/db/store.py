"""JobStore: every read and conditional write of jobwire, each in one short transaction.

Use cases call these methods; nothing else touches SQL. Methods are synchronous (the
servers run them on threads). State changes are `JobOp`s (jobwire.db.changes): `apply`
runs any number of them, from any number of callers, in one transaction, which is how
the servers commit concurrent calls together. The other methods are one call each.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from jobwire.db import inspect as inspect_queries
from jobwire.db import leases, reads, reaper, retention, submit
from jobwire.db.cache import RowCache
from jobwire.db.changes import JobOp, Outcome, apply_ops
from jobwire.db.engine import Database
from jobwire.db.job_numbers import JobNumbers
from jobwire.db.migrate import upgrade
from jobwire.db.reads import Row
from jobwire.db.rows import record_from_row
from jobwire.db.user_actions import Cancel, Requeue, Retry
from jobwire.db.wire import Statement, Wire
from jobwire.domain.errors import JobNotFound, JobwireError
from jobwire.domain.job import Artifact, JobRecord
from jobwire.domain.lease import Lease, LeaseState, LeaseStatus

T = TypeVar("T")
Extra = Callable[[Wire, datetime], Statement]  # a statement that rides with the COMMIT


@dataclass(frozen=True)
class Call:
    """One caller's part of a shared transaction: its operations and any extra statement."""

    ops: Sequence[JobOp[Any]]
    extra: Sequence[Extra] = field(default=())


class JobStore:
    def __init__(self, db: Database, *, job_prefix: str = "PT") -> None:
        self.db = db
        self.job_numbers = JobNumbers(db, job_prefix)
        self.cache = RowCache()

    # -- every state change ---------------------------------------------------------------
    def apply(self, calls: Sequence[Call]) -> list[list[Outcome]]:
        """Run every call's operations in one transaction; per call, each op's outcome or refusal."""
        ops = [op for call in calls for op in call.ops]

        def tx(wire: Wire) -> list[Outcome]:
            now = self.db.clock.now()
            extra = [make(wire, now) for call in calls for make in call.extra]
            return apply_ops(wire, ops, now=now, cache=self.cache, extra=extra)

        flat = self.db.transact(tx)
        out, start = [], 0
        for call in calls:
            out.append(flat[start : start + len(call.ops)])
            start += len(call.ops)
        return out

    def apply_one(self, op: JobOp[T]) -> T:
        """One operation in a transaction of its own; its refusal raised."""
        result = self.apply([Call([op])])[0][0]
        if isinstance(result, JobwireError):
            raise result
        return result  # type: ignore[no-any-return]

    # -- backends ---------------------------------------------------------------------------
    def submit_many(self, news: Sequence[submit.NewJob]) -> list[tuple[JobRecord, bool] | JobwireError]:
        """Insert jobs in one transaction; each one's (job, created) or its refusal."""
        numbered = [(new, self.job_numbers.next()) for new in news]  # reserved outside: see job_numbers
        duplicate = self.db.dbapi.IntegrityError
        answers = self.db.transact(lambda w: submit.submit(w, numbered, now=self.db.clock.now(), duplicate=duplicate))
        return [a if isinstance(a, JobwireError) else (record_from_row(a[0]), a[1]) for a in answers]

    def submit(self, new: submit.NewJob) -> tuple[JobRecord, bool]:
        answer = self.submit_many([new])[0]
        if isinstance(answer, JobwireError):
            raise answer
        return answer

    def get(self, tenant: str, job_no: str) -> JobRecord:
        found = self.db.read(lambda c: reads.get(c, tenant, job_no))
        if found is None:
            raise JobNotFound()
        row, position = found
        return record_from_row(row, queue_position=position)

    def cancel(self, tenant: str, job_no: str) -> JobRecord:
        return self.apply_one(Cancel(tenant=tenant, job_no=job_no))

    def retry(self, tenant: str, job_no: str) -> JobRecord:
        return self.apply_one(Retry(tenant=tenant, job_no=job_no))

    def list_jobs(self, where: reads.JobFilter, page_size: int, page_token: str) -> tuple[list[JobRecord], str]:
        rows, token = self.db.read(lambda c: reads.list_jobs(c, where, page_size, page_token))
        return [record_from_row(r) for r in rows], token

    # -- workers ----------------------------------------------------------------------------
    def claim(self, who: leases.Claimant, max_jobs: int, record_seen: bool = True) -> list[Lease]:
        return self.db.transact(
            lambda w: leases.claim(w, who, max_jobs, now=self.db.clock.now(), cache=self.cache, seen=record_seen)
        )

    def heartbeat(
        self, tenant: str, worker_id: str, held: Sequence[tuple[str, str]], *, touch: bool = True
    ) -> list[LeaseStatus]:
        """Renew each lease still held: OK, CANCEL_REQUESTED or LOST each."""
        return lease_states(held, self.apply([heartbeat_call(tenant, worker_id, held, touch=touch)])[0])

    def report(self, tenant: str, job_no: str, token: str, **fields: Any) -> LeaseStatus:
        return self.apply_one(leases.Report(tenant=tenant, job_no=job_no, token=token, **fields))

    def complete(self, tenant: str, job_no: str, token: str, result: Artifact) -> JobRecord:
        return self.apply_one(leases.Complete(tenant=tenant, job_no=job_no, token=token, result=result))

    def fail(self, tenant: str, job_no: str, token: str, failure: leases.Failure) -> JobRecord:
        return self.apply_one(leases.Fail(tenant=tenant, job_no=job_no, token=token, failure=failure))

    def confirm_cancel(self, tenant: str, job_no: str, token: str, note: str) -> JobRecord:
        return self.apply_one(leases.ConfirmCancel(tenant=tenant, job_no=job_no, token=token, note=note))

    def release(self, tenant: str, job_no: str, token: str, checkpoint: bytes | None, note: str) -> JobRecord:
        return self.apply_one(
            leases.Release(tenant=tenant, job_no=job_no, token=token, checkpoint=checkpoint, note=note)
        )

    # -- operators --------------------------------------------------------------------------
    def requeue(self, tenant: str, job_no: str, reason: str) -> JobRecord:
        return self.apply_one(Requeue(tenant=tenant, job_no=job_no, reason=reason))

    def list_events(self, tenant: str, job_no: str, page_size: int, page_token: str) -> tuple[list[Row], str]:
        found = self.db.read(lambda c: reads.list_events(c, tenant, job_no, page_size, page_token))
        if found is None:
            raise JobNotFound()
        return found

    def inspect(
        self, tenant: str, *, stalled_after: timedelta, queue: str, kinds: Collection[inspect_queries.FindingKind]
    ) -> list[tuple[inspect_queries.FindingKind, Row]]:
        return self.db.read(
            lambda c: inspect_queries.findings(c, tenant, stalled_after=stalled_after, queue=queue, kinds=kinds)
        )

    def list_workers(self, tenant: str, queue: str) -> list[dict[str, Any]]:
        return self.db.read(lambda c: reads.list_workers(c, tenant, queue))

    # -- housekeeping (every server process runs it; see jobwire.reaping) -------------------
    def reap_leases(self, grace: timedelta, *, by: str) -> reaper.Reaped:
        """Mark expired leases stalled; past `grace`, apply each job's lease-lost policy."""
        return reaper.reap(self.db, lambda ops: self.apply([Call(ops)])[0], grace, by=by)

    def purge_expired(
        self,
        keep: retention.Retention,
        deleter: retention.ArtifactDeleter = retention.keep_files,
        *,
        batch: int = retention.BATCH,
    ) -> retention.Purged:
        """Delete terminal jobs past their retention with their events and artifacts, in batches."""
        return retention.purge_expired(self.db, keep, deleter, batch=batch)


def heartbeat_call(tenant: str, worker_id: str, held: Sequence[tuple[str, str]], *, touch: bool) -> Call:
    """A worker's heartbeat as one call: a renewal per lease, and its last-seen time."""
    ops = [leases.Renew(tenant=tenant, job_no=job_no, token=token) for job_no, token in held]
    extra: list[Extra] = [lambda wire, now: leases.touch_worker(wire, tenant, worker_id, now)] if touch else []
    return Call(ops, extra)


def lease_states(held: Sequence[tuple[str, str]], outcomes: Sequence[Outcome]) -> list[LeaseStatus]:
    """A heartbeat's answers: a refused renewal is a lost lease."""
    return [
        LeaseStatus(job_no=job_no, state=LeaseState.LOST) if isinstance(o, JobwireError) else o
        for (job_no, _), o in zip(held, outcomes, strict=True)
    ]


def open_store(url: str, *, pool_size: int = 8, job_prefix: str = "PT", migrate: bool = True) -> JobStore:
    """The store for `url`, its schema created or upgraded first when `migrate`."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    db = Database(url, pool_size=pool_size)
    if migrate:
        upgrade(db)
    return JobStore(db, job_prefix=job_prefix)
