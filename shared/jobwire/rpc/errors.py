"""The one place errors become gRPC statuses: JobwireError -> canonical code + ErrorInfo.

Anything else that escapes a handler is a server bug: it is logged with its trace and
answered INTERNAL with a plain message, never the trace itself.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from jobwire.domain.errors import InvalidArgument, JobwireError

log = logging.getLogger(__name__)
ERROR_DOMAIN = "jobwire"


def status_proto(error: JobwireError) -> status_pb2.Status:
    """The google.rpc.Status of `error`: canonical code, message, ErrorInfo (and BadRequest)."""
    details = [_pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN))]
    if isinstance(error, InvalidArgument):
        violation = error_details_pb2.BadRequest.FieldViolation(field=error.field, description=error.description)
        details.append(_pack(error_details_pb2.BadRequest(field_violations=[violation])))
    return status_pb2.Status(code=getattr(code_pb2, error.code), message=error.message, details=details)


def to_status(error: JobwireError) -> grpc.Status:
    return rpc_status.to_status(status_proto(error))


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


async def _abort(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    if isinstance(exc, JobwireError):
        await context.abort_with_status(to_status(exc))
    log.exception("unexpected error in %s", type(exc).__name__, exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error; the operator's logs have the details")


def _wrap_unary(behavior: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await behavior(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every error must leave as a status
            await _abort(context, exc)

    return handler


def _wrap_stream(behavior: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            async for item in behavior(request, context):
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every error must leave as a status
            await _abort(context, exc)

    return handler


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=_wrap_unary(handler.unary_unary))
        if handler.unary_stream is not None:
            # A server-streaming handler either yields (ours) or writes with
            # context.write() (grpc's Health.Watch); the wrapper must keep its shape.
            inner = handler.unary_stream
            wrap = _wrap_stream if inspect.isasyncgenfunction(inner) else _wrap_unary
            return handler._replace(unary_stream=wrap(inner))
        return handler
