"""What users and operators decide about a job: cancel, retry, resolve a review, requeue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobwire.db.changes import Change, JobOp, Row
from jobwire.db.rows import UNSTAGED, ending_values, holding_of, holding_values, record_from_row
from jobwire.domain.commands import Scope
from jobwire.domain.endings import on_resolve
from jobwire.domain.errors import InvalidTransition, JobNotCancellable, JobNotFound, NotWaiting
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import JobRecord
from jobwire.domain.lease import revoke
from jobwire.domain.review import Review, evidence
from jobwire.domain.states import Action, Status
from jobwire.domain.user_decisions import on_retry


class _UserAction(JobOp[JobRecord]):
    """A person's decision, scoped as their reads are: a job of a queue their token may not
    use is not found, exactly as another tenant's."""

    scope: Scope

    @property
    def tenant(self) -> str:  # type: ignore[override]
        return self.scope.tenant

    def sees(self, row: Row) -> bool:
        return self.scope.sees(row["tenant"], row["queue"])

    def outcome(self, row: Row | None, change: Change | None) -> JobRecord:
        assert row is not None
        return record_from_row(row)


def _found(row: Row | None) -> Row:
    if row is None:
        raise JobNotFound()
    return row


@dataclass(frozen=True, kw_only=True)
class Cancel(_UserAction):
    """QUEUED ends at once; RUNNING asks the worker to stop at its next safe point."""

    scope: Scope
    job_no: str

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        status = Status(_found(row)["status"])
        assert row is not None
        if status in (Status.CANCEL_REQUESTED, Status.CANCELLED):
            return None  # idempotent
        if status in (Status.QUEUED, Status.WAITING):
            values = {"status": Status.CANCELLED.value, "finished_at": now}
            return Change(action=Action.CANCEL, kind=EventKind.CANCELLED, values=values)
        if status is Status.RUNNING:
            if not record_from_row(row).cancellable:
                raise JobNotCancellable("the job is in a stage that cannot be cancelled")
            return Change(
                action=Action.CANCEL, kind=EventKind.CANCEL_REQUESTED, values={"status": Status.CANCEL_REQUESTED.value}
            )
        raise JobNotCancellable(f"a {status.value} job cannot be cancelled")


@dataclass(frozen=True, kw_only=True)
class Retry(_UserAction):
    """FAILED with a retryable error (or any FAILED job, forced by an admin) -> QUEUED with a
    fresh budget of attempts (jobwire.domain.user_decisions.on_retry)."""

    scope: Scope
    job_no: str
    forced_by: str | None = None  # the admin's name, when RetryRequest.force

    def decide(self, row: Row | None, now: datetime) -> Change:
        job = record_from_row(_found(row))
        retried = on_retry(job.status, job.error, job.attempt, now, forced_by=self.forced_by)
        values = {**ending_values(retried.ending, now), "attempt_base": retried.attempt_base, "finished_at": None}
        return Change(action=Action.RETRY, kind=retried.ending.kind, values=values, detail=retried.detail)


@dataclass(frozen=True, kw_only=True)
class Resolve(_UserAction):
    """A person's decision on a WAITING job: APPROVE queues it at once, the attempt not charged; REJECT fails it."""

    scope: Scope
    job_no: str
    review: Review

    def decide(self, row: Row | None, now: datetime) -> Change:
        row = _found(row)
        if row["status"] != Status.WAITING.value:
            raise NotWaiting(f"a {row['status']} job is not waiting for review")
        ending = on_resolve(self.review, row["stage"] or "", now)
        values = {
            **ending_values(ending, now),
            "review_decision": self.review.decision.value,
            "review_note": self.review.note,
            "review_by": self.review.resolved_by,
        }
        if ending.status is Status.QUEUED:
            # As a Release: the attempt that asked for the review is given back.
            values["attempt_base"] = row["attempt_base"] + 1
        return Change(action=Action.RESOLVE, kind=ending.kind, values=values, detail=evidence(self.review))


@dataclass(frozen=True, kw_only=True)
class Requeue(_UserAction):
    """An operator's decision for a stalled job: revoke the lease, queue again, charge nothing.

    A lease that is still alive is refused: its worker would run on until its next
    heartbeat while another worker starts the job, so side effects would happen twice.
    Cancel such a job, or wait for its lease to expire.
    """

    scope: Scope
    job_no: str
    reason: str = ""
    fresh = True  # "is the lease alive" is the database clock's to say, on the row as it is now

    def decide(self, row: Row | None, now: datetime) -> Change:
        row = _found(row)
        if row["status"] != Status.RUNNING.value:
            raise InvalidTransition(f"a {row['status']} job cannot be requeued")
        expires = row["lease_expires_at"]
        if not row["stalled"] and expires is not None and expires > row["db_now"]:
            raise InvalidTransition(
                "the job's lease is alive; cancel it or wait for the lease to expire", reason="LEASE_ACTIVE"
            )
        values = {
            **holding_values(revoke(holding_of(row))),
            "status": Status.QUEUED.value,
            "attempt_base": row["attempt_base"] + 1,
            "run_after": now,
            **UNSTAGED,
        }
        return Change(action=Action.REQUEUE, kind=EventKind.REQUEUED, values=values, detail=self.reason or None)
