"""Submitting a job: idempotency, the row, the first event."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from jobwire.db.engine import RetryTransaction
from jobwire.db.tables import job
from jobwire.db.writes import Row, clock, load, record_event
from jobwire.domain.errors import IdempotencyKeyReused
from jobwire.domain.retry import RetryPolicy
from jobwire.domain.states import Status


@dataclass(frozen=True, kw_only=True)
class NewJob:
    tenant: str
    job_type: str
    queue: str
    payload: bytes
    idempotency_key: str | None = None
    priority: int = 0
    run_after: datetime | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    owner: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    locale: str = "en"

    def fingerprint(self) -> str:
        """What makes two submits with one idempotency key "the same request"."""
        h = hashlib.sha256()
        for part in (self.job_type, self.queue, str(self.priority), self.owner,
                     json.dumps(self.labels, sort_keys=True)):  # fmt: skip
            h.update(part.encode())
            h.update(b"\0")
        h.update(self.payload)
        return h.hexdigest()


def submit(conn: Connection, new: NewJob, job_no: str) -> tuple[Row, bool]:
    """Insert the job as `job_no`, or return the one an idempotency key already created."""
    fingerprint = new.fingerprint()
    if new.idempotency_key:
        existing = _replay(conn, new, fingerprint)
        if existing is not None:
            return existing, False
    now = clock(conn)
    values = _values(new, job_no, fingerprint, now)
    try:
        job_id = conn.execute(sa.insert(job).values(**values)).inserted_primary_key[0]  # type: ignore[index]
    except IntegrityError:
        if new.idempotency_key:
            raise RetryTransaction() from None  # a concurrent submit won: the rerun replays it
        raise
    # The new row is known without reading it back: what was inserted plus the defaults.
    row = {**NEW_ROW_DEFAULTS, **values, "id": job_id, "db_now": now}
    record_event(conn, row, kind="SUBMITTED", from_status=None, now=now)
    return row, True


# Columns a new job leaves to their defaults, and the artifact a queued job lacks.
NEW_ROW_DEFAULTS: dict[str, object] = {
    "stage": None, "stage_index": 0, "stage_count": 0, "stages": None, "processed_units": 0,
    "total_units": None, "checkpoint": None, "attempt": 0, "attempt_base": 0, "worker_id": None,
    "worker_token": None, "lease_epoch": 0, "lease_seconds": None, "lease_expires_at": None,
    "heartbeat_at": None, "stalled": False, "ended_token": None, "ended_kind": None,
    "error_category": None, "error_stage": None, "error_message": None, "error_retryable": None,
    "error_detail": None, "started_at": None, "finished_at": None,
    "uri": None, "size_bytes": None, "sha256": None, "content_type": None, "summary": None,
}  # fmt: skip


def _replay(conn: Connection, new: NewJob, fingerprint: str) -> Row | None:
    row = load(conn, job.c.tenant == new.tenant, job.c.idempotency_key == new.idempotency_key)
    if row is None:
        return None
    if row["fingerprint"] != fingerprint:
        raise IdempotencyKeyReused()
    return row


def _values(new: NewJob, job_no: str, fingerprint: str, now: datetime) -> dict[str, object]:
    policy = new.retry
    return {
        "tenant": new.tenant,
        "job_no": job_no,
        "job_type": new.job_type,
        "queue": new.queue,
        "owner": new.owner,
        "labels": json.dumps(new.labels, ensure_ascii=False, sort_keys=True),
        "locale": new.locale,
        "payload": new.payload,
        "fingerprint": fingerprint,
        "idempotency_key": new.idempotency_key or None,
        "priority": new.priority,
        "status": Status.QUEUED.value,
        "max_attempts": policy.max_attempts,
        "initial_backoff_s": policy.initial_backoff_s,
        "max_backoff_s": policy.max_backoff_s,
        "backoff_multiplier": policy.backoff_multiplier,
        "on_lease_lost": policy.on_lease_lost.value,
        "created_at": now,
        "updated_at": now,
        "run_after": max(new.run_after, now) if new.run_after else now,
        "version": 1,
    }
