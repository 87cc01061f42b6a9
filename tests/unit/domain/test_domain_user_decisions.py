"""A person's Cancel, Retry, Resolve and Requeue, decided on values: what each job becomes, or why not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobwire.domain.endings import Attempts
from jobwire.domain.errors import InvalidTransition, JobNotCancellable, NotRetryable, NotWaiting
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import ErrorCategory, JobFailure
from jobwire.domain.lease import Holding, alive
from jobwire.domain.review import Decision, Review
from jobwire.domain.states import Action, Status, allowed
from jobwire.domain.user_decisions import on_cancel, on_requeue, on_resolve, on_retry, requeue_detail

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def failure(category: ErrorCategory = ErrorCategory.PROCESSING_ERROR, *, retryable: bool) -> JobFailure:
    return JobFailure(category=category, stage="PROCESSING", message="boom", retryable=retryable)


def test_a_retryable_failure_is_queued_at_once_with_a_fresh_budget() -> None:
    retried = on_retry(Status.FAILED, failure(retryable=True), 3, NOW)
    assert (retried.ending.status, retried.ending.kind, retried.ending.run_after) == (
        Status.QUEUED,
        EventKind.RETRIED,
        NOW,
    )
    assert retried.ending.attempt_base == 3  # the three attempts made no longer count; the next is number 4
    assert retried.detail is None  # an ordinary retry: the event says nothing more
    assert allowed(Action.RETRY, Status.FAILED, retried.ending.status)  # the move the table allows


def test_a_non_retryable_failure_is_refused_saying_an_admin_may_force_it() -> None:
    hint = r"\(INPUT_INVALID\) is not retryable; an admin may force a retry"
    with pytest.raises(NotRetryable, match=hint) as refused:
        on_retry(Status.FAILED, failure(ErrorCategory.INPUT_INVALID, retryable=False), 1, NOW)
    assert "jobctl retry --force" in refused.value.message


def test_an_admin_forces_any_failed_job_and_the_trail_names_them() -> None:
    retried = on_retry(Status.FAILED, failure(ErrorCategory.INPUT_INVALID, retryable=False), 2, NOW, forced_by="alice")
    assert (retried.ending.status, retried.ending.attempt_base) == (Status.QUEUED, 2)
    assert retried.detail == "forced by admin alice: error was INPUT_INVALID"
    again = on_retry(Status.FAILED, failure(ErrorCategory.TIMEOUT, retryable=True), 2, NOW, forced_by="alice")
    assert again.detail == "forced by admin alice: error was TIMEOUT, retryable"


@pytest.mark.parametrize("forced_by", [None, "alice"])
@pytest.mark.parametrize("status", [s for s in Status if s is not Status.FAILED])
def test_only_a_failed_job_is_retried_forced_or_not(status: Status, forced_by: str | None) -> None:
    with pytest.raises(InvalidTransition) as refused:
        on_retry(status, failure(retryable=True), 1, NOW, forced_by=forced_by)
    assert refused.value.reason == "NOT_RETRYABLE"
    assert f"a {status.value} job cannot be retried" in refused.value.message


# ------------------------------------------------------------------------------ Cancel


@pytest.mark.parametrize("status", [Status.QUEUED, Status.WAITING])
def test_a_job_nobody_runs_is_cancelled_at_once(status: Status) -> None:
    ending = on_cancel(status, cancellable=True)
    assert ending is not None and (ending.status, ending.kind) == (Status.CANCELLED, EventKind.CANCELLED)
    assert allowed(Action.CANCEL, status, ending.status)


def test_a_running_job_is_asked_to_stop_unless_its_stage_refuses() -> None:
    ending = on_cancel(Status.RUNNING, cancellable=True)
    assert ending is not None and (ending.status, ending.kind) == (
        Status.CANCEL_REQUESTED,
        EventKind.CANCEL_REQUESTED,
    )
    assert allowed(Action.CANCEL, Status.RUNNING, ending.status)
    with pytest.raises(JobNotCancellable, match="a stage that cannot be cancelled"):
        on_cancel(Status.RUNNING, cancellable=False)


@pytest.mark.parametrize("status", [Status.CANCEL_REQUESTED, Status.CANCELLED])
def test_cancelling_again_changes_nothing(status: Status) -> None:
    assert on_cancel(status, cancellable=False) is None


@pytest.mark.parametrize("status", [Status.READY, Status.FAILED])
def test_a_job_that_ended_otherwise_cannot_be_cancelled(status: Status) -> None:
    with pytest.raises(JobNotCancellable, match=f"a {status.value} job cannot be cancelled"):
        on_cancel(status, cancellable=True)


def test_every_status_is_decided_by_cancel() -> None:
    decided = {Status.QUEUED, Status.WAITING, Status.RUNNING, Status.CANCEL_REQUESTED, Status.CANCELLED}
    assert decided | {Status.READY, Status.FAILED} == set(Status)  # a new status must be decided here


# ------------------------------------------------------------------------------ Resolve

ATTEMPTS = Attempts(attempt=3, base=1, budget=5)


def test_an_approved_review_queues_the_job_at_once_and_gives_the_attempt_back() -> None:
    approved = Review(decision=Decision.APPROVE, note="", resolved_by="bob")
    ending = on_resolve(Status.WAITING, approved, ATTEMPTS, "check", NOW)
    assert (ending.status, ending.kind, ending.run_after, ending.attempt_base) == (
        Status.QUEUED,
        EventKind.REVIEW_APPROVED,
        NOW,
        2,
    )
    assert allowed(Action.RESOLVE, Status.WAITING, ending.status)


def test_a_rejected_review_fails_the_job_with_the_reviewers_note_and_charges_nothing_back() -> None:
    review = Review(decision=Decision.REJECT, note="wrong totals", resolved_by="bob")
    ending = on_resolve(Status.WAITING, review, ATTEMPTS, "check", NOW)
    assert (ending.status, ending.kind, ending.attempt_base) == (Status.FAILED, EventKind.REVIEW_REJECTED, None)
    assert ending.error is not None and ending.error.stage == "check" and "wrong totals" in ending.error.message
    assert allowed(Action.RESOLVE, Status.WAITING, ending.status)


@pytest.mark.parametrize("status", [s for s in Status if s is not Status.WAITING])
def test_only_a_waiting_job_is_resolved(status: Status) -> None:
    with pytest.raises(NotWaiting, match=f"a {status.value} job is not waiting for review"):
        on_resolve(status, Review(decision=Decision.APPROVE, note="", resolved_by="bob"), ATTEMPTS, "", NOW)


# ------------------------------------------------------------------------------ Requeue


def holding(*, expires_in_s: float | None, stalled: bool = False) -> Holding:
    expires = None if expires_in_s is None else NOW + timedelta(seconds=expires_in_s)
    return Holding(epoch=4, token="4.abc", expires_at=expires, stalled=stalled)


@pytest.mark.parametrize(
    "held",
    [holding(expires_in_s=-1), holding(expires_in_s=0), holding(expires_in_s=30, stalled=True)],
    ids=["expired", "expiring-now", "stalled"],
)
def test_a_stalled_or_expired_lease_is_requeued_at_once_and_the_attempt_given_back(held: Holding) -> None:
    assert not alive(held, NOW)
    ending = on_requeue(Status.RUNNING, held, ATTEMPTS, NOW)
    assert (ending.status, ending.kind, ending.run_after, ending.attempt_base) == (
        Status.QUEUED,
        EventKind.REQUEUED,
        NOW,
        2,
    )
    assert allowed(Action.REQUEUE, Status.RUNNING, ending.status)


def test_a_lease_still_alive_is_not_requeued() -> None:
    assert alive(holding(expires_in_s=0.001), NOW)
    with pytest.raises(InvalidTransition, match="lease is alive") as refused:
        on_requeue(Status.RUNNING, holding(expires_in_s=0.001), ATTEMPTS, NOW)
    assert refused.value.reason == "LEASE_ACTIVE"


@pytest.mark.parametrize("status", [s for s in Status if s is not Status.RUNNING])
def test_only_a_running_job_is_requeued(status: Status) -> None:
    with pytest.raises(InvalidTransition, match=f"a {status.value} job cannot be requeued"):
        on_requeue(status, holding(expires_in_s=None), ATTEMPTS, NOW)


def test_a_requeue_says_who_decided_then_why() -> None:
    assert requeue_detail("oncall", "host gone") == "requeued by admin oncall: host gone"
    assert requeue_detail("oncall", "") == "requeued by admin oncall"
    assert requeue_detail("", "host gone") == "host gone"
    assert requeue_detail("", "") is None
