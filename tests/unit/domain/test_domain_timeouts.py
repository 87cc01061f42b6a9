"""Time limits on values: what a submit may ask for, and where a job goes past each limit (no store)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from test_domain_view import make_job

from jobwire.domain.endings import Attempts, on_attempt_timeout, on_job_timeout, on_no_progress
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.evidence import EventKind, Finding, FindingKind
from jobwire.domain.job import ErrorCategory
from jobwire.domain.progress import Progress, moved
from jobwire.domain.retry import RetryPolicy
from jobwire.domain.states import Action, Status, allowed
from jobwire.domain.timeouts import OnNoProgress, Timeouts, deadline
from jobwire.domain.view import render

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=3, initial_backoff_s=2.0, backoff_multiplier=3.0, max_backoff_s=100.0)
LEFT, LAST = Attempts(attempt=2, base=0, budget=3), Attempts(attempt=3, base=0, budget=3)


# -- what a submit may ask for -----------------------------------------------------------------


def test_limits_within_range_are_kept_and_none_means_no_limit() -> None:
    asked = Timeouts(attempt_s=0.25, job_s=30 * 86_400.0, stage_s=60.0, on_no_progress=OnNoProgress.FAIL)
    assert asked.validated() == asked
    assert Timeouts().validated() == Timeouts()


@pytest.mark.parametrize(
    ("asked", "field"),
    [
        (Timeouts(attempt_s=-1.0), "timeouts.attempt_timeout"),
        (Timeouts(attempt_s=0.0), "timeouts.attempt_timeout"),
        (Timeouts(job_s=30 * 86_400.0 + 1), "timeouts.job_timeout"),
        (Timeouts(stage_s=float("nan")), "timeouts.stage_timeout"),
        (Timeouts(stage_s=float("inf")), "timeouts.stage_timeout"),
        (Timeouts(on_no_progress=OnNoProgress.FAIL), "timeouts.on_no_progress"),
    ],
)
def test_a_limit_out_of_range_is_refused_naming_its_field(asked: Timeouts, field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        asked.validated()
    assert refused.value.field == field


def test_a_deadline_is_the_start_plus_the_limit() -> None:
    assert deadline(NOW, 1.5) == NOW + timedelta(seconds=1.5)
    assert deadline(NOW, None) is None


# -- where a job goes -----------------------------------------------------------------------------


def test_an_attempt_past_its_limit_is_retried_after_the_backoff_while_attempts_remain() -> None:
    ending = on_attempt_timeout(Status.RUNNING, LEFT, POLICY, "PROCESSING", NOW)
    assert (ending.status, ending.kind, ending.run_after) == (
        Status.QUEUED,
        EventKind.ATTEMPT_TIMED_OUT,
        NOW + timedelta(seconds=6.0),
    )
    assert ending.error is not None
    assert (ending.error.category, ending.error.stage, ending.error.retryable) == (
        ErrorCategory.TIMEOUT,
        "PROCESSING",
        True,
    )


def test_the_last_attempt_past_its_limit_fails_timeout_and_a_user_may_retry_it() -> None:
    ending = on_attempt_timeout(Status.RUNNING, LAST, POLICY, "PROCESSING", NOW)
    assert (ending.status, ending.kind, ending.run_after) == (Status.FAILED, EventKind.ATTEMPT_TIMED_OUT, None)
    assert ending.error is not None and ending.error.category is ErrorCategory.TIMEOUT and ending.error.retryable


def test_an_attempt_past_its_limit_with_a_cancel_pending_ends_cancelled() -> None:
    ending = on_attempt_timeout(Status.CANCEL_REQUESTED, LEFT, POLICY, "PROCESSING", NOW)
    assert (ending.status, ending.kind, ending.error) == (Status.CANCELLED, EventKind.ATTEMPT_TIMED_OUT, None)


def test_no_progress_is_a_finding_under_inspect_and_an_attempt_timeout_under_fail() -> None:
    assert on_no_progress(Status.RUNNING, OnNoProgress.INSPECT, LEFT, POLICY, "PROCESSING", NOW) is None
    failed = on_no_progress(Status.RUNNING, OnNoProgress.FAIL, LAST, POLICY, "PROCESSING", NOW)
    assert failed is not None and (failed.status, failed.kind) == (Status.FAILED, EventKind.NO_PROGRESS)
    assert failed.error is not None and failed.error.category is ErrorCategory.TIMEOUT
    retried = on_no_progress(Status.RUNNING, OnNoProgress.FAIL, LEFT, POLICY, "PROCESSING", NOW)
    assert retried is not None and retried.status is Status.QUEUED


def test_a_job_past_its_own_limit_fails_and_is_not_retryable() -> None:
    ending = on_job_timeout("")
    assert (ending.status, ending.kind, ending.run_after) == (Status.FAILED, EventKind.JOB_TIMED_OUT, None)
    assert ending.error is not None
    assert (ending.error.category, ending.error.retryable) == (ErrorCategory.TIMEOUT, False)


@pytest.mark.parametrize("attempts", [LEFT, LAST])
def test_every_timeout_ending_is_one_the_transition_table_allows(attempts: Attempts) -> None:
    for current in (Status.RUNNING, Status.CANCEL_REQUESTED):
        assert allowed(Action.ATTEMPT_TIMEOUT, current, on_attempt_timeout(current, attempts, POLICY, "S", NOW).status)
    for current in (Status.QUEUED, Status.RUNNING, Status.CANCEL_REQUESTED):
        assert allowed(Action.JOB_TIMEOUT, current, on_job_timeout("S").status)
    for on in OnNoProgress:
        ending = on_no_progress(Status.RUNNING, on, attempts, POLICY, "S", NOW)
        assert allowed(Action.NO_PROGRESS, Status.RUNNING, Status.RUNNING if ending is None else ending.status)


def test_progress_moves_with_a_new_stage_or_new_units_only() -> None:
    at = Progress(stage_index=2, stage_count=4, processed_units=5)
    assert moved(at, replace(at, processed_units=6))
    assert moved(at, Progress(stage_index=3, stage_count=4))
    assert not moved(at, replace(at, total_units=10))  # learning the total is no progress
    assert not moved(at, at)


# -- what people read -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("idle", "en", "zh"),
    [
        (timedelta(seconds=12.7), "no progress for 12 s", "已 12 秒没有进展"),
        (timedelta(minutes=31, seconds=59), "no progress for 31 min", "已 31 分钟没有进展"),
        (timedelta(hours=3, minutes=5), "no progress for 3 h 5 min", "已 3 小时 5 分钟没有进展"),
    ],
)
def test_a_job_without_progress_says_for_how_long(idle: timedelta, en: str, zh: str) -> None:
    job = make_job(Status.RUNNING, processed=40, total=100, no_progress_for=idle)
    assert render(job, "en").detail.endswith(" · " + en)
    assert render(job, "zh-CN").detail.endswith(" · " + zh)
    assert "progress" not in render(make_job(Status.RUNNING), "en").detail
    assert "progress" not in render(make_job(Status.FAILED, no_progress_for=idle), "en").detail


def test_a_no_progress_finding_explains_itself() -> None:
    finding = Finding(
        kind=FindingKind.NO_PROGRESS, job_no="PT-20261201-001", queue="default", status=Status.RUNNING,
        stage="PROCESSING", attempt=1, worker_id="w1", processed_units=3, total_units=None, checkpoint_present=False,
        heartbeat_at=NOW, lease_expires_at=NOW, overdue_s=None, marked_stalled=False, on_lease_lost="INSPECT",
        progress_at=NOW, idle_s=1860.0, stage_timeout_s=1800.0, marked_no_progress=True, on_no_progress="INSPECT",
    )  # fmt: skip
    assert finding.detail == "no progress for 1860.0s (stage timeout 1800s); marked no progress; on_no_progress INSPECT"
