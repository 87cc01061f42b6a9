"""What users and operators decide about a job: cancel, retry, resolve a review, requeue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobwire.db.changes import Change, JobOp, Row
from jobwire.db.rows import attempts_of, ending_values, holding_of, holding_values, record_from_row
from jobwire.domain.commands import Scope
from jobwire.domain.errors import JobNotFound
from jobwire.domain.job import JobRecord
from jobwire.domain.lease import revoke
from jobwire.domain.review import Review, evidence
from jobwire.domain.states import Action, Status
from jobwire.domain.user_decisions import on_cancel, on_requeue, on_resolve, on_retry, requeue_detail


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
    """QUEUED ends at once; RUNNING asks the worker to stop at its next safe point
    (jobwire.domain.user_decisions.on_cancel)."""

    scope: Scope
    job_no: str

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        status = Status(_found(row)["status"])
        assert row is not None
        # Only a RUNNING job's stage can refuse: its record is read for that one question.
        cancellable = status is Status.RUNNING and record_from_row(row).cancellable
        ending = on_cancel(status, cancellable)
        if ending is None:
            return None
        return Change(action=Action.CANCEL, kind=ending.kind, values=ending_values(ending, now))


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
        values = {**ending_values(retried.ending, now), "finished_at": None}
        return Change(action=Action.RETRY, kind=retried.ending.kind, values=values, detail=retried.detail)


@dataclass(frozen=True, kw_only=True)
class Resolve(_UserAction):
    """A person's decision on a WAITING job (jobwire.domain.user_decisions.on_resolve)."""

    scope: Scope
    job_no: str
    review: Review

    def decide(self, row: Row | None, now: datetime) -> Change:
        row = _found(row)
        ending = on_resolve(Status(row["status"]), self.review, attempts_of(row), row["stage"] or "", now)
        values = {
            **ending_values(ending, now),
            "review_decision": self.review.decision.value,
            "review_note": self.review.note,
            "review_by": self.review.resolved_by,
        }
        return Change(action=Action.RESOLVE, kind=ending.kind, values=values, detail=evidence(self.review))


@dataclass(frozen=True, kw_only=True)
class Requeue(_UserAction):
    """An operator's decision for a stalled job: revoke the lease, queue again, charge nothing;
    refused while the lease is alive (jobwire.domain.user_decisions.on_requeue)."""

    scope: Scope
    job_no: str
    reason: str = ""
    by: str = ""  # the operator's name (the auth file's `name`): the trail says who decided
    fresh = True  # the row is read in this transaction: "is the lease alive" is judged at its time

    def decide(self, row: Row | None, now: datetime) -> Change:
        row = _found(row)
        holding = holding_of(row)
        ending = on_requeue(Status(row["status"]), holding, attempts_of(row), now)
        values = {**holding_values(revoke(holding)), **ending_values(ending, now)}
        return Change(
            action=Action.REQUEUE, kind=ending.kind, values=values, detail=requeue_detail(self.by, self.reason)
        )
