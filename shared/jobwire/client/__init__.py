"""Backend-facing client: JobClient, AdminClient, the jobctl CLI, and channel helpers.

The names below are the public API; everything else in this package may change.
"""

from __future__ import annotations

from jobwire.client.admin import AdminClient
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
from jobwire.client.jobs import JobClient, Submitted, Timeouts
from jobwire.client.retry import Backoff, Pauses, RetrySettings
from jobwire.client.status import error_reason, status_info

__all__ = [
    "AbortedError",
    "AdminClient",
    "AlreadyExistsError",
    "Backoff",
    "ChannelConfig",
    "ClientError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "JobClient",
    "NotFoundError",
    "Pauses",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "RetrySettings",
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
