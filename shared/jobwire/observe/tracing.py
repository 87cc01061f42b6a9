"""Traces with OpenTelemetry, configured by the standard OTEL_* variables; off unless asked.

Tracing is on when OTEL_TRACES_EXPORTER names an exporter (`otlp`, `console`, ...) or an
OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and
OTEL_SDK_DISABLED is not `true`. The SDK reads the rest itself: OTEL_SERVICE_NAME and
OTEL_RESOURCE_ATTRIBUTES (the resource), OTEL_TRACES_SAMPLER (the sampler), OTEL_BSP_* (the
batch processor) and OTEL_EXPORTER_OTLP_* (the exporter).

Off, nothing is set up: no provider, no server interceptor, and each hot path pays one test
of `tracer()` for None (no span object, no context, no extra database column read... the
trace context column is written only when there is one).

What is traced: every RPC a server answers (opentelemetry-instrumentation-grpc's aio server
interceptor; health checks excepted), each store transaction, and in a worker each job's
handler, whose span is a child of the span of the Submit that made the job: the job row
keeps that call's W3C `traceparent`, and the lease hands it to the worker.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

_OFF = contextlib.nullcontext()


class _State:
    """This process's tracing: both None while it is off."""

    provider: TracerProvider | None = None
    tracer: trace.Tracer | None = None


_state = _State()


def requested(env: Mapping[str, str] = os.environ) -> bool:
    """Do the OTEL_* variables ask for traces?"""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(service_name: str, *, exporter: SpanExporter | None = None) -> bool:
    """Start tracing if OTEL_* ask for it; True if it is on.

    `service_name` is the default for OTEL_SERVICE_NAME. With `exporter` (a test's in-memory
    one) tracing starts whatever the environment says, spans are exported as they end, and
    the process-wide provider is left alone; otherwise jobwire's provider becomes it, so a
    handler's own spans join the job's trace.
    """
    if exporter is None and not requested():
        return False
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    named = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    provider = TracerProvider(resource=Resource.create(named))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        for each in _exporters(os.environ):
            provider.add_span_processor(BatchSpanProcessor(each))
        trace.set_tracer_provider(provider)
    _state.provider, _state.tracer = provider, provider.get_tracer("jobwire")
    return True


def _exporters(env: Mapping[str, str]) -> Iterator[SpanExporter]:
    names = env.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name == "otlp":  # as the SDK's own configurator picks grpc or http
            protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            name = "otlp_proto_http" if protocol.startswith("http") else "otlp_proto_grpc"
        found = entry_points(group="opentelemetry_traces_exporter", name=name)
        if not found:
            raise ValueError(
                f"OTEL_TRACES_EXPORTER: no span exporter {name!r} is installed"
                " (the OTLP one comes with pip install 'jobwire-shared[otlp]')"
            )
        yield next(iter(found)).load()()


def stop() -> None:
    """Export what is pending and turn tracing off."""
    provider, _state.provider, _state.tracer = _state.provider, None, None
    if provider is not None:
        provider.shutdown()


def tracer() -> trace.Tracer | None:
    """jobwire's tracer, or None while tracing is off."""
    return _state.tracer


def span(name: str, attributes: Mapping[str, str] | None = None) -> contextlib.AbstractContextManager[Any]:
    """A span around a block while tracing is on; else a shared do-nothing context."""
    active = _state.tracer
    if active is None:
        return _OFF
    started: contextlib.AbstractContextManager[Any] = active.start_as_current_span(name, attributes=attributes)
    return started


# The interceptor takes every response stream for an async generator; WorkerService.Session
# writes with context.write() instead, and wrapped it fails each session with a TypeError. A
# span of it would last as long as its worker, and tell nothing.
_UNTRACED = "/jobwire.v1.WorkerService/Session"


def server_interceptors() -> tuple[Any, ...]:
    """A span for every RPC a grpc.aio server answers (health checks and worker sessions aside); none when off."""
    provider = _state.provider
    if provider is None:
        return ()
    from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

    traced = filters.all_of(filters.negate(filters.health_check()), filters.negate(filters.full_method_name(_UNTRACED)))
    return (aio_server_interceptor(tracer_provider=provider, filter_=traced),)  # type: ignore[no-untyped-call]


# The codes that are the server's fault, by OpenTelemetry's conventions for gRPC server spans.
_SERVER_FAULTS = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"})


def call_ended(code: str, number: int) -> None:
    """Put a call's gRPC status on its span: the handlers answer with abort_with_status,
    which the interceptor does not see (it would record every call as OK)."""
    current = trace.get_current_span()
    current.set_attribute("rpc.grpc.status_code", number)
    if code in _SERVER_FAULTS:
        current.set_status(trace.StatusCode.ERROR, code)


def traceparent() -> str | None:
    """The W3C traceparent of the current span, kept with a job it makes; None when off."""
    if _state.tracer is None:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent")


def parent_context(traceparent: str) -> Context:
    """The context a job's traceparent names, for the span of the work done for it."""
    return propagate.extract({"traceparent": traceparent} if traceparent else {})
