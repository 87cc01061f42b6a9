"""The error hierarchy: canonical codes and ErrorInfo reasons as the API documents them."""

from __future__ import annotations

import pytest

from jobwire.domain import errors as e

CASES = [
    (e.InvalidArgument, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
    (e.OutOfRange, "OUT_OF_RANGE", "OUT_OF_RANGE"),
    (e.JobNotFound, "NOT_FOUND", "JOB_NOT_FOUND"),
    (e.BatchNotFound, "NOT_FOUND", "BATCH_NOT_FOUND"),
    (e.JobNotCancellable, "FAILED_PRECONDITION", "JOB_NOT_CANCELLABLE"),
    (e.WorkerLeaseLost, "FAILED_PRECONDITION", "WORKER_LEASE_LOST"),
    (e.NotRetryable, "FAILED_PRECONDITION", "NOT_RETRYABLE"),
    (e.ProgressRegression, "FAILED_PRECONDITION", "PROGRESS_REGRESSION"),
    (e.TotalChanged, "FAILED_PRECONDITION", "TOTAL_CHANGED"),
    (e.CancelNotRequested, "FAILED_PRECONDITION", "CANCEL_NOT_REQUESTED"),
    (e.NotWaiting, "FAILED_PRECONDITION", "JOB_NOT_WAITING"),
    (e.InvalidTransition, "FAILED_PRECONDITION", "INVALID_STATE"),
    (e.IdempotencyKeyReused, "ALREADY_EXISTS", "IDEMPOTENCY_KEY_REUSED"),
    (e.Unauthenticated, "UNAUTHENTICATED", "UNAUTHENTICATED"),
    (e.PermissionDenied, "PERMISSION_DENIED", "PERMISSION_DENIED"),
    (e.ResourceExhausted, "RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED"),
    (e.StoreUnavailable, "UNAVAILABLE", "STORE_UNAVAILABLE"),
    (e.CommitUnknown, "UNAVAILABLE", "COMMIT_UNKNOWN"),
    (e.Conflict, "ABORTED", "CONFLICT"),
    (e.DependencyEnded, "FAILED_PRECONDITION", "DEPENDENCY_ENDED"),
    (e.ResultNotAvailable, "FAILED_PRECONDITION", "RESULT_NOT_AVAILABLE"),
    (e.ScheduleNotFound, "NOT_FOUND", "SCHEDULE_NOT_FOUND"),
    (e.ScheduleExists, "ALREADY_EXISTS", "SCHEDULE_EXISTS"),
    (e.TooManySchedules, "RESOURCE_EXHAUSTED", "TOO_MANY_SCHEDULES"),
    (e.EvidenceLimitReached, "RESOURCE_EXHAUSTED", "EVIDENCE_LIMIT"),
    (e.CheckpointNotFound, "NOT_FOUND", "CHECKPOINT_NOT_FOUND"),
]
ARGS: dict[type[e.JobwireError], tuple[object, ...]] = {  # those with arguments
    e.TooManySchedules: (1000,),
    e.EvidenceLimitReached: (200, 200),
}


@pytest.mark.parametrize(("cls", "code", "reason"), CASES, ids=[c[0].__name__ for c in CASES])
def test_code_and_reason(cls: type[e.JobwireError], code: str, reason: str) -> None:
    exc = cls("f", "bad") if issubclass(cls, e.InvalidArgument) else cls(*ARGS.get(cls, ()))  # type: ignore[arg-type]
    assert isinstance(exc, e.JobwireError)
    assert exc.code == code
    assert exc.reason == reason
    assert exc.code not in {"UNKNOWN", "INTERNAL"}
    assert exc.message  # a default, user-facing message


def test_all_subclasses_covered() -> None:
    covered = {c[0] for c in CASES}
    subclasses = {c for c in vars(e).values() if isinstance(c, type) and issubclass(c, e.JobwireError)}
    assert subclasses - {e.JobwireError} == covered


def test_default_message_is_docstring() -> None:
    assert e.WorkerLeaseLost().message == "This worker no longer holds the job's lease."
    assert str(e.NotRetryable()) == "The job cannot be retried."


def test_message_and_reason_override() -> None:
    exc = e.JobNotCancellable("stage DELIVERING cannot be cancelled", reason="CUSTOM")
    assert exc.message == "stage DELIVERING cannot be cancelled"
    assert exc.reason == "CUSTOM"
    assert e.JobNotCancellable.reason == "JOB_NOT_CANCELLABLE"  # the class is untouched


def test_invalid_argument_carries_field() -> None:
    exc = e.InvalidArgument("retry_policy.max_attempts", "must be between 1 and 100")
    assert exc.field == "retry_policy.max_attempts"
    assert exc.description == "must be between 1 and 100"
    assert exc.message == "retry_policy.max_attempts: must be between 1 and 100"
    assert exc.reason == "INVALID_ARGUMENT"
    assert e.InvalidArgument("result", "x", reason="DELIVERABLE_INVALID").reason == "DELIVERABLE_INVALID"


def test_too_many_schedules_names_the_setting_and_the_limit() -> None:
    exc = e.TooManySchedules(1000)
    assert "JOBWIRE_MAX_SCHEDULES_PER_TENANT" in exc.message and "1000" in exc.message
    assert exc.metadata == {"limit": "1000"}
