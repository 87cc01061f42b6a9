"""Run one leased job: set up its attempt, call the handler, and end the attempt honestly.

Endings: a returned Result is delivered and verified, then Complete; a cancel at a safe
point removes the temporary folder, then ConfirmCancel; a lost lease, or an attempt past
its deadline, stops everything and tells nobody; an exception becomes Fail with a
category; a shutdown at a safe point becomes Release with the latest checkpoint. The
temporary folder is removed in every case.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from opentelemetry.trace import SpanKind, StatusCode

from jobwire.codec import stages_from_proto
from jobwire.domain.handler_evidence import Entry
from jobwire.domain.review import Decision, Review
from jobwire.domain.stages import StageDef
from jobwire.observe import tracing
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk._attempt import AttemptState, JobInfo, Snapshot, StopReason
from jobwire.worker.sdk._context import JobContext
from jobwire.worker.sdk._deps import RunnerDeps
from jobwire.worker.sdk._endings import (
    Ending,
    EndKind,
    cancelled_from_outside,
    decide,
    run_async_handler,
)
from jobwire.worker.sdk._finisher import Finisher, remove_folder
from jobwire.worker.sdk._handlers import AsyncHandler, HandlerSpec, SyncHandler
from jobwire.worker.sdk._reporter import JobReporter

log = logging.getLogger("jobwire.worker")


class _LoopSink:
    """Hands snapshots and evidence entries from any thread to the reporter on the event loop, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, reporter: JobReporter) -> None:
        self._loop, self._reporter = loop, reporter

    def publish(self, snapshot: Snapshot) -> None:
        # A closed loop means the worker has exited and nobody listens any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._reporter.update, snapshot)

    def record(self, entry: Entry) -> None:
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._reporter.record, entry)


def stages_of(lease: worker_pb2.Lease, spec: HandlerSpec) -> tuple[StageDef, ...]:
    """The plan the server snapshotted at claim time; the handler's own if it sent none."""
    if not lease.stages:
        return spec.stages
    return stages_from_proto(lease.stages)


class JobRunner:
    """One attempt of one job, from lease to ending."""

    def __init__(self, deps: RunnerDeps, lease: worker_pb2.Lease, spec: HandlerSpec) -> None:
        self._deps, self._lease, self._spec = deps, lease, spec
        self.job_no = lease.job_no
        self._stop_early: StopReason | None = None
        self._state: AttemptState | None = None

    def request_stop(self, reason: StopReason) -> None:
        if self._state is not None:
            self._state.request_stop(reason)
        else:
            self._stop_early = max(reason, self._stop_early or reason)

    async def run(self) -> EndKind:
        """Run the attempt to its end; returns how it ended."""
        lease = self._lease
        stages = stages_of(lease, self._spec)
        tmp = Path(tempfile.mkdtemp(prefix=f"jobwire-{lease.job_no}-a{lease.attempt}-", dir=self._deps.tmp_root))
        reporter = JobReporter(
            self._deps.reports,
            job_no=lease.job_no,
            token=lease.worker_token,
            first_stage=stages[0].code,
            on_stop=self.request_stop,
        )
        state = AttemptState(self._info(stages, tmp), _LoopSink(asyncio.get_running_loop(), reporter))
        self._state = state
        if self._stop_early is not None:
            state.request_stop(self._stop_early)
        interval = lease.heartbeat_interval.ToTimedelta().total_seconds()
        self._deps.keeper.add(lease.job_no, lease.worker_token, interval=interval, on_stop=state.request_stop)
        time_limit = _stop_at_deadline(state)
        try:
            ending = await self._invoke(state)
            await Finisher(self._deps, lease, state, reporter).finish(ending)
            return ending.kind
        finally:
            if time_limit is not None:
                time_limit.cancel()
            self._deps.keeper.remove(lease.job_no, lease.worker_token)
            await reporter.close()
            await remove_folder(tmp)  # an ending call removed it already (see _end), unless none was made

    def _info(self, stages: tuple[StageDef, ...], tmp: Path) -> JobInfo:
        lease = self._lease
        return JobInfo(
            job_no=lease.job_no,
            job_type=lease.job_type,
            tenant=lease.tenant,
            payload=lease.payload,
            attempt=lease.attempt,
            last_checkpoint=lease.checkpoint if lease.has_checkpoint else None,
            stages=stages,
            tmp_dir=tmp,
            deadline=lease.attempt_deadline.ToDatetime(tzinfo=UTC) if lease.HasField("attempt_deadline") else None,
            review=review_of(lease),
        )

    async def _invoke(self, state: AttemptState) -> Ending:
        tracer = tracing.tracer()
        if tracer is None:
            return await self._call(state)
        lease = self._lease
        # A child of the Submit's span (the lease carries its traceparent): one trace from the
        # backend's request to this handler, across machines.
        with tracer.start_as_current_span(
            f"jobwire.job {lease.job_type}",
            context=tracing.parent_context(lease.traceparent),
            kind=SpanKind.CONSUMER,
            attributes={"jobwire.job_no": lease.job_no, "jobwire.attempt": lease.attempt},
        ) as span:
            ending = await self._call(state)
            span.set_attribute("jobwire.ending", ending.kind.value)
            if ending.failure is not None:
                span.set_status(StatusCode.ERROR, ending.failure.category.value)
            return ending

    async def _call(self, state: AttemptState) -> Ending:
        ctx = JobContext(state)
        result: object = None
        error: BaseException | None = None
        try:
            if self._spec.is_async:
                result = await run_async_handler(cast(AsyncHandler, self._spec.fn), ctx, state)
            else:
                result = await self._deps.run_sync(cast(SyncHandler, self._spec.fn), ctx)
        except BaseException as exc:  # noqa: BLE001 - every outcome is reported, none lost
            error = exc
        if cancelled_from_outside(error):
            # Abandoned by the worker (grace period over): no safe point was reached.
            return Ending(kind=EndKind.ABANDON)
        return decide(stop=state.stop, delivered=state.delivered, result=result, error=error)


def _stop_at_deadline(state: AttemptState) -> asyncio.TimerHandle | None:
    """Stop the handler when its attempt's time runs out by this machine's clock.

    The server ends the attempt by the database clock whatever happens here; this only
    spares the handler work nobody will take.
    """
    deadline = state.info.deadline
    if deadline is None:
        return None
    delay = max(0.0, (deadline - datetime.now(UTC)).total_seconds())
    return asyncio.get_running_loop().call_later(delay, state.request_stop, StopReason.TIMED_OUT)


def review_of(lease: worker_pb2.Lease) -> Review | None:
    if not lease.HasField("review"):
        return None
    r = lease.review
    return Review(decision=Decision(job_pb2.Review.Decision.Name(r.decision)), note=r.note, resolved_by=r.resolved_by)
