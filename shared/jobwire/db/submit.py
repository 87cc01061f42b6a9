"""Submitting a job: a day-sequenced job number, idempotency, the first event."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from jobwire.db.engine import RetryTransaction
from jobwire.db.tables import job, job_day_counter
from jobwire.db.writes import Row, clock, load, record_event, upsert
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


def submit(conn: Connection, new: NewJob, prefix: str) -> tuple[Row, bool]:
    """Insert the job, or return the one an idempotency key already created."""
    fingerprint = new.fingerprint()
    if new.idempotency_key:
        existing = _replay(conn, new, fingerprint)
        if existing is not None:
            return existing, False
    now = clock(conn)
    job_no = _next_job_no(conn, prefix, now)
    values = _values(new, job_no, fingerprint, now)
    try:
        job_id = conn.execute(sa.insert(job).values(**values)).inserted_primary_key[0]  # type: ignore[index]
    except IntegrityError:
        if new.idempotency_key:
            raise RetryTransaction() from None  # a concurrent submit won: the rerun replays it
        raise
    row = load(conn, job.c.id == job_id)
    assert row is not None
    record_event(conn, row, kind="SUBMITTED", from_status=None, now=now)
    return row, True


def _replay(conn: Connection, new: NewJob, fingerprint: str) -> Row | None:
    row = load(conn, job.c.tenant == new.tenant, job.c.idempotency_key == new.idempotency_key)
    if row is None:
        return None
    if row["fingerprint"] != fingerprint:
        raise IdempotencyKeyReused()
    return row


def _next_job_no(conn: Connection, prefix: str, now: datetime) -> str:
    day = now.strftime("%Y%m%d")
    # The counter row is locked from here to commit: submits serialize on it only briefly.
    bump = {"last_seq": job_day_counter.c.last_seq + 1}
    upsert(conn, job_day_counter, {"day": day, "last_seq": 1}, bump)
    seq = conn.execute(sa.select(job_day_counter.c.last_seq).where(job_day_counter.c.day == day)).scalar_one()
    return f"{prefix}-{day}-{seq:03d}"


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
