"""The decisions a failed attempt, a lost lease and a worker's other endings lead to, walked on values (no store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobwire.domain.endings import Attempts, on_await_review, on_confirm_cancel, on_fail, on_lease_lost, on_release
from jobwire.domain.errors import CancelNotRequested
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import ErrorCategory, JobFailure
from jobwire.domain.lease import Holding, end, revoke
from jobwire.domain.retry import OnLeaseLost, RetryPolicy
from jobwire.domain.states import Action, Status, allowed

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=3, initial_backoff_s=2.0, backoff_multiplier=3.0, max_backoff_s=100.0)


def failure(retryable: bool = True) -> JobFailure:
    return JobFailure(category=ErrorCategory.PROCESSING_ERROR, stage="fetch", message="boom", retryable=retryable)


def attempts(charged: int, base: int = 0) -> Attempts:
    return Attempts(attempt=base + charged, base=base, budget=3)


def test_a_retryable_failure_with_attempts_left_is_queued_after_the_policys_backoff() -> None:
    ending = on_fail(Status.RUNNING, failure(), attempts(2), POLICY, NOW)
    assert ending.status is Status.QUEUED and ending.kind is EventKind.RETRY_SCHEDULED
    assert ending.run_after == NOW + timedelta(seconds=6.0)  # 2 s x 3^(2-1)
    assert ending.error == failure()


def test_the_last_attempt_and_a_non_retryable_failure_end_failed() -> None:
    for ending in (
        on_fail(Status.RUNNING, failure(), attempts(3), POLICY, NOW),
        on_fail(Status.RUNNING, failure(retryable=False), attempts(1), POLICY, NOW),
    ):
        assert ending.status is Status.FAILED and ending.kind is EventKind.FAILED
        assert ending.run_after is None and ending.error is not None


def test_attempts_before_a_retry_or_a_release_are_not_charged() -> None:
    ending = on_fail(Status.RUNNING, failure(), attempts(2, base=5), POLICY, NOW)
    assert ending.status is Status.QUEUED
    assert Attempts(attempt=8, base=5, budget=3).remain is False


def test_a_failure_after_a_cancel_request_ends_cancelled_without_an_error() -> None:
    ending = on_fail(Status.CANCEL_REQUESTED, failure(), attempts(1), POLICY, NOW)
    assert (ending.status, ending.kind, ending.error) == (Status.CANCELLED, EventKind.CANCELLED, None)


def test_a_lost_lease_under_inspect_is_left_for_an_operator() -> None:
    assert on_lease_lost(Status.RUNNING, OnLeaseLost.INSPECT, attempts(1), "fetch", NOW) is None


def test_a_lost_lease_under_retry_requeues_at_once_while_attempts_remain() -> None:
    ending = on_lease_lost(Status.RUNNING, OnLeaseLost.RETRY, attempts(2), "fetch", NOW)
    assert ending is not None
    assert (ending.status, ending.kind, ending.run_after, ending.error) == (
        Status.QUEUED,
        EventKind.LEASE_REVOKED_REQUEUED,
        NOW,
        None,
    )


def test_a_lost_lease_on_the_last_attempt_fails_as_worker_lost_and_retryable() -> None:
    ending = on_lease_lost(Status.RUNNING, OnLeaseLost.RETRY, attempts(3), "fetch", NOW)
    assert ending is not None and ending.status is Status.FAILED
    assert ending.kind is EventKind.LEASE_REVOKED_FAILED
    assert ending.error is not None
    assert (ending.error.category, ending.error.stage, ending.error.retryable) == (
        ErrorCategory.WORKER_LOST,
        "fetch",
        True,
    )


@pytest.mark.parametrize("policy", list(OnLeaseLost))
def test_a_lost_lease_with_a_cancel_pending_ends_cancelled_whatever_the_policy(policy: OnLeaseLost) -> None:
    ending = on_lease_lost(Status.CANCEL_REQUESTED, policy, attempts(3), "fetch", NOW)
    assert ending is not None
    assert (ending.status, ending.kind) == (Status.CANCELLED, EventKind.LEASE_REVOKED_CANCELLED)


@pytest.mark.parametrize("current", [Status.RUNNING, Status.CANCEL_REQUESTED])
@pytest.mark.parametrize("charged", [1, 3])
def test_every_ending_decided_is_one_the_transition_table_allows(current: Status, charged: int) -> None:
    for retryable in (True, False):
        ending = on_fail(current, failure(retryable), attempts(charged), POLICY, NOW)
        assert allowed(Action.FAIL, current, ending.status)
    for policy in OnLeaseLost:
        lost = on_lease_lost(current, policy, attempts(charged), "fetch", NOW)
        if lost is not None:
            assert allowed(Action.LEASE_EXPIRED, current, lost.status)


def test_revoking_a_lease_bumps_its_epoch_and_ending_it_keeps_the_epoch() -> None:
    held = Holding(epoch=4, token="4.abc", expires_at=NOW, stalled=True)
    assert revoke(held) == Holding(epoch=5, token=None, expires_at=None, stalled=False)
    assert end(held) == Holding(epoch=4, token=None, expires_at=None, stalled=False)


def test_a_release_queues_the_job_at_once_and_gives_the_attempt_back() -> None:
    ending = on_release(Status.RUNNING, attempts(2, base=1), NOW)
    assert (ending.status, ending.kind, ending.run_after, ending.attempt_base) == (
        Status.QUEUED,
        EventKind.RELEASED,
        NOW,
        2,
    )
    assert ending.error is None


def test_a_review_request_waits_for_a_person_and_charges_nothing_back() -> None:
    ending = on_await_review(Status.RUNNING)
    assert (ending.status, ending.kind, ending.attempt_base) == (Status.WAITING, EventKind.AWAITING_REVIEW, None)


def test_a_pending_cancel_wins_over_a_release_and_a_review_request() -> None:
    for ending in (on_release(Status.CANCEL_REQUESTED, attempts(1), NOW), on_await_review(Status.CANCEL_REQUESTED)):
        assert (ending.status, ending.kind, ending.run_after, ending.attempt_base) == (
            Status.CANCELLED,
            EventKind.CANCELLED,
            None,
            None,
        )


def test_a_worker_confirms_only_a_cancel_that_was_asked_for() -> None:
    ending = on_confirm_cancel(Status.CANCEL_REQUESTED)
    assert (ending.status, ending.kind) == (Status.CANCELLED, EventKind.CANCELLED)
    with pytest.raises(CancelNotRequested):
        on_confirm_cancel(Status.RUNNING)


@pytest.mark.parametrize("current", [Status.RUNNING, Status.CANCEL_REQUESTED])
def test_every_worker_ending_decided_is_one_the_transition_table_allows(current: Status) -> None:
    assert allowed(Action.RELEASE, current, on_release(current, attempts(1), NOW).status)
    assert allowed(Action.AWAIT_REVIEW, current, on_await_review(current).status)
    if current is Status.CANCEL_REQUESTED:
        assert allowed(Action.CONFIRM_CANCEL, current, on_confirm_cancel(current).status)
