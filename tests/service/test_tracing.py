"""Tracing with OpenTelemetry against real servers on SQLite: one trace from the
Submit call to the worker's handler; off unless configured, and then no spans, no provider,
and not one database statement more than with it on."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from served import Served, eventually
from service_support import claim, run_worker_until, submit

from jobwire.db.wire import Many, MySQLWire, SQLiteWire, Statement
from jobwire.observe import tracing
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk import Handlers, JobContext, Result, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(60)

handlers = Handlers()


@handlers.job("traced")
def traced(ctx: JobContext) -> Result:
    ctx.stage("PROCESSING")
    return Result.from_bytes(b"done")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert tracing.configure("jobwire-test", exporter=exporter)
    yield exporter
    tracing.stop()


async def test_one_trace_holds_the_submit_and_the_workers_handler(
    spans: InMemorySpanExporter, serve: Any, tmp_path: Path
) -> None:
    s: Served = await serve()
    job = await submit(s, "traced", payload=b"{}")
    config = WorkerConfig(target=s.target, worker_id="w-trace", concurrency=1, claim_wait=0.2, tmp_root=tmp_path)
    await run_worker_until(s, Worker(config, handlers), job.job_no, job_pb2.Job.READY)

    finished = spans.get_finished_spans()
    (submitted,) = [x for x in finished if x.name == "/jobwire.v1.JobService/Submit"]
    (handled,) = [x for x in finished if x.name == "jobwire.job traced"]
    assert submitted.kind is trace.SpanKind.SERVER and handled.kind is trace.SpanKind.CONSUMER
    assert handled.parent is not None and handled.parent.span_id == submitted.context.span_id
    assert handled.context.trace_id == submitted.context.trace_id
    assert handled.attributes is not None and handled.attributes["jobwire.job_no"] == job.job_no
    system = "mysql" if s.is_mysql else "sqlite"
    transactions = [x for x in finished if x.name == "jobwire.db transact"]
    assert transactions and all(x.attributes and x.attributes["db.system"] == system for x in transactions)
    assert not [x for x in finished if "grpc.health" in x.name]  # probes make no spans


async def test_a_refused_call_carries_its_status_on_its_span(spans: InMemorySpanExporter, serve: Any) -> None:
    s: Served = await serve()
    with pytest.raises(grpc.aio.AioRpcError):
        await s.jobs.Get(job_pb2.GetRequest(job_no="PT-20260101-999"))

    # The server's span ends after the reply has left, so the caller can be first.
    async def get_spans() -> list[Any]:
        return [x for x in spans.get_finished_spans() if x.name == "/jobwire.v1.JobService/Get"]

    (span,) = await eventually(get_spans, what="the Get's span ended")
    assert span.attributes is not None and span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert span.status.status_code is trace.StatusCode.UNSET  # the caller's mistake, not the server's fault


async def _lease_and_statements(serve: Callable[..., Awaitable[Served]]) -> tuple[worker_pb2.Lease, Counter[str]]:
    """Submit, Claim, ReportStage and Complete one job; the statements the store ran for them."""
    s = await serve(reaper_interval_seconds=0, feed_poll_seconds=3600)  # no housekeeping, no tail polling
    await asyncio.sleep(0)
    ran: Counter[str] = Counter()
    with _Counting(ran):
        job = await submit(s, "traced", payload=b"{}")
        (lease,) = await claim(s, "traced")
        token = {"job_no": job.job_no, "worker_token": lease.worker_token}
        await s.workers.ReportStage(worker_pb2.ReportStageRequest(**token, stage="PROCESSING"))
        await s.workers.Complete(worker_pb2.CompleteRequest(**token, inline_result=b"done"))
    await s.close()
    return lease, ran


def _text(statement: Statement) -> str:
    return statement.sql if isinstance(statement, Many) else statement[0]


class _Counting:
    """Counts every statement the write path sends, by its SQL text."""

    def __init__(self, ran: Counter[str]) -> None:
        self._ran = ran
        self._saved: list[tuple[type, str, Any]] = []

    def __enter__(self) -> None:
        ran = self._ran
        for cls in (SQLiteWire, MySQLWire):
            fetch, run, commit = cls.fetch, cls.run, cls.commit
            self._saved += [(cls, "fetch", fetch), (cls, "run", run), (cls, "commit", commit)]

            async def counted_fetch(self: Any, sql: str, *args: Any, _f: Any = fetch) -> Any:
                ran[sql] += 1
                return await _f(self, sql, *args)

            async def counted_run(self: Any, batch: Any, _f: Any = run) -> Any:
                ran.update(map(_text, batch))
                return await _f(self, batch)

            # SQLite's commit hands its batch to run (counted there); MySQL's sends it itself.
            async def counted_commit(
                self: Any, batch: Any = (), _f: Any = commit, _own: bool = cls is MySQLWire
            ) -> Any:
                ran.update([*(map(_text, batch) if _own else ()), "COMMIT"])
                return await _f(self, batch)

            cls.fetch, cls.run, cls.commit = counted_fetch, counted_run, counted_commit  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        for cls, name, original in self._saved:
            setattr(cls, name, original)


async def test_off_unless_configured_and_no_statement_more_when_on(
    serve: Callable[..., Awaitable[Served]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert not tracing.configure("jobwire-test")
    assert tracing.tracer() is None and tracing.server_interceptors() == ()
    assert tracing.traceparent() is None
    untraced, off = await _lease_and_statements(serve)
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # nobody set one up
    assert untraced.traceparent == ""

    exporter = InMemorySpanExporter()
    tracing.configure("jobwire-test", exporter=exporter)
    try:
        lease, on = await _lease_and_statements(serve)
    finally:
        tracing.stop()
    assert lease.traceparent.startswith("00-") and exporter.get_finished_spans()
    assert on == off  # the trace context rides in the Submit's own insert: no statement of its own
    (insert,) = [sql for sql in off if sql.startswith("INSERT INTO job ")]
    assert "trace_context" in insert and off[insert] == 1
