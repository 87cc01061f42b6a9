"""What workers do to a job they lease after the claim: heartbeat, report, and the endings.

Every call after Claim names a token `<epoch>.<secret>`; the UPDATE checks job, token and
epoch, so a worker whose lease was revoked can never write again. A token that does not
match is answered WORKER_LEASE_LOST whatever the reason (no oracle), and recorded as
evidence when it was once a real lease of this job. Each call is a `JobOp` (see
jobwire.db.changes), so concurrent calls share one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from jobwire.db.changes import Change, JobOp, LateCall, Row
from jobwire.db.lease_tokens import issued, token_epoch, was_issued
from jobwire.db.rows import (
    attempts_of,
    ending_values,
    holding_of,
    holding_values,
    plan_of,
    policy_of,
    progress_moved,
    record_from_row,
    review_values,
)
from jobwire.domain.commands import EVERY_TENANT, Failure, ProgressReport
from jobwire.domain.endings import on_await_review, on_confirm_cancel, on_fail, on_release
from jobwire.domain.errors import WorkerLeaseLost
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import Artifact, JobFailure, JobRecord, plain_message
from jobwire.domain.kept_results import KeptResult
from jobwire.domain.lease import LeaseState, LeaseStatus, end, revoke
from jobwire.domain.progress import Progress, apply_report, moved
from jobwire.domain.review import ReviewRequest
from jobwire.domain.states import Action, Status

T = TypeVar("T")


def replayed(row: Row | None, token: str, ending: str | None = None) -> bool:
    """Whether this call replays `ending`, already done with this token (True: nothing to write),
    or goes on because the token holds the lease (False).

    Anything else is WORKER_LEASE_LOST: as LateCall (kept as evidence) when the token was
    once a real lease of this job.
    """
    epoch = token_epoch(token)
    if row is not None and epoch is not None:
        if row["worker_token"] == token and row["lease_epoch"] == epoch:
            return False
        if ending is not None and row["ended_token"] == token and row["ended_kind"] == ending:
            return True
        if timed_out(row, token):
            raise LateCall(f"{ending or 'REPORT'} with the lease of epoch {epoch}, which timed out", timed_out=True)
        if was_issued(row, token, epoch):
            raise LateCall(f"{ending or 'REPORT'} with the lease of epoch {epoch}")
    raise WorkerLeaseLost()  # a token this job never issued: refused, and nothing written


def timed_out(row: Row | None, token: str) -> bool:
    """True when `token`'s lease was revoked because its attempt ran out of time (see `revoked_for_time`)."""
    return row is not None and row["ended_token"] == token and row["ended_kind"] == LeaseState.TIMED_OUT.value


def revoked_for_time(row: Row) -> dict[str, object]:
    """The lease is taken back because time ran out: a new epoch, and its token remembered, so
    its holder is told TIMED_OUT rather than LOST."""
    return {
        **holding_values(revoke(holding_of(row))),
        "ended_token": row["worker_token"],
        "ended_kind": LeaseState.TIMED_OUT.value,
    }


@dataclass(frozen=True, kw_only=True)
class _OnLease(JobOp[T]):
    """A call made with a lease's token."""

    tenant: str
    job_no: str
    token: str

    def names(self, row: Row) -> bool:
        # A shared fleet's call names a number several tenants' jobs may have: its job is the
        # one its token is a lease of (tokens are signed per job, so no other job's matches).
        return issued(row, self.token) if self.tenant == EVERY_TENANT else super().names(row)


def _status(row: Row | None) -> LeaseStatus:
    assert row is not None
    state = LeaseState.CANCEL_REQUESTED if row["status"] == Status.CANCEL_REQUESTED.value else LeaseState.OK
    return LeaseStatus(job_no=row["job_no"], state=state, lease_expires_at=row["lease_expires_at"])


@dataclass(frozen=True, kw_only=True)
class Renew(_OnLease[LeaseStatus]):
    """One lease of a heartbeat: renewed with no version and no event, unless it must revive."""

    def decide(self, row: Row | None, now: datetime) -> Change:
        if row is None or row["worker_token"] != self.token or row["lease_epoch"] != token_epoch(self.token):
            # No evidence for heartbeats: a worker beats until its handler stops, however late.
            raise WorkerLeaseLost(timed_out=timed_out(row, self.token))
        if row["stalled"]:
            # A stalled lease revives: a version and an event, so watchers see it running again.
            return Change(
                action=Action.HEARTBEAT,
                kind=EventKind.LEASE_REVIVED,
                values={"stalled": False},
                fenced=True,
                renew=True,
            )
        return Change(action=Action.HEARTBEAT, kind=None, fenced=True, renew=True, versioned=False)

    def outcome(self, row: Row | None, change: Change | None) -> LeaseStatus:
        return _status(row)


@dataclass(frozen=True, kw_only=True)
class Report(_OnLease[LeaseStatus]):
    stage: str
    processed: int
    total: int | None = None
    checkpoint: bytes | None = None
    note: str = ""

    @classmethod
    def of(cls, report: ProgressReport) -> Report:
        return cls(
            tenant=report.tenant, job_no=report.job_no, token=report.token, stage=report.stage,
            processed=report.processed, total=report.total, checkpoint=report.checkpoint, note=report.note,
        )  # fmt: skip

    def decide(self, row: Row | None, now: datetime) -> Change:
        replayed(row, self.token)  # a report is never a replay: refused unless the lease is held
        assert row is not None
        current = Progress(
            stage_index=row["stage_index"], stage_count=row["stage_count"],
            processed_units=row["processed_units"], total_units=row["total_units"],
        )  # fmt: skip
        after = apply_report(plan_of(row["stages"]), current, self.stage, self.processed, self.total)
        values: dict[str, object] = {
            "stage": self.stage,
            "stage_index": after.stage_index,
            "processed_units": after.processed_units,
            "total_units": after.total_units,
            "stalled": False,
        }
        if self.checkpoint is not None:
            values["checkpoint"] = self.checkpoint
        if moved(current, after):
            values.update(progress_moved(row, now))
        kind = EventKind.STAGE_CHANGED if after.stage_index != current.stage_index else EventKind.PROGRESS
        return Change(action=Action.REPORT, kind=kind, values=values, detail=self.note or None, fenced=True, renew=True)

    def outcome(self, row: Row | None, change: Change | None) -> LeaseStatus:
        return _status(row)


def _ended(row: Row, kind: str, status: Status) -> dict[str, object]:
    """The holder ends its lease in `status`; a replay of this ending (same token, same kind) is recognised."""
    return {
        **holding_values(end(holding_of(row))),
        "status": status.value,
        "ended_token": row["worker_token"],
        "ended_kind": kind,
    }


class _Ending(_OnLease[JobRecord]):
    def outcome(self, row: Row | None, change: Change | None) -> JobRecord:
        assert row is not None
        return record_from_row(row)


@dataclass(frozen=True, kw_only=True)
class Complete(_Ending):
    """RUNNING or CANCEL_REQUESTED -> READY with its artifact, in one transaction."""

    result: Artifact
    kept: KeptResult | None = None

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "COMPLETE"):
            return None
        assert row is not None
        values = {**_ended(row, "COMPLETE", Status.READY), "finished_at": now}
        return Change(
            action=Action.COMPLETE, kind=EventKind.COMPLETED, values=values, fenced=True, artifact=self.result,
            kept=self.kept,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Fail(_Ending):
    """Back to QUEUED after a backoff while attempts remain, else FAILED; CANCELLED if asked to stop."""

    failure: Failure

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "FAIL"):
            return None
        assert row is not None
        failure = self.failure
        told = JobFailure(
            category=failure.category, stage=row["stage"], message=plain_message(failure.message),
            retryable=failure.retryable,
        )  # fmt: skip
        ending = on_fail(Status(row["status"]), told, attempts_of(row), policy_of(row), now)
        values = {**_ended(row, "FAIL", ending.status), **ending_values(ending, now)}
        if ending.error is not None:
            values["error_detail"] = failure.detail or None
        evidence = f"{failure.category.value}: {failure.message}\n{failure.detail}".strip()
        return Change(action=Action.FAIL, kind=ending.kind, values=values, fenced=True, detail=evidence)


@dataclass(frozen=True, kw_only=True)
class ConfirmCancel(_Ending):
    """CANCEL_REQUESTED -> CANCELLED (jobwire.domain.endings.on_confirm_cancel)."""

    note: str = ""

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "CONFIRM_CANCEL"):
            return None
        assert row is not None
        ending = on_confirm_cancel(Status(row["status"]))
        values = {**_ended(row, "CONFIRM_CANCEL", ending.status), **ending_values(ending, now)}
        return Change(
            action=Action.CONFIRM_CANCEL, kind=ending.kind, values=values, fenced=True, detail=self.note or None
        )


@dataclass(frozen=True, kw_only=True)
class Release(_Ending):
    """A graceful stop: back to QUEUED with the checkpoint, the attempt not charged; a pending
    cancel wins (jobwire.domain.endings.on_release)."""

    checkpoint: bytes | None = None
    note: str = ""

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "RELEASE"):
            return None
        assert row is not None
        ending = on_release(Status(row["status"]), attempts_of(row), now)
        values = {**_ended(row, "RELEASE", ending.status), **ending_values(ending, now)}
        if ending.status is Status.QUEUED and self.checkpoint is not None:
            values["checkpoint"] = self.checkpoint
        return Change(action=Action.RELEASE, kind=ending.kind, values=values, fenced=True, detail=self.note or None)


@dataclass(frozen=True, kw_only=True)
class AwaitReview(_Ending):
    """RUNNING -> WAITING for a person: the lease ends as on Release, and no time runs for the
    attempt; a pending cancel wins (jobwire.domain.endings.on_await_review)."""

    request: ReviewRequest
    checkpoint: bytes | None = None

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "AWAIT_REVIEW"):
            return None
        assert row is not None
        ending = on_await_review(Status(row["status"]))
        values = {**_ended(row, "AWAIT_REVIEW", ending.status), **ending_values(ending, now)}
        if ending.status is not Status.WAITING:
            return Change(action=Action.AWAIT_REVIEW, kind=ending.kind, values=values, fenced=True)
        values.update(
            review_values(self.request),
            # No attempt runs while a person decides: the attempt and progress clocks stop.
            attempt_deadline=None,
            progress_deadline=None,
            no_progress=False,
        )
        if self.checkpoint is not None:
            values["checkpoint"] = self.checkpoint
        items = f"; items: {len(self.request.items)}" if self.request.items else ""
        return Change(
            action=Action.AWAIT_REVIEW, kind=ending.kind, values=values, fenced=True,
            detail=f"waiting for review by {self.request.assignee}{items}",
        )  # fmt: skip
