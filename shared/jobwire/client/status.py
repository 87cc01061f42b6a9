"""Reading jobwire's error details (google.rpc.ErrorInfo, BadRequest) off a failed gRPC call.

The details travel in the `grpc-status-details-bin` trailer. We parse it ourselves rather than
through `rpc_status.from_call`, which raises when the trailer's code disagrees with the call's
(a proxy may rewrite one and not the other) and does not accept grpc.aio errors.
"""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
from google.rpc import error_details_pb2, status_pb2

from jobwire.domain.errors import ERROR_DOMAIN

_DETAILS_KEY = "grpc-status-details-bin"


def rich_status(error: grpc.RpcError) -> status_pb2.Status | None:
    """The google.rpc.Status a server attached to `error`, if any."""
    trailing: Any = getattr(error, "trailing_metadata", None)
    if not callable(trailing):
        return None
    for key, value in trailing() or ():
        if key == _DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status()
            try:
                status.ParseFromString(value)
            except Exception:  # noqa: BLE001 - a garbled trailer must not hide the real error
                return None
            return status
    return None


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The jobwire-domain ErrorInfo of `error`, if it has one."""
    status = rich_status(error)
    return status_info(status) if status is not None else None


def status_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo | None:
    """The jobwire-domain ErrorInfo of a google.rpc.Status (a batch call's per-item error)."""
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == ERROR_DOMAIN:
                return info
    return None


def error_reason(error: grpc.RpcError) -> str | None:
    """The ErrorInfo reason of a jobwire error (e.g. WORKER_LEASE_LOST), if it has one."""
    info = error_info(error)
    return info.reason if info is not None else None


def field_violations(error: grpc.RpcError) -> tuple[tuple[str, str], ...]:
    """(field, description) pairs from a google.rpc.BadRequest detail, if any."""
    status = rich_status(error)
    if status is None:
        return ()
    found: list[tuple[str, str]] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            found.extend((v.field, v.description) for v in bad.field_violations)
    return tuple(found)
