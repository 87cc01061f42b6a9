"""Fakes for the client's unit tests: a failed gRPC call, without any network."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2


class FakeRpcError(grpc.RpcError):  # type: ignore[misc]
    """What a failed call raises: a code, details and trailing metadata."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str = "",
        *,
        reason: str | None = None,
        violations: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self._code = code
        self._message = message
        self._trailing = _trailer(code, message, reason, violations)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return self._trailing


def _trailer(
    code: grpc.StatusCode,
    message: str,
    reason: str | None,
    violations: tuple[tuple[str, str], ...],
) -> tuple[tuple[str, bytes], ...]:
    if reason is None and not violations:
        return ()
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message)
    if reason is not None:
        info = error_details_pb2.ErrorInfo(reason=reason, domain="jobwire")
        status.details.append(_pack(info))
    if violations:
        bad = error_details_pb2.BadRequest()
        for field, description in violations:
            bad.field_violations.add(field=field, description=description)
        status.details.append(_pack(bad))
    return (("grpc-status-details-bin", status.SerializeToString()),)


def _pack(
    message: error_details_pb2.ErrorInfo | error_details_pb2.BadRequest,
) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


MakeError = Callable[..., FakeRpcError]


@pytest.fixture
def rpc_error() -> MakeError:
    """Build a FakeRpcError: rpc_error(grpc.StatusCode.NOT_FOUND, "msg", reason="X")."""
    return FakeRpcError
