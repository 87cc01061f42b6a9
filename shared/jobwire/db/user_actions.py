"""What users and operators decide about a job: cancel, retry, requeue."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.engine import Connection

from jobwire.db.rows import record_from_row
from jobwire.db.writes import UNSTAGED, Row, apply, load_job
from jobwire.domain.errors import InvalidTransition, JobNotCancellable, JobNotFound, NotRetryable
from jobwire.domain.states import Action, Status


def _find(conn: Connection, tenant: str, job_no: str) -> Row:
    row = load_job(conn, tenant, job_no)
    if row is None:
        raise JobNotFound()
    return row


def cancel(conn: Connection, tenant: str, job_no: str) -> Row:
    """QUEUED ends at once; RUNNING asks the worker to stop at its next safe point."""
    row = _find(conn, tenant, job_no)
    now: datetime = row["db_now"]
    status = Status(row["status"])
    if status in (Status.CANCEL_REQUESTED, Status.CANCELLED):
        return row  # idempotent
    if status is Status.QUEUED:
        changes = {"status": Status.CANCELLED.value, "finished_at": now}
        return apply(conn, row, changes, action=Action.CANCEL, kind="CANCELLED", now=now)
    if status is Status.RUNNING:
        if not record_from_row(row).cancellable:
            raise JobNotCancellable("the job is in a stage that cannot be cancelled")
        changes = {"status": Status.CANCEL_REQUESTED.value}
        return apply(conn, row, changes, action=Action.CANCEL, kind="CANCEL_REQUESTED", now=now)
    raise JobNotCancellable(f"a {status.value} job cannot be cancelled")


def retry(conn: Connection, tenant: str, job_no: str) -> Row:
    """FAILED with a retryable error -> QUEUED with a fresh budget of attempts."""
    row = _find(conn, tenant, job_no)
    if row["status"] != Status.FAILED.value:
        raise InvalidTransition("only a FAILED job can be retried", reason="NOT_RETRYABLE")
    if not row["error_retryable"]:
        raise NotRetryable("the job's error is not retryable")
    now: datetime = row["db_now"]
    changes = {
        "status": Status.QUEUED.value,
        "attempt_base": row["attempt"],
        "run_after": now,
        "finished_at": None,
        **UNSTAGED,
    }
    return apply(conn, row, changes, action=Action.RETRY, kind="RETRIED", now=now)


def requeue(conn: Connection, tenant: str, job_no: str, reason: str) -> Row:
    """An operator's decision for a stalled job: revoke the lease, queue again, charge nothing.

    A lease that is still alive is refused: its worker would run on until its next
    heartbeat while another worker starts the job, so side effects would happen twice.
    Cancel such a job, or wait for its lease to expire.
    """
    row = _find(conn, tenant, job_no)
    if row["status"] != Status.RUNNING.value:
        raise InvalidTransition(f"a {row['status']} job cannot be requeued")
    now: datetime = row["db_now"]
    expires = row["lease_expires_at"]
    if not row["stalled"] and expires is not None and expires > now:
        raise InvalidTransition(
            "the job's lease is alive; cancel it or wait for the lease to expire", reason="LEASE_ACTIVE"
        )
    changes = {
        "status": Status.QUEUED.value,
        "worker_token": None,
        "lease_epoch": row["lease_epoch"] + 1,  # the old token can never match again
        "lease_expires_at": None,
        "stalled": False,
        "attempt_base": row["attempt_base"] + 1,
        "run_after": now,
        **UNSTAGED,
    }
    return apply(conn, row, changes, action=Action.REQUEUE, kind="REQUEUED", now=now, detail=reason or None)
