"""What JobClient and AdminClient raise: one base, one subclass per canonical code.

Each error carries the gRPC code, the jobwire reason from `google.rpc.ErrorInfo` (for
example JOB_NOT_CANCELLABLE) and the server's message, so callers branch on `reason`
and show `message` to a person.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc

from jobwire.client.status import error_info, field_violations


class ClientError(Exception):
    """A jobwire call failed.

    Attributes:
        code: the canonical gRPC status code.
        reason: the ErrorInfo reason in domain `jobwire` (e.g. NOT_RETRYABLE), or None
            when the error did not come from a jobwire server (a proxy, a dead connection).
        message: the server's user-facing message.
        metadata: the ErrorInfo metadata, if any.
        violations: (field, description) pairs from a BadRequest detail.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        violations: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.metadata = dict(metadata or {})
        self.violations = violations

    @property
    def code_name(self) -> str:
        return str(self.code.name)

    def __str__(self) -> str:
        # A reason that only repeats the code (UNAUTHENTICATED UNAUTHENTICATED) is said once.
        head = f"{self.code_name} {self.reason}" if self.reason and self.reason != self.code_name else self.code_name
        return f"{head}: {self.message}"


class InvalidArgumentError(ClientError):
    """The request is not valid (see `violations`)."""


class OutOfRangeError(ClientError):
    """A value past what exists, such as an `after_version` the job has not reached."""


class NotFoundError(ClientError):
    """No such job (or it belongs to another tenant)."""


class FailedPreconditionError(ClientError):
    """The job is not in a state that allows this (reason says which rule)."""


class AlreadyExistsError(ClientError):
    """The idempotency key was used with another request."""


class UnauthenticatedError(ClientError):
    """A valid bearer token is required."""


class PermissionDeniedError(ClientError):
    """This token may not do that."""


class ResourceExhaustedError(ClientError):
    """A limit was reached."""


class UnavailableError(ClientError):
    """jobwire cannot be reached, or its database is down: retry later."""


class AbortedError(ClientError):
    """A concurrent change won; retrying the call is safe."""


class DeadlineExceededError(ClientError):
    """The call took longer than its timeout."""


_BY_CODE: dict[grpc.StatusCode, type[ClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRangeError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}


def status_code(error: grpc.RpcError) -> grpc.StatusCode:
    """The status code of a failed call; UNKNOWN for an RpcError that carries none."""
    code = getattr(error, "code", None)
    value = code() if callable(code) else None
    return value if isinstance(value, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def from_rpc_error(error: grpc.RpcError) -> ClientError:
    """The ClientError subclass for `error`, with its ErrorInfo reason decoded."""
    code = status_code(error)
    details = getattr(error, "details", None)
    message = (details() if callable(details) else None) or code.name.lower()
    info = error_info(error)
    cls = _BY_CODE.get(code, ClientError)
    return cls(
        code,
        str(message),
        reason=info.reason if info is not None else None,
        metadata=dict(info.metadata) if info is not None else None,
        violations=field_violations(error),
    )
