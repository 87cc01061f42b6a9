"""The one place errors become gRPC statuses: JobwireError -> canonical code + ErrorInfo.

Anything else that escapes a handler is a server bug: it is logged with its trace and
answered INTERNAL with a plain message, never the trace itself; except NotImplementedError,
which a generated servicer base raises for a method of its service the server does not
implement (grpc.health.v1's List): that is UNIMPLEMENTED. jobwire.rpc.handlers applies this
to every RPC, and to every call a worker's Session carries.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from jobwire.domain.errors import ERROR_DOMAIN, InvalidArgument, JobwireError

log = logging.getLogger(__name__)


def status_proto(error: JobwireError) -> status_pb2.Status:
    """The google.rpc.Status of `error`: canonical code, message, ErrorInfo (and BadRequest)."""
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata)
    details = [_pack(info)]
    if isinstance(error, InvalidArgument):
        violation = error_details_pb2.BadRequest.FieldViolation(field=error.field, description=error.description)
        details.append(_pack(error_details_pb2.BadRequest(field_violations=[violation])))
    return status_pb2.Status(code=getattr(code_pb2, error.code), message=error.message, details=details)


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def status_of(exc: Exception) -> grpc.Status:
    """The status a caller gets for `exc`, as gRPC ends a call with it."""
    return rpc_status.to_status(status_proto_of(exc))


def status_proto_of(exc: Exception) -> status_pb2.Status:
    """The google.rpc.Status a caller gets for `exc`: its own for a JobwireError, else a logged INTERNAL.

    A call that ends the RPC answers it as `status_of`; a call carried by a stream (a worker
    Session's frame) answers it in its reply.
    """
    if isinstance(exc, JobwireError):
        return status_proto(exc)
    if isinstance(exc, NotImplementedError):
        message = "this server does not implement this method; see its reflection for those it does"
        return status_pb2.Status(code=code_pb2.UNIMPLEMENTED, message=message)
    log.exception("unexpected error in %s", type(exc).__name__, exc_info=exc)
    return status_pb2.Status(code=code_pb2.INTERNAL, message="internal error; the operator's logs have the details")
