"""JobStore: every read and conditional write of jobwire, each in one short transaction.

Use cases call these methods; nothing else touches SQL. Methods are synchronous (the
servers run them on a thread pool) and return domain values or rows for the RPC layer.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from jobwire.db import inspect as inspect_queries
from jobwire.db import leases, reads, reaper, retention, submit, user_actions
from jobwire.db.engine import Database
from jobwire.db.job_numbers import JobNumbers
from jobwire.db.migrate import upgrade
from jobwire.db.rows import record_from_row
from jobwire.db.writes import Row, clock
from jobwire.domain.errors import JobNotFound
from jobwire.domain.job import Artifact, JobRecord


class JobStore:
    def __init__(self, db: Database, *, job_prefix: str = "PT") -> None:
        self.db = db
        self.job_numbers = JobNumbers(db, job_prefix)

    # -- backends ---------------------------------------------------------------------
    def submit(self, new: submit.NewJob) -> tuple[JobRecord, bool]:
        job_no = self.job_numbers.next()  # reserved outside the transaction: see job_numbers
        row, created = self.db.write(lambda c: submit.submit(c, new, job_no))
        return record_from_row(row, queue_position=None), created

    def get(self, tenant: str, job_no: str) -> JobRecord:
        found = self.db.read(lambda c: reads.get(c, tenant, job_no))
        if found is None:
            raise JobNotFound()
        row, position = found
        return record_from_row(row, queue_position=position)

    def cancel(self, tenant: str, job_no: str) -> JobRecord:
        return record_from_row(self.db.write(lambda c: user_actions.cancel(c, tenant, job_no)))

    def retry(self, tenant: str, job_no: str) -> JobRecord:
        return record_from_row(self.db.write(lambda c: user_actions.retry(c, tenant, job_no)))

    def list_jobs(self, where: reads.JobFilter, page_size: int, page_token: str) -> tuple[list[JobRecord], str]:
        rows, token = self.db.read(lambda c: reads.list_jobs(c, where, page_size, page_token))
        return [record_from_row(r) for r in rows], token

    # -- workers ----------------------------------------------------------------------
    def claim(self, who: leases.Claimant, max_jobs: int, record_seen: bool = True) -> list[Row]:
        def tx(conn: Any) -> list[Row]:
            rows = leases.claim(conn, who, max_jobs, skip_locked=self.db.is_mysql)
            if record_seen:
                leases.seen(conn, who, rows[0]["db_now"] if rows else clock(conn))
            return rows

        return self.db.write(tx)

    def heartbeat(
        self, tenant: str, worker_id: str, held: Sequence[tuple[str, str]]
    ) -> list[tuple[str, str, datetime | None]]:
        return self.db.write(lambda c: leases.heartbeat(c, tenant, worker_id, held))

    def report(self, tenant: str, job_no: str, token: str, **fields: Any) -> Row:
        return self._worker_call(lambda c: leases.report(c, tenant, job_no, token, **fields))

    def complete(self, tenant: str, job_no: str, token: str, result: Artifact) -> JobRecord:
        return record_from_row(self._worker_call(lambda c: leases.complete(c, tenant, job_no, token, result)))

    def fail(self, tenant: str, job_no: str, token: str, failure: leases.Failure) -> JobRecord:
        return record_from_row(self._worker_call(lambda c: leases.fail(c, tenant, job_no, token, failure)))

    def confirm_cancel(self, tenant: str, job_no: str, token: str, note: str) -> JobRecord:
        return record_from_row(self._worker_call(lambda c: leases.confirm_cancel(c, tenant, job_no, token, note)))

    def release(self, tenant: str, job_no: str, token: str, checkpoint: bytes | None, note: str) -> JobRecord:
        return record_from_row(self._worker_call(lambda c: leases.release(c, tenant, job_no, token, checkpoint, note)))

    def _worker_call(self, fn: Any) -> Row:
        try:
            row: Row = self.db.write(fn)
            return row
        except leases.LateCall as late:
            # The refusal rolled its transaction back; the evidence gets one of its own.
            self.db.write(functools.partial(leases.record_late_call, late=late))
            raise

    # -- operators --------------------------------------------------------------------
    def requeue(self, tenant: str, job_no: str, reason: str) -> JobRecord:
        return record_from_row(self.db.write(lambda c: user_actions.requeue(c, tenant, job_no, reason)))

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
        return reaper.reap(self.db, grace, by=by)

    def purge_expired(
        self,
        keep: retention.Retention,
        deleter: retention.ArtifactDeleter = retention.keep_files,
        *,
        batch: int = retention.BATCH,
    ) -> retention.Purged:
        """Delete terminal jobs past their retention with their events and artifacts, in batches."""
        return retention.purge_expired(self.db, keep, deleter, batch=batch)


def open_store(url: str, *, pool_size: int = 8, job_prefix: str = "PT", migrate: bool = True) -> JobStore:
    """The store for `url`, its schema created or upgraded first when `migrate`."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    db = Database(url, pool_size=pool_size)
    if migrate:
        upgrade(db)
    return JobStore(db, job_prefix=job_prefix)
