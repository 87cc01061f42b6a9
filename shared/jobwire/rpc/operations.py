"""Jobs as google.longrunning Operations: the name `operations/<job_no>` and the encoding.

An Operation is a view of a `jobwire.v1.Job`: `metadata` packs the Job, `done` is true once
it is terminal, `response` packs the Artifact of a READY job and `error` says why a FAILED
or CANCELLED job has none. The code of `error` comes from the JobError's category
(`ERROR_CODES`, the README's table) so a generic client can tell a bad input from a timeout.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from google.rpc import code_pb2, status_pb2

from jobwire.domain import limits
from jobwire.domain.errors import InvalidArgument
from jobwire.v1 import job_pb2

PREFIX = "operations/"
COLLECTION = "operations"  # the `name` ListOperations accepts besides the empty one

_Category = job_pb2.JobError.Category
# What went wrong, as the nearest canonical code: the caller's input, a clock, or the work.
ERROR_CODES: dict[int, int] = {
    _Category.INPUT_INVALID: code_pb2.INVALID_ARGUMENT,
    _Category.DEPENDENCY_FAILED: code_pb2.FAILED_PRECONDITION,
    _Category.TIMEOUT: code_pb2.DEADLINE_EXCEEDED,
    _Category.WORKER_LOST: code_pb2.ABORTED,  # the attempt was lost, not refused: worth retrying
    _Category.REJECTED: code_pb2.ABORTED,  # a person reviewing it said no
    _Category.RESULT_INVALID: code_pb2.INTERNAL,  # the worker broke its contract, not the caller
    _Category.PROCESSING_ERROR: code_pb2.UNKNOWN,
    _Category.CATEGORY_UNSPECIFIED: code_pb2.UNKNOWN,
}
CANCELLED_MESSAGE = "the job was cancelled"
_TERMINAL = frozenset({job_pb2.Job.READY, job_pb2.Job.FAILED, job_pb2.Job.CANCELLED})


def name_of(job_no: str) -> str:
    return PREFIX + job_no


def job_no_of(name: str, field: str = "name") -> str:
    """The job number an operation name stands for; InvalidArgument naming `field` if malformed."""
    if not name.startswith(PREFIX):
        raise InvalidArgument(field, f"is not an operation name like {PREFIX}PT-20261008-001")
    return limits.job_no(name.removeprefix(PREFIX), field)


def operation(job: job_pb2.Job) -> operations_pb2.Operation:
    out = operations_pb2.Operation(name=name_of(job.job_no), done=job.status in _TERMINAL)
    out.metadata.Pack(job)
    if job.status == job_pb2.Job.READY:
        out.response.Pack(job.result)
    elif job.status == job_pb2.Job.FAILED:
        out.error.CopyFrom(failure_status(job.error))
    elif job.status == job_pb2.Job.CANCELLED:
        out.error.CopyFrom(status_pb2.Status(code=code_pb2.CANCELLED, message=CANCELLED_MESSAGE))
    return out


def failure_status(error: job_pb2.JobError) -> status_pb2.Status:
    return status_pb2.Status(code=ERROR_CODES.get(error.category, code_pb2.UNKNOWN), message=error.message)


SERVICE = "google.longrunning.Operations"
# (method, request type, response type): the unary methods of google/longrunning/operations.proto
_METHODS = (
    ("ListOperations", operations_pb2.ListOperationsRequest, operations_pb2.ListOperationsResponse),
    ("GetOperation", operations_pb2.GetOperationRequest, operations_pb2.Operation),
    ("DeleteOperation", operations_pb2.DeleteOperationRequest, empty_pb2.Empty),
    ("CancelOperation", operations_pb2.CancelOperationRequest, empty_pb2.Empty),
    ("WaitOperation", operations_pb2.WaitOperationRequest, operations_pb2.Operation),
)


def add_OperationsServicer_to_server(servicer: Any, server: Any) -> None:
    """What a current grpc_tools would generate for operations.proto.

    The copy googleapis-common-protos ships predates registered method handlers: it only
    calls `add_generic_rpc_handlers`, which ServerHost's registrar cannot wrap with auth,
    errors and metrics (jobwire.rpc.handlers), so the methods would go unserved.
    """
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name),
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )
        for name, request, response in _METHODS
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
