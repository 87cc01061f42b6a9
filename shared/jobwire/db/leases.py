"""What workers do to a job they lease: claim, heartbeat, report, and the four endings.

Every call after Claim names a token `<epoch>.<secret>`; the UPDATE checks job, token and
epoch, so a worker whose lease was revoked can never write again. A token that does not
match is answered WORKER_LEASE_LOST whatever the reason (no oracle), and recorded as
evidence when it was once a real lease of this job.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.engine import RetryTransaction, db_now
from jobwire.db.tables import artifact, job
from jobwire.db.tables import worker as worker_table
from jobwire.db.writes import (
    INSERT_EVENT,
    UNSTAGED,
    Row,
    apply,
    event_values,
    load_job,
    record_event,
    update_guarded,
    upsert,
)
from jobwire.domain import stages as stage_plans
from jobwire.domain.errors import CancelNotRequested, WorkerLeaseLost
from jobwire.domain.job import Artifact, ErrorCategory, plain_message
from jobwire.domain.progress import Progress, apply_report
from jobwire.domain.retry import RetryPolicy
from jobwire.domain.stages import StageDef
from jobwire.domain.states import LEASED, Action, Status

LEASED_VALUES = [s.value for s in LEASED]


@dataclass(frozen=True, kw_only=True)
class Claimant:
    tenant: str
    worker_id: str
    queues: Sequence[str]
    plans: Mapping[str, tuple[StageDef, ...]]  # job type -> its stage plan
    lease_seconds: float


def new_token(epoch: int) -> str:
    return f"{epoch}.{secrets.token_urlsafe(18)}"


def token_epoch(token: str) -> int | None:
    head, _, secret = token.partition(".")
    # ASCII digits only: str.isdigit() also accepts "²" or "١", which int() refuses or reads as 1.
    return int(head) if head.isascii() and head.isdigit() and len(head) < 19 and secret else None


def claim(conn: Connection, who: Claimant, max_jobs: int, *, skip_locked: bool) -> list[Row]:
    """Lease up to `max_jobs` runnable jobs, best priority first, oldest first."""
    # One index-ordered scan per queue: `queue IN (...) ORDER BY priority DESC, id` cannot
    # use the claim index for more than one queue, and MySQL would then sort (and, with FOR
    # UPDATE, lock) every queued row. The best of each queue's candidates win; the others'
    # locks end with this short transaction.
    candidates: list[Row] = []
    for queue in who.queues:
        query = _claim_query(who, queue, max_jobs)
        if skip_locked:
            query = query.with_for_update(skip_locked=True)
        candidates += [dict(r) for r in conn.execute(query).mappings()]
    rows = sorted(candidates, key=lambda r: (-r["priority"], r["id"]))[:max_jobs]
    leased = [_lease_one(conn, row, who) for row in rows]
    if leased:
        conn.execute(INSERT_EVENT, [event_values(r, "CLAIMED", r["db_now"], Status.QUEUED.value) for r in leased])
    return leased


def _claim_query(who: Claimant, queue: str, limit: int) -> sa.Select[Any]:
    return (
        sa.select(job, db_now().label("db_now"))
        .where(
            job.c.tenant == who.tenant,
            job.c.queue == queue,
            job.c.status == Status.QUEUED.value,
            job.c.run_after <= db_now(),
            job.c.job_type.in_(list(who.plans)),
        )
        .order_by(job.c.priority.desc(), job.c.id)
        .limit(limit)
    )


def _lease_one(conn: Connection, row: Row, who: Claimant) -> Row:
    now: datetime = row["db_now"]
    plan = who.plans[row["job_type"]]
    epoch = row["lease_epoch"] + 1
    changes = {
        "status": Status.RUNNING.value,
        "worker_id": who.worker_id,
        "worker_token": new_token(epoch),
        "lease_epoch": epoch,
        "lease_seconds": who.lease_seconds,
        "lease_expires_at": now + timedelta(seconds=who.lease_seconds),
        "heartbeat_at": now,
        "stalled": False,
        "attempt": row["attempt"] + 1,
        "stage": plan[0].code,
        "stage_index": 1,
        "stage_count": len(plan),
        "stages": json.dumps(stage_plans.to_json(plan), ensure_ascii=False),
        "processed_units": 0,
        "total_units": None,
        "started_at": row["started_at"] or now,
        "version": row["version"] + 1,
        "updated_at": now,
    }
    # The row is locked (FOR UPDATE, or SQLite's write lock), so the guard holds; it stays
    # as the rule that every change names the state it expects.
    update_guarded(conn, row, changes)
    return {**row, **changes}


def seen(conn: Connection, who: Claimant, now: datetime) -> None:
    """Remember the worker for ListWorkers."""
    values = {
        "tenant": who.tenant,
        "worker_id": who.worker_id,
        "queues": json.dumps(sorted(who.queues)),
        "job_types": json.dumps(sorted(who.plans)),
        "last_seen_at": now,
    }
    upsert(conn, worker_table, values, {k: values[k] for k in ("queues", "job_types", "last_seen_at")})


def touch_worker(conn: Connection, tenant: str, worker_id: str, now: datetime) -> None:
    conn.execute(
        sa.update(worker_table)
        .where(worker_table.c.tenant == tenant, worker_table.c.worker_id == worker_id)
        .values(last_seen_at=now)
    )


def held(conn: Connection, tenant: str, job_no: str, token: str, ending: str | None = None) -> tuple[Row, bool]:
    """The row if `token` holds its lease; (row, True) when `ending` replays a finished call."""
    row = load_job(conn, tenant, job_no)
    epoch = token_epoch(token)
    if row is not None and epoch is not None:
        if row["worker_token"] == token and row["lease_epoch"] == epoch:
            return row, False
        if ending is not None and row["ended_token"] == token and row["ended_kind"] == ending:
            return row, True
        if epoch <= row["lease_epoch"]:
            # A once-real lease calling late: evidence of a zombie worker. The store records
            # it in a transaction of its own, since this one rolls back with the refusal.
            raise LateCall(row, f"{ending or 'REPORT'} with the lease of epoch {epoch}")
    raise WorkerLeaseLost()


class LateCall(WorkerLeaseLost):
    """This worker no longer holds the job's lease."""

    def __init__(self, row: Row, detail: str) -> None:
        super().__init__()
        self.row = row
        self.detail = detail


def record_late_call(conn: Connection, late: LateCall) -> None:
    row = late.row
    record_event(
        conn, row, kind="LATE_CALL_REJECTED", from_status=row["status"], now=row["db_now"],
        visible=False, detail=late.detail, worker_id="",
    )  # fmt: skip


def renewal(row: Row) -> dict[str, object]:
    """Lease columns after news from the holder; a stalled lease revives."""
    now: datetime = row["db_now"]
    return {
        "lease_expires_at": now + timedelta(seconds=row["lease_seconds"]),
        "heartbeat_at": now,
        "stalled": False,
    }


def heartbeat(
    conn: Connection, tenant: str, worker_id: str, leases: Sequence[tuple[str, str]]
) -> list[tuple[str, str, datetime | None]]:
    """Renew each lease still held; (job_no, OK | CANCEL_REQUESTED | LOST, expiry) each."""
    states: list[tuple[str, str, datetime | None]] = []
    now: datetime | None = None
    for job_no, token in leases:
        row = load_job(conn, tenant, job_no)
        now = now or (row["db_now"] if row else None)
        if row is None or row["worker_token"] != token or row["lease_epoch"] != token_epoch(token):
            states.append((job_no, "LOST", None))
            continue
        renew = renewal(row)
        if row["stalled"]:
            apply(conn, row, renew, action=Action.HEARTBEAT, kind="LEASE_REVIVED", now=row["db_now"], token_guard=True)
        else:
            # A heartbeat renews the lease only: no version, no event, nothing a watcher sees.
            # Guarded on stalled = false: if a reaper marked it stalled since the read, the
            # rerun takes the revive path above and records it.
            renewed = conn.execute(
                sa.update(job)
                .where(
                    job.c.id == row["id"],
                    job.c.worker_token == token,
                    job.c.lease_epoch == row["lease_epoch"],
                    job.c.stalled.is_(False),
                )
                .values(**renew)
            )
            if renewed.rowcount != 1:
                raise RetryTransaction()
        state = "CANCEL_REQUESTED" if row["status"] == Status.CANCEL_REQUESTED.value else "OK"
        states.append((job_no, state, renew["lease_expires_at"]))  # type: ignore[arg-type]
    if now is not None:
        touch_worker(conn, tenant, worker_id, now)
    return states


def report(
    conn: Connection, tenant: str, job_no: str, token: str, *, stage: str, processed: int,
    total: int | None, checkpoint: bytes | None, note: str,
) -> Row:  # fmt: skip
    row, _ = held(conn, tenant, job_no, token)
    plan = stage_plans.from_json(json.loads(row["stages"]))
    current = Progress(
        stage_index=row["stage_index"], stage_count=row["stage_count"],
        processed_units=row["processed_units"], total_units=row["total_units"],
    )  # fmt: skip
    after = apply_report(plan, current, stage, processed, total)
    changes: dict[str, object] = {
        **renewal(row),
        "stage": stage,
        "stage_index": after.stage_index,
        "processed_units": after.processed_units,
        "total_units": after.total_units,
    }
    if checkpoint is not None:
        changes["checkpoint"] = checkpoint
    kind = "STAGE_CHANGED" if after.stage_index != current.stage_index else "PROGRESS"
    return apply(
        conn, row, changes, action=Action.REPORT, kind=kind, now=row["db_now"], token_guard=True, detail=note or None
    )


def _ended(row: Row, kind: str, status: Status) -> dict[str, object]:
    return {
        "status": status.value,
        "worker_token": None,
        "ended_token": row["worker_token"],
        "ended_kind": kind,
        "lease_expires_at": None,
        "stalled": False,
    }


def complete(conn: Connection, tenant: str, job_no: str, token: str, result: Artifact) -> Row:
    """RUNNING or CANCEL_REQUESTED -> READY with its artifact, in one transaction."""
    row, replay = held(conn, tenant, job_no, token, "COMPLETE")
    if replay:
        return row
    now: datetime = row["db_now"]
    fields = _artifact_values(result)
    changes = {**_ended(row, "COMPLETE", Status.READY), "finished_at": now}
    # The guarded UPDATE first: a concurrent replay of this Complete waits on the row lock, matches
    # nothing, and reruns as a replay. Inserting the artifact first made it hit uq_artifact_job.
    done = apply(conn, {**row, **fields}, changes, action=Action.COMPLETE, kind="COMPLETED", now=now, token_guard=True)
    conn.execute(sa.insert(artifact).values(job_id=row["id"], created_at=now, **fields))
    return done


def _artifact_values(result: Artifact) -> dict[str, object]:
    return {
        "uri": result.uri,
        "size_bytes": result.size_bytes,
        "sha256": result.sha256,
        "content_type": result.content_type,
        "summary": result.summary,
    }


@dataclass(frozen=True, kw_only=True)
class Failure:
    category: ErrorCategory
    message: str
    retryable: bool
    detail: str


def fail(conn: Connection, tenant: str, job_no: str, token: str, failure: Failure) -> Row:
    """Back to QUEUED after a backoff while attempts remain, else FAILED; CANCELLED if asked to stop."""
    row, replay = held(conn, tenant, job_no, token, "FAIL")
    if replay:
        return row
    now: datetime = row["db_now"]
    evidence = f"{failure.category.value}: {failure.message}\n{failure.detail}".strip()
    error = {
        "error_category": failure.category.value,
        "error_stage": row["stage"],
        "error_message": plain_message(failure.message),
        "error_retryable": failure.retryable,
        "error_detail": failure.detail or None,
    }
    if row["status"] == Status.CANCEL_REQUESTED.value:
        changes = {**_ended(row, "FAIL", Status.CANCELLED), "finished_at": now}
        return apply(
            conn, row, changes, action=Action.FAIL, kind="CANCELLED", now=now, token_guard=True, detail=evidence
        )
    charged = row["attempt"] - row["attempt_base"]
    if failure.retryable and charged < row["max_attempts"]:
        delay = policy_of(row).backoff_after(charged)
        changes = {
            **_ended(row, "FAIL", Status.QUEUED), **error, **UNSTAGED,
            "run_after": now + timedelta(seconds=delay),
        }  # fmt: skip
        return apply(
            conn, row, changes, action=Action.FAIL, kind="RETRY_SCHEDULED", now=now, token_guard=True, detail=evidence
        )
    changes = {**_ended(row, "FAIL", Status.FAILED), **error, "finished_at": now}
    return apply(conn, row, changes, action=Action.FAIL, kind="FAILED", now=now, token_guard=True, detail=evidence)


def policy_of(row: Row) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=row["max_attempts"],
        initial_backoff_s=row["initial_backoff_s"],
        max_backoff_s=row["max_backoff_s"],
        backoff_multiplier=row["backoff_multiplier"],
    )


def confirm_cancel(conn: Connection, tenant: str, job_no: str, token: str, note: str) -> Row:
    row, replay = held(conn, tenant, job_no, token, "CONFIRM_CANCEL")
    if replay:
        return row
    if row["status"] != Status.CANCEL_REQUESTED.value:
        raise CancelNotRequested()
    now: datetime = row["db_now"]
    changes = {**_ended(row, "CONFIRM_CANCEL", Status.CANCELLED), "finished_at": now}
    return apply(
        conn, row, changes, action=Action.CONFIRM_CANCEL, kind="CANCELLED", now=now, token_guard=True,
        detail=note or None,
    )  # fmt: skip


def release(conn: Connection, tenant: str, job_no: str, token: str, checkpoint: bytes | None, note: str) -> Row:
    """A graceful stop: back to QUEUED with the checkpoint, the attempt not charged."""
    row, replay = held(conn, tenant, job_no, token, "RELEASE")
    if replay:
        return row
    now: datetime = row["db_now"]
    if row["status"] == Status.CANCEL_REQUESTED.value:
        changes = {**_ended(row, "RELEASE", Status.CANCELLED), "finished_at": now}
        return apply(
            conn, row, changes, action=Action.RELEASE, kind="CANCELLED", now=now, token_guard=True,
            detail=note or None,
        )  # fmt: skip
    changes = {
        **_ended(row, "RELEASE", Status.QUEUED), **UNSTAGED,
        "attempt_base": row["attempt_base"] + 1,
        "run_after": now,
    }  # fmt: skip
    if checkpoint is not None:
        changes["checkpoint"] = checkpoint
    return apply(
        conn, row, changes, action=Action.RELEASE, kind="RELEASED", now=now, token_guard=True, detail=note or None
    )
