"""The timeout sweeps: jobs, attempts and progress past their time limits (jobwire.domain.timeouts).

Three steps, each one short transaction for up to BATCH jobs, each found through its own
index (status first, then the deadline) and decided on the database clock, on the row
read again FOR UPDATE SKIP LOCKED:

1. `JobTimeout`: a job past its job_deadline ends FAILED TIMEOUT, not retryable, whatever
   its status (WAITING for a review included). First, because it outranks an attempt's own limit.
2. `AttemptTimeout`: a leased attempt past its attempt_deadline (a WAITING job holds no
   lease and has none) loses its lease and ends as a
   retryable TIMEOUT failure: QUEUED after the backoff while attempts remain, else FAILED;
   CANCELLED when a cancel was pending.
3. `NoProgress`: a RUNNING job past its progress_deadline is marked no progress (an
   Inspect finding, a line in its view); under on_no_progress FAIL it ends as in 2.

A lease taken back for time keeps its token as the ended one (`leases.revoked_for_time`),
so its holder's next call hears TIMED_OUT rather than LOST. Every write is guarded by id,
version and status, and for a lease by token and epoch, so sweeps in many processes
never act twice: a loser matches no row, reads it again, and finds nothing left to do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.changes import Change, Row
from jobwire.db.leases import revoked_for_time
from jobwire.db.reads import now_value
from jobwire.db.reaper import Read, RunOps, SweepOp, apply_each, iso_time, leased
from jobwire.db.rows import attempts_of, ending_values, policy_of
from jobwire.db.tables import job
from jobwire.domain.endings import Ending, on_attempt_timeout, on_job_timeout, on_no_progress
from jobwire.domain.evidence import EventKind
from jobwire.domain.states import LEASED, Action, Status
from jobwire.domain.timeouts import OnNoProgress

BATCH = 200  # jobs per step and run; the rest wait for the next run
_LEASED = [s.value for s in LEASED]
_UNFINISHED = [Status.QUEUED.value, Status.WAITING.value, *_LEASED]
Due = Callable[[Connection, int], list[tuple[str, str]]]


@dataclass(frozen=True, kw_only=True)
class Swept:
    """What one run did: jobs failed past job_timeout, attempts ended, jobs found without progress."""

    jobs: int = 0
    attempts: int = 0
    no_progress: int = 0

    def __bool__(self) -> bool:
        return any((self.jobs, self.attempts, self.no_progress))


async def sweep(read: Read, run: RunOps, *, by: str, batch: int = BATCH) -> Swept:
    """One run of the three steps. `read` runs a query (on a thread), `run` applies operations."""

    async def step(due: Due, op: type[_TimeoutOp]) -> int:
        found = await read(lambda conn: due(conn, batch))
        return sum(
            kind is not None for kind in await apply_each(run, [op(tenant=t, job_no=n, by=by) for t, n in found])
        )

    return Swept(
        jobs=await step(jobs_due, JobTimeout),
        attempts=await step(attempts_due, AttemptTimeout),
        no_progress=await step(progress_due, NoProgress),
    )


def jobs_due(conn: Connection, limit: int) -> list[tuple[str, str]]:
    """(tenant, job_no) of unfinished jobs past their job_deadline, oldest first (ix_job_deadline)."""
    return _due(conn, job.c.status.in_(_UNFINISHED), job.c.job_deadline, limit)


def attempts_due(conn: Connection, limit: int) -> list[tuple[str, str]]:
    """(tenant, job_no) of leased jobs past their attempt_deadline, oldest first (ix_job_attempt_deadline)."""
    return _due(conn, job.c.status.in_(_LEASED), job.c.attempt_deadline, limit)


def progress_due(conn: Connection, limit: int) -> list[tuple[str, str]]:
    """(tenant, job_no) of RUNNING jobs past their progress_deadline not yet marked (ix_job_no_progress)."""
    running = sa.and_(job.c.status == Status.RUNNING.value, job.c.no_progress == sa.false())
    return _due(conn, running, job.c.progress_deadline, limit)


def _due(
    conn: Connection, where: sa.ColumnElement[bool], deadline: sa.Column[Any], limit: int
) -> list[tuple[str, str]]:
    query = (
        sa.select(job.c.tenant, job.c.job_no).where(where, deadline < now_value(conn)).order_by(deadline).limit(limit)
    )
    return [(r.tenant, r.job_no) for r in conn.execute(query)]


@dataclass(frozen=True, kw_only=True)
class _TimeoutOp(SweepOp):
    tenant: str
    job_no: str
    by: str  # names the process in the evidence


class JobTimeout(_TimeoutOp):
    """FAILED TIMEOUT, not retryable, for a job past its job_deadline; a lease it holds is revoked."""

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if row is None or row["status"] not in _UNFINISHED or not _past(row, "job_deadline"):
            return None
        why = f"the job ran past its job_timeout of {row['job_timeout_s']:g}s; {evidence(row, 'job_deadline', self.by)}"
        ending = on_job_timeout(row["stage"] or "")
        if leased(row):
            return _revoked(Action.JOB_TIMEOUT, row, ending, now, why)
        values = {**ending_values(ending, now), "error_detail": why}
        return Change(action=Action.JOB_TIMEOUT, kind=ending.kind, values=values, detail=why)


class AttemptTimeout(_TimeoutOp):
    """Revoke the lease of an attempt past its attempt_deadline; the job ends as a retryable TIMEOUT would."""

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if not leased(row):
            return None
        assert row is not None
        if not _past(row, "attempt_deadline"):
            return None
        limit = f"attempt {row['attempt']} ran past its attempt_timeout of {row['attempt_timeout_s']:g}s"
        ending = on_attempt_timeout(Status(row["status"]), attempts_of(row), policy_of(row), row["stage"], now)
        return _revoked(
            Action.ATTEMPT_TIMEOUT, row, ending, now, f"{limit}; {evidence(row, 'attempt_deadline', self.by)}"
        )


class NoProgress(_TimeoutOp):
    """Mark a RUNNING job with no progress for its stage_timeout; under FAIL, end it as an attempt timeout."""

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if not leased(row):
            return None
        assert row is not None
        if row["status"] != Status.RUNNING.value or row["no_progress"] or not _past(row, "progress_deadline"):
            return None
        limit = f"no new units and no new stage for its stage_timeout of {row['stage_timeout_s']:g}s"
        why = f"{limit}; {evidence(row, 'progress_deadline', self.by)}; on_no_progress {row['on_no_progress']}"
        on = OnNoProgress(row["on_no_progress"])
        ending = on_no_progress(Status.RUNNING, on, attempts_of(row), policy_of(row), row["stage"], now)
        if ending is None:
            return Change(
                action=Action.NO_PROGRESS, kind=EventKind.NO_PROGRESS, values={"no_progress": True}, fenced=True,
                detail=why,
            )  # fmt: skip
        return _revoked(Action.NO_PROGRESS, row, ending, now, why)


def _past(row: Row, deadline: str) -> bool:
    return row[deadline] is not None and row[deadline] <= row["db_now"]


def _revoked(action: Action, row: Row, ending: Ending, now: datetime, why: str) -> Change:
    """The lease taken back for time, and the job where `ending` says."""
    why += "; lease revoked"
    values = {**revoked_for_time(row), **ending_values(ending, now)}
    if ending.error is not None:
        values["error_detail"] = why
    return Change(action=action, kind=ending.kind, values=values, fenced=True, detail=why)


def evidence(row: Row, deadline: str, by: str) -> str:
    """What an operator needs to judge a timeout, as one line."""
    total = row["total_units"]
    units = f"{row['processed_units']}/{total if total is not None else '?'}"
    parts = [
        f"{deadline.replace('_', ' ')} {iso_time(row[deadline])} (database clock {iso_time(row['db_now'])})",
        f"status {row['status']}",
        f"attempt {row['attempt']} of {row['attempt_base'] + row['max_attempts']}",
    ]
    if row["worker_token"] is not None:
        parts += [
            f"worker {row['worker_id'] or '?'}",
            f"lease of epoch {row['lease_epoch']}",
            f"stage {row['stage'] or '-'} {row['stage_index']}/{row['stage_count']}",
            f"units {units}",
            f"last progress {iso_time(row['progress_at'])}",
            f"last heartbeat {iso_time(row['heartbeat_at'])}",
        ]
    parts.append(f"sweep {by}")
    return "; ".join(parts)
