"""Backend-facing client: JobClient, AdminClient (each also async), the jobctl CLI, and channel helpers.

The names below are the public API; everything else in this package may change. The clients
return views (`Job`, `Batch`, `Schedule`, ...) whose enums print their names (`JobStatus`,
...) and whose times are aware UTC datetimes; each view's `raw` is the protobuf message.
"""

from __future__ import annotations

from jobwire.client.admin import AdminClient, AsyncAdminClient
from jobwire.client.async_jobs import AsyncJobClient
from jobwire.client.channel import ChannelConfig, aio_channel, sync_channel
from jobwire.client.convert import is_terminal
from jobwire.client.enums import CatchUp, DisplayAction, ErrorCategory, FindingKind, JobStatus, Overlap
from jobwire.client.errors import (
    AbortedError,
    AlreadyExistsError,
    ClientError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    status_code,
)
from jobwire.client.job_calls import ListFilters, SubmitOptions, Submitted, Timeouts
from jobwire.client.jobs import JobClient
from jobwire.client.retry import Backoff, Pauses, RetrySettings
from jobwire.client.status import error_reason, status_info
from jobwire.client.views import (
    Batch,
    Display,
    EventPage,
    Finding,
    Job,
    JobError,
    JobEvent,
    JobPage,
    Schedule,
    SubmittedBatch,
    WorkerInfo,
)

__all__ = [
    "AbortedError",
    "AdminClient",
    "AlreadyExistsError",
    "AsyncAdminClient",
    "AsyncJobClient",
    "Backoff",
    "Batch",
    "CatchUp",
    "ChannelConfig",
    "ClientError",
    "DeadlineExceededError",
    "Display",
    "DisplayAction",
    "ErrorCategory",
    "EventPage",
    "FailedPreconditionError",
    "Finding",
    "FindingKind",
    "InvalidArgumentError",
    "Job",
    "JobClient",
    "JobError",
    "JobEvent",
    "JobPage",
    "JobStatus",
    "ListFilters",
    "NotFoundError",
    "OutOfRangeError",
    "Overlap",
    "Pauses",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "RetrySettings",
    "Schedule",
    "SubmitOptions",
    "Submitted",
    "SubmittedBatch",
    "Timeouts",
    "UnauthenticatedError",
    "UnavailableError",
    "WorkerInfo",
    "aio_channel",
    "error_reason",
    "is_terminal",
    "status_code",
    "status_info",
    "sync_channel",
]
