"""Backend-facing client: JobClient, AdminClient (each also async), the jobctl CLI, and channel helpers.

The names below are the public API; everything else in this package may change.
"""

from __future__ import annotations

from jobwire.client.admin import AdminClient, AsyncAdminClient
from jobwire.client.async_jobs import AsyncJobClient
from jobwire.client.channel import ChannelConfig, aio_channel, sync_channel
from jobwire.client.convert import is_terminal
from jobwire.client.errors import (
    AbortedError,
    AlreadyExistsError,
    ClientError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
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

__all__ = [
    "AbortedError",
    "AdminClient",
    "AlreadyExistsError",
    "AsyncAdminClient",
    "AsyncJobClient",
    "Backoff",
    "ChannelConfig",
    "ClientError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "JobClient",
    "ListFilters",
    "NotFoundError",
    "Pauses",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "RetrySettings",
    "SubmitOptions",
    "Submitted",
    "Timeouts",
    "UnauthenticatedError",
    "UnavailableError",
    "aio_channel",
    "error_reason",
    "is_terminal",
    "status_code",
    "status_info",
    "sync_channel",
]
