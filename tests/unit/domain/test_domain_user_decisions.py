"""A person's Retry, decided on values: who may retry which FAILED job, and what it becomes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobwire.domain.errors import InvalidTransition, NotRetryable
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import ErrorCategory, JobFailure
from jobwire.domain.states import Action, Status, allowed
from jobwire.domain.user_decisions import on_retry

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
    assert retried.attempt_base == 3  # the three attempts made no longer count; the next is number 4
    assert retried.detail is None  # an ordinary retry: the event says nothing more
    assert allowed(Action.RETRY, Status.FAILED, retried.ending.status)  # the move the table allows


def test_a_non_retryable_failure_is_refused_saying_an_admin_may_force_it() -> None:
    hint = r"\(INPUT_INVALID\) is not retryable; an admin may force a retry"
    with pytest.raises(NotRetryable, match=hint) as refused:
        on_retry(Status.FAILED, failure(ErrorCategory.INPUT_INVALID, retryable=False), 1, NOW)
    assert "jobctl retry --force" in refused.value.message


def test_an_admin_forces_any_failed_job_and_the_trail_names_them() -> None:
    retried = on_retry(Status.FAILED, failure(ErrorCategory.INPUT_INVALID, retryable=False), 2, NOW, forced_by="alice")
    assert (retried.ending.status, retried.attempt_base) == (Status.QUEUED, 2)
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
