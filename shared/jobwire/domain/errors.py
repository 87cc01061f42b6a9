"""The one error hierarchy. The server's error interceptor maps it to gRPC status codes.

Each subclass fixes a canonical code (a `grpc.StatusCode` name, kept as text so this module
stays free of grpc) and a reason for `google.rpc.ErrorInfo`. Messages are user-facing:
never a trace, a path or a host.
"""

from __future__ import annotations

ERROR_DOMAIN = "jobwire"  # the domain of every ErrorInfo jobwire sends


class JobwireError(Exception):
    """Something went wrong in jobwire."""

    code = "FAILED_PRECONDITION"
    reason = "JOBWIRE_ERROR"

    def __init__(self, message: str | None = None, *, reason: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        if reason is not None:
            self.reason = reason

    @property
    def message(self) -> str:
        return str(self.args[0])

    @property
    def metadata(self) -> dict[str, str]:
        """Facts for ErrorInfo.metadata that a program may act on; none by default."""
        return {}


class InvalidArgument(JobwireError):
    """The request is not valid."""

    code = "INVALID_ARGUMENT"
    reason = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str, *, reason: str | None = None) -> None:
        super().__init__(f"{field}: {message}", reason=reason)
        self.field = field
        self.description = message


class OutOfRange(InvalidArgument):
    """A value is valid in itself but past what exists (a version the job has not reached)."""

    code = "OUT_OF_RANGE"
    reason = "OUT_OF_RANGE"


class JobNotFound(JobwireError):
    """No such job."""

    code = "NOT_FOUND"
    reason = "JOB_NOT_FOUND"


class BatchNotFound(JobwireError):
    """No such batch."""

    code = "NOT_FOUND"
    reason = "BATCH_NOT_FOUND"


class JobNotCancellable(JobwireError):
    """The job cannot be cancelled now."""

    reason = "JOB_NOT_CANCELLABLE"


class WorkerLeaseLost(JobwireError):
    """This worker no longer holds the job's lease."""

    reason = "WORKER_LEASE_LOST"
    TIMED_OUT_MESSAGE = "This attempt ran past its time limit; its lease was revoked."

    def __init__(self, message: str | None = None, *, timed_out: bool = False) -> None:
        super().__init__(message or (self.TIMED_OUT_MESSAGE if timed_out else None))
        self.timed_out = timed_out  # revoked because its attempt ran out of time: the holder is told so

    @property
    def metadata(self) -> dict[str, str]:
        return {"lease_state": "TIMED_OUT"} if self.timed_out else {}


class NotRetryable(JobwireError):
    """The job cannot be retried."""

    reason = "NOT_RETRYABLE"


class ProgressRegression(JobwireError):
    """Progress never goes back."""

    reason = "PROGRESS_REGRESSION"


class TotalChanged(JobwireError):
    """The stage's total is already known and cannot change."""

    reason = "TOTAL_CHANGED"


class CancelNotRequested(JobwireError):
    """No cancellation was requested for this job."""

    reason = "CANCEL_NOT_REQUESTED"


class NotWaiting(JobwireError):
    """The job is not waiting for review."""

    reason = "JOB_NOT_WAITING"


class InvalidTransition(JobwireError):
    """The job is not in a state that allows this."""

    reason = "INVALID_STATE"


class IdempotencyKeyReused(JobwireError):
    """This idempotency key was already used with another request."""

    code = "ALREADY_EXISTS"
    reason = "IDEMPOTENCY_KEY_REUSED"


class Unauthenticated(JobwireError):
    """A valid bearer token is required."""

    code = "UNAUTHENTICATED"
    reason = "UNAUTHENTICATED"


class PermissionDenied(JobwireError):
    """This token may not do that."""

    code = "PERMISSION_DENIED"
    reason = "PERMISSION_DENIED"


class ResourceExhausted(JobwireError):
    """A limit was reached."""

    code = "RESOURCE_EXHAUSTED"
    reason = "RESOURCE_EXHAUSTED"


class TooManySchedules(ResourceExhausted):
    """This tenant has as many schedules as the server allows."""

    reason = "TOO_MANY_SCHEDULES"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"this tenant already has {limit} schedules, the most JOBWIRE_MAX_SCHEDULES_PER_TENANT allows: "
            "delete one it no longer needs (DeleteSchedule), or ask the operator to raise the limit"
        )
        self.limit = limit

    @property
    def metadata(self) -> dict[str, str]:
        return {"limit": str(self.limit)}


class EvidenceLimitReached(ResourceExhausted):
    """This attempt has recorded as many evidence entries as it may."""

    reason = "EVIDENCE_LIMIT"

    def __init__(self, limit: int, recorded: int) -> None:
        super().__init__(
            f"at most {limit} evidence entries per attempt; this attempt has recorded {recorded}: "
            "none of this call's entries was kept"
        )
        self.limit = limit

    @property
    def metadata(self) -> dict[str, str]:
        return {"limit": str(self.limit)}


class StoreUnavailable(JobwireError):
    """The database is unavailable; retry later."""

    code = "UNAVAILABLE"
    reason = "STORE_UNAVAILABLE"


class CommitUnknown(StoreUnavailable):
    """The database was lost while committing; whether the change was made is not known yet."""

    reason = "COMMIT_UNKNOWN"


class Conflict(JobwireError):
    """A concurrent change won; retry the call."""

    code = "ABORTED"
    reason = "CONFLICT"


class DependencyEnded(JobwireError):
    """A job depended on has already ended FAILED or CANCELLED: the new one could never run."""

    reason = "DEPENDENCY_ENDED"

    def __init__(self, job_no: str = "", status: str = "") -> None:
        super().__init__(f"depends_on: {job_no} has ended {status}; the job could never run" if job_no else None)
        self.job_no = job_no


class ResultNotAvailable(JobwireError):
    """The job has no result the server keeps."""

    reason = "RESULT_NOT_AVAILABLE"


class CheckpointNotFound(JobwireError):
    """This job has no checkpoint: its worker never saved one."""

    code = "NOT_FOUND"
    reason = "CHECKPOINT_NOT_FOUND"


class ScheduleNotFound(JobwireError):
    """No such schedule."""

    code = "NOT_FOUND"
    reason = "SCHEDULE_NOT_FOUND"


class ScheduleExists(JobwireError):
    """A schedule with this id already exists."""

    code = "ALREADY_EXISTS"
    reason = "SCHEDULE_EXISTS"
