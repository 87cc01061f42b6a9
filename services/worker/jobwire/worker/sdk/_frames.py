"""A worker call as a Session frame, and a frame's answer as its unary call's reply or error.

A refused frame carries the google.rpc.Status its unary call would have ended with; it is
raised here as the grpc.aio.AioRpcError that unary call raises: the same code and details,
and the Status itself in the `grpc-status-details-bin` trailer, where `error_reason` and
`status_info` find its ErrorInfo. So `describe`, `is_transient`, `is_lease_lost` and `refusal`
(jobwire.worker.sdk._rpc) treat a refused frame exactly as the refused unary call.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import grpc.aio
from google.protobuf.message import Message
from google.rpc import status_pb2

from jobwire.v1 import worker_pb2

STATUS_DETAILS = "grpc-status-details-bin"
_CODES = {code.value[0]: code for code in grpc.StatusCode}
# What the server sends of its own accord (call_id 0), not in answer to a frame.
PUSHES = frozenset({"leased", "cancel_requested", "lease_lost"})


@dataclass(frozen=True)
class Call:
    """One call a frame may carry: its unary method (None: a frame-only call), its fields."""

    method: str | None  # WorkerServiceStub's, for a worker without a session
    field: str  # WorkerFrame.call's
    reply: str  # ServerFrame.reply's


CLAIM = Call("Claim", "claim", "claim")
HEARTBEAT = Call("Heartbeat", "heartbeat", "heartbeat")
BATCH_REPORT_STAGE = Call("BatchReportStage", "batch_report_stage", "batch_report_stage")
COMPLETE = Call("Complete", "complete", "job")
FAIL = Call("Fail", "fail", "job")
CONFIRM_CANCEL = Call("ConfirmCancel", "confirm_cancel", "job")
RELEASE = Call("Release", "release", "job")
AWAIT_REVIEW = Call("AwaitReview", "await_review", "job")
RECORD_EVIDENCE = Call("RecordEvidence", "record_evidence", "record_evidence")
STANDING_CLAIM = Call(None, "standing_claim", "claim")


def frame(call_id: int, call: Call, request: Message) -> worker_pb2.WorkerFrame:
    out = worker_pb2.WorkerFrame(call_id=call_id)
    getattr(out, call.field).CopyFrom(request)
    return out


def reply_of(call: Call, answer: worker_pb2.ServerFrame) -> Message:
    """The reply `answer` holds for `call`; raises the unary call's error for a refusal."""
    kind = answer.WhichOneof("reply")
    if kind == "error":
        raise error_of(answer.error)
    if kind != call.reply:
        raise failed(grpc.StatusCode.INTERNAL, f"the server answered a {call.field} frame with {kind or 'nothing'}")
    reply: Message = getattr(answer, kind)
    return reply


def error_of(status: status_pb2.Status) -> grpc.aio.AioRpcError:
    """The error a unary call refused with `status` raises."""
    code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    trailing = grpc.aio.Metadata((STATUS_DETAILS, status.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, status.message)


def failed(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """A call that failed on this side (its deadline, its stream), as grpc reports one."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class SessionDown(grpc.aio.AioRpcError):  # type: ignore[misc]  # grpc.aio is untyped
    """A call cut short because the worker's session is down (UNAVAILABLE). The session says
    so in a log line of its own, so a caller that would only repeat it need not."""


def session_down(details: str) -> SessionDown:
    return SessionDown(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def copy(error: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
    """The same failure as a fresh exception of its type, for each of the calls it ends."""
    return type(error)(error.code(), error.initial_metadata(), error.trailing_metadata(), error.details())
