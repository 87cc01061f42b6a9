"""What every RPC goes through, attached once per method when its service is registered.

Who is calling (auth), what an error becomes (canonical status), and what is counted
(metrics) used to be three server interceptors; grpc.aio runs an interceptor chain for
every call, which cost more than the work itself. Here the same three are one wrapper
around each method handler, built when the service is added (`register`), so a call pays
one function call for them.

Order matters and is fixed: the caller is resolved first (a refusal is answered like any
error), errors are mapped next, and the metrics record the status the caller gets. The
caller's tenant, the method and the job named by the request are bound for every log line
of the call (jobwire.observe.logs).

A two-way stream is one call for the wrapper (a worker's Session: authenticated once, when
it opens); the calls it carries are each run by `answered`, which does for one of them what
the wrapper does for a unary call once its caller is known.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2

from jobwire.domain.errors import InvalidArgument
from jobwire.observe import logs, tracing
from jobwire.rpc.auth import Authenticator, Principal, current, set_current
from jobwire.rpc.errors import status_of, status_proto_of
from jobwire.rpc.metrics import Metrics

AddToServer = Callable[[Any, Any], None]
# One line per call at DEBUG (JOBWIRE_LOG_LEVEL=DEBUG): method, status code and duration.
calls = logging.getLogger("jobwire.rpc.calls")


class Wrapping:
    """Wraps method handlers with auth, error mapping and metrics."""

    def __init__(self, auth: Authenticator, metrics: Metrics) -> None:
        self._auth = auth
        self._metrics = metrics

    def handler(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        keyed = False  # the request names a job: its job_no goes on the call's log lines
        if handler.request_deserializer is not None:
            # Only where the wrapper below answers an Undecodable: it never reaches a servicer.
            keyed = "job_no" in _fields_of(handler.request_deserializer)
            handler = handler._replace(request_deserializer=_tolerant(handler.request_deserializer))
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=self._unary(method, handler.unary_unary, stream=False, keyed=keyed))
        if handler.stream_unary is not None:  # an upload: its chunks are checked as they come (`decoded`)
            return handler._replace(stream_unary=self._unary(method, handler.stream_unary, stream=True))
        # A server stream, or a two-way one (a worker's Session: its requests are a stream, keyed by none).
        kind = "unary_stream" if handler.unary_stream is not None else "stream_stream"
        inner = getattr(handler, kind)
        if inspect.isasyncgenfunction(inner):
            return handler._replace(**{kind: self._stream(method, inner, keyed=keyed)})
        # A stream that writes with context.write() and returns (grpc's Health.Watch, a Session).
        return handler._replace(**{kind: self._unary(method, inner, stream=True, keyed=keyed)})

    def _unary(
        self, method: str, behavior: Callable[..., Any], *, stream: bool, keyed: bool = False
    ) -> Callable[..., Any]:
        resolve, metrics = self._auth.resolve, self._metrics

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            start, code = time.monotonic(), "OK"
            if stream:
                metrics.stream_opened(method)
            try:
                _begin(method, resolve(method, context.invocation_metadata()), request, keyed)
                return await behavior(request, context)
            except grpc.aio.AbortError:
                code = _code_of(context)
                raise
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except Exception as exc:  # noqa: BLE001 - every error must leave as a status
                status = status_of(exc)
                code = status.code.name
                await context.abort_with_status(status)
            finally:
                if stream:
                    metrics.stream_closed(method)
                _ended(method, code, start, metrics)

        return unary

    def _stream(
        self, method: str, behavior: Callable[..., AsyncIterator[Any]], *, keyed: bool
    ) -> Callable[..., AsyncIterator[Any]]:
        resolve, metrics = self._auth.resolve, self._metrics

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            start, code = time.monotonic(), "OK"
            metrics.stream_opened(method)
            try:
                _begin(method, resolve(method, context.invocation_metadata()), request, keyed)
                async for item in behavior(request, context):
                    yield item
            except grpc.aio.AbortError:
                code = _code_of(context)
                raise
            except (asyncio.CancelledError, GeneratorExit):
                code = "CANCELLED"  # GeneratorExit: closed while waiting to send, the caller left
                raise
            except Exception as exc:  # noqa: BLE001 - every error must leave as a status
                status = status_of(exc)
                code = status.code.name
                await context.abort_with_status(status)
            finally:
                metrics.stream_closed(method)
                _ended(method, code, start, metrics)

        return stream


async def answered(
    method: str, behavior: Callable[[Any, Any], Awaitable[Any]], request: Any, context: Any, metrics: Metrics
) -> Any:
    """`behavior(request, context)`'s reply, or the google.rpc.Status its error is: one call a
    stream carries (a worker Session's frame), run as the unary call `method` once its caller
    is known (it is the stream's).

    Its log fields and its span, its error mapped as the unary call's would be (a status
    returned, not raised: the stream goes on), and its metrics under `method`, so a call is
    counted alike whichever way it came. Cancelled, it is cancelled as the unary call would be.
    """
    start, code = time.monotonic(), "OK"
    with tracing.span(method):
        try:
            _bind(method, current().tenant, request, keyed="job_no" in request.DESCRIPTOR.fields_by_name)
            return await behavior(request, context)
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except Exception as exc:  # noqa: BLE001 - every error must leave as a status
            status: status_pb2.Status = status_proto_of(exc)
            code = code_pb2.Code.Name(status.code)
            return status
        finally:
            _ended(method, code, start, metrics)


def _begin(method: str, principal: Principal, request: Any, keyed: bool) -> None:
    """The call's caller and log fields, then a request that did not parse is refused."""
    set_current(principal)
    if isinstance(request, Undecodable):
        logs.begin(method=method, tenant=principal.tenant)
        raise request.error()
    _bind(method, principal.tenant, request, keyed)


def _bind(method: str, tenant: str, request: Any, keyed: bool) -> None:
    if keyed and request.job_no:
        logs.begin(method=method, tenant=tenant, job_no=request.job_no)
    else:
        logs.begin(method=method, tenant=tenant)


def _ended(method: str, code: str, start: float, metrics: Metrics) -> None:
    elapsed = time.monotonic() - start
    metrics.observe(method, code, elapsed)
    if code != "OK" and tracing.tracer() is not None:
        tracing.call_ended(code, grpc.StatusCode[code].value[0])
    if calls.isEnabledFor(logging.DEBUG):
        duration_ms = round(elapsed * 1000, 3)
        calls.debug("%s %s in %.1f ms", method, code, duration_ms, extra={"code": code, "duration_ms": duration_ms})


async def written(context: grpc.aio.ServicerContext, message: Any) -> None:
    """`context.write(message)`, once the reader has room for it; a reader gone ends the call as CANCELLED.

    A write to a call whose reader left fails in gRPC's core (ExecuteBatchError): that is
    the caller leaving, not a server error to log.
    """
    try:
        await context.write(message)
    except grpc.aio.InternalError:
        raise asyncio.CancelledError() from None


async def decoded(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """A client stream's messages; one whose bytes did not parse is refused like a bad request."""
    async for request in requests:
        if isinstance(request, Undecodable):
            raise request.error()
        yield request


class Undecodable:
    """A request whose bytes did not parse (invalid UTF-8 in a string field, a broken varint).

    grpc.aio answers a deserializer's exception with UNKNOWN and the parser's own text; a
    caller's bad bytes are its mistake, so the deserializer hands this on instead and the
    call answers INVALID_ARGUMENT after auth, like any other bad request.
    """

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def error(self) -> InvalidArgument:
        return InvalidArgument(
            "request", f"is not a valid {self.type_name}: it does not parse (invalid UTF-8 in a text field?)"
        )


def _descriptor(deserialize: Callable[[bytes], Any]) -> Any:
    return getattr(getattr(deserialize, "__self__", None), "DESCRIPTOR", None)


def _fields_of(deserialize: Callable[[bytes], Any]) -> Mapping[str, object]:
    descriptor = _descriptor(deserialize)
    return descriptor.fields_by_name if descriptor is not None else {}


def _tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    type_name = _descriptor(deserialize)
    name = type_name.full_name if type_name is not None else "request"

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError:
            return Undecodable(name)

    return parse


def _code_of(context: grpc.aio.ServicerContext) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int):  # some grpc versions keep the raw integer
        return next((c.name for c in grpc.StatusCode if c.value[0] == code), "UNKNOWN")
    return "UNKNOWN"


class _Registrar:
    """What a generated `add_*Servicer_to_server` is handed: it wraps the handlers on the way in."""

    def __init__(self, server: grpc.aio.Server, wrapping: Wrapping) -> None:
        self._server, self._wrapping = server, wrapping

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        """Ignored: the generated code registers the same handlers by name just after."""

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]) -> None:
        wrapped = {name: self._wrapping.handler(f"{service}/{name}", h) for name, h in handlers.items()}
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, wrapped),))
        self._server.add_registered_method_handlers(service, wrapped)


def register(server: grpc.aio.Server, wrapping: Wrapping, add: AddToServer, servicer: object) -> None:
    """`add(servicer, server)` with every method handler wrapped."""
    add(servicer, _Registrar(server, wrapping))
