"""Run a handler without a server: `JobEnvironment`, like Temporal's ActivityEnvironment.

Example:
    env = JobEnvironment(payload={"frames": 20}, handlers=registry, job_type="frames")
    env.on_report = lambda r: env.cancel() if r.processed >= 10 else None
    outcome = env.run()
    assert outcome.kind == "CONFIRM_CANCEL"
    assert not env.tmp_dir.exists()

The environment applies the same endings as the worker (the same `decide()`): a returned
Result is delivered and hashed into `results_dir`, a cancel, a lost lease or a time out
removes the temporary folder and delivers nothing, an exception is classified into a Failure.
Reports are recorded as the handler made them, before any coalescing, and so is the
evidence it leaves (`ctx.record`: `env.evidence`, `(key, value)` in order). A handler whose source
enters a stage its plan lacks is refused before it runs (`UndeclaredStage`), as the worker
refuses to start; a stage named at run time is refused at the call, as in production.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import cast

from jobwire.domain.handler_evidence import Entry
from jobwire.domain.job import Artifact
from jobwire.domain.progress import Progress
from jobwire.domain.review import Review, ReviewRequest
from jobwire.domain.stages import StageDef
from jobwire.worker.sdk._attempt import AttemptState, JobInfo, Snapshot, StopReason
from jobwire.worker.sdk._context import JobContext
from jobwire.worker.sdk._endings import (
    Ending,
    EndKind,
    cancelled_from_outside,
    decide,
    run_async_handler,
)
from jobwire.worker.sdk._errors import Failure, failure_of
from jobwire.worker.sdk._handlers import AsyncHandler, HandlerFn, Handlers, HandlerSpec, SyncHandler, plan_of
from jobwire.worker.sdk._result import ResultStore, remove_tree
from jobwire.worker.sdk._stage_check import check_stages

__all__ = ["EndKind", "JobEnvironment", "Outcome", "Report"]


@dataclass(frozen=True, kw_only=True)
class Report:
    """One report as the handler made it; `checkpoint` is set when it saved a new one."""

    stage: str
    processed: int
    total: int | None
    checkpoint: bytes | None = None

    @property
    def percent(self) -> int | None:
        """What a user would see: only with a known total (the domain's rule)."""
        return Progress(stage_index=1, stage_count=1, processed_units=self.processed, total_units=self.total).percent


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How the attempt ended, and what the worker would have sent.

    `kind` is one of COMPLETE, FAIL, CONFIRM_CANCEL, RELEASE, AWAIT_REVIEW, DISCARD (lost
    lease), TIMED_OUT (past the attempt's deadline).
    """

    kind: EndKind
    artifact: Artifact | None = None
    result_path: Path | None = None
    failure: Failure | None = None
    checkpoint: bytes | None = None  # what Release or AwaitReview would carry
    review: ReviewRequest | None = None  # AWAIT_REVIEW: who must review it, and what
    # Keeps a default (temporary) results folder alive as long as the outcome is.
    keepalive: object = field(default=None, repr=False, compare=False)

    def read_result(self) -> bytes:
        if self.result_path is None:
            raise ValueError(f"the attempt ended {self.kind.value}, with no result")
        return self.result_path.read_bytes()


class JobEnvironment:
    """One attempt of a handler, with switches for cancel, lost lease and shutdown.

    Args:
        payload: Bytes, text, or a JSON-able value.
        handlers: Registry to take the handler and stage plan from (with `job_type`).
        job_type: The job type to run.
        stages: The stage plan when not taken from `handlers`; None is the default plan.
        tenant: What `ctx.tenant` says: whose job it is.
        attempt: The attempt number the handler sees.
        last_checkpoint: The checkpoint an earlier attempt saved, to test resuming.
        results_dir: Where results are delivered; a fresh temporary folder if None.
        results_url: The base URL results are published under (as `WorkerConfig.results_url`);
            None gives file:// URIs.
        tmp_root: Where the attempt's temporary folder is made.
        deadline: What `ctx.deadline` says; the attempt stops only when `time_out()` is called.
        review: What `ctx.review` says: a reviewer's approval of the job, or None.
    """

    def __init__(
        self,
        *,
        payload: bytes | str | Mapping[str, object] | Sequence[object] = b"",
        handlers: Handlers | None = None,
        job_type: str = "test",
        stages: Sequence[StageDef | str] | None = None,
        job_no: str = "TEST-20260101-001",
        tenant: str = "default",
        attempt: int = 1,
        last_checkpoint: bytes | None = None,
        results_dir: Path | None = None,
        results_url: str | None = None,
        tmp_root: Path | None = None,
        deadline: datetime | None = None,
        review: Review | None = None,
    ) -> None:
        self.payload = _encode(payload)
        self.deadline = deadline
        self.review = review
        self.handlers, self.job_type, self.job_no, self.tenant = handlers, job_type, job_no, tenant
        self.attempt, self.last_checkpoint = attempt, last_checkpoint
        self._stages = stages
        # Without a results_dir, results go to a folder removed once env and outcome are gone.
        self._results_tmp: tempfile.TemporaryDirectory[str] | None = None
        if results_dir is None:
            self._results_tmp = tempfile.TemporaryDirectory(prefix="jobwire-results-")
            results_dir = Path(self._results_tmp.name)
        self.store = ResultStore(results_dir, base_url=results_url)
        self._tmp_root = tmp_root
        self.reports: list[Report] = []
        self.checkpoints: list[bytes] = []
        self.evidence: list[tuple[str, str]] = []  # what the handler recorded (ctx.record), in order
        self.on_report: Callable[[Report], None] | None = None
        self.tmp_dir: Path | None = None
        self.outcome: Outcome | None = None
        self._lock = threading.Lock()
        self._pending: StopReason | None = None
        self._state: AttemptState | None = None
        self._last_seq = 0

    # -- switches -------------------------------------------------------------------

    def cancel(self) -> None:
        """As if the user cancelled: the next safe point raises JobCancelled."""
        self._stop(StopReason.CANCEL)

    def lose_lease(self) -> None:
        """As if the lease were revoked: the next safe point raises LeaseLost."""
        self._stop(StopReason.LOST)

    def time_out(self) -> None:
        """As if the attempt's deadline passed: the next safe point raises TimedOut."""
        self._stop(StopReason.TIMED_OUT)

    def shutdown(self) -> None:
        """As if the worker got SIGTERM: the next safe point raises ShuttingDown."""
        self._stop(StopReason.SHUTDOWN)

    # -- running --------------------------------------------------------------------

    def run(self, handler: HandlerFn | None = None) -> Outcome:
        """Run the handler to its end; sync handlers run in this thread.

        Raises:
            UndeclaredStage: The handler's source enters a stage its plan does not have.
        """
        spec = self._spec(handler)
        if spec.is_async:
            return asyncio.run(self.run_async(handler))
        state, ctx = self._begin(spec)
        result, error = _call(lambda: spec.fn(ctx))
        return self._end(state, result, error)

    async def run_async(self, handler: HandlerFn | None = None) -> Outcome:
        """Run the handler to its end; sync handlers run in a thread."""
        spec = self._spec(handler)
        state, ctx = self._begin(spec)
        result: object = None
        error: BaseException | None = None
        try:
            if spec.is_async:
                result = await run_async_handler(cast(AsyncHandler, spec.fn), ctx, state)
            else:
                result = await asyncio.to_thread(cast(SyncHandler, spec.fn), ctx)
        except BaseException as exc:  # noqa: BLE001 - the outcome records it
            error = exc
        outcome = self._end(state, result, error)
        if error is not None and cancelled_from_outside(error):
            raise error  # the test itself is being cancelled
        return outcome

    @property
    def last_report(self) -> Report | None:
        return self.reports[-1] if self.reports else None

    # -- internals --------------------------------------------------------------------

    def _record(self, snapshot: Snapshot) -> None:
        """Every report the handler makes: record it, then let the test react."""
        with self._lock:
            new = snapshot.checkpoint if snapshot.checkpoint_seq > self._last_seq else None
            self._last_seq = snapshot.checkpoint_seq
            report = Report(stage=snapshot.stage, processed=snapshot.processed, total=snapshot.total, checkpoint=new)
            self.reports.append(report)
            if new is not None:
                self.checkpoints.append(new)
        if self.on_report is not None:
            self.on_report(report)

    def _evidence(self, entry: Entry) -> None:
        with self._lock:
            self.evidence.append((entry.key, entry.value))

    def _stop(self, reason: StopReason) -> None:
        with self._lock:
            state = self._state
            if state is None:
                self._pending = max(reason, self._pending or reason)
        if state is not None:
            state.request_stop(reason)

    def _spec(self, handler: HandlerFn | None) -> HandlerSpec:
        registered = self.handlers.get(self.job_type) if self.handlers is not None else None
        fn = handler or (registered.fn if registered else None)
        if fn is None:
            raise ValueError(f"no handler given and none registered for {self.job_type!r}")
        stages = registered.stages if registered and self._stages is None else plan_of(self._stages)
        spec = HandlerSpec(job_type=self.job_type, fn=fn, stages=stages, is_async=asyncio.iscoroutinefunction(fn))
        check_stages([spec])  # as the worker refuses to start
        return spec

    def _begin(self, spec: HandlerSpec) -> tuple[AttemptState, JobContext]:
        self.tmp_dir = Path(tempfile.mkdtemp(prefix=f"jobwire-{self.job_no}-a{self.attempt}-", dir=self._tmp_root))
        info = JobInfo(
            job_no=self.job_no,
            job_type=self.job_type,
            tenant=self.tenant,
            payload=self.payload,
            attempt=self.attempt,
            last_checkpoint=self.last_checkpoint,
            stages=spec.stages,
            tmp_dir=self.tmp_dir,
            deadline=self.deadline,
            review=self.review,
        )
        state = AttemptState(info, _Sink(self._record, self._evidence))
        with self._lock:
            self._state = state
            if self._pending is not None:
                state.request_stop(self._pending)
        return state, JobContext(state)

    def _end(self, state: AttemptState, result: object, error: BaseException | None) -> Outcome:
        try:
            ending = decide(stop=state.stop, delivered=state.delivered, result=result, error=error)
            self.outcome = self._finish(state, ending)
        finally:
            remove_tree(state.info.tmp_dir)
        return self.outcome

    def _finish(self, state: AttemptState, ending: Ending) -> Outcome:
        if ending.kind is EndKind.FAIL:
            return Outcome(kind=ending.kind, failure=ending.failure)
        if ending.kind is EndKind.RELEASE:
            return Outcome(kind=ending.kind, checkpoint=state.checkpoint)
        if ending.kind is EndKind.AWAIT_REVIEW:
            return Outcome(kind=ending.kind, checkpoint=state.checkpoint, review=ending.review)
        if ending.kind is not EndKind.COMPLETE:
            return Outcome(kind=ending.kind)
        # No DELIVERING here: the runtime enters it only for a delivery that lasts over one
        # report interval (what users could see), and the harness delivers at once.
        try:
            delivered = self.store.deliver(
                ending.result, tenant=self.tenant, job_no=self.job_no, attempt=self.attempt, tmp_dir=state.info.tmp_dir
            )
        except Exception as exc:  # noqa: BLE001 - an undeliverable result is reported as a failure
            return Outcome(kind=EndKind.FAIL, failure=failure_of(exc))
        if state.stop in (StopReason.LOST, StopReason.TIMED_OUT):
            self.store.discard(delivered.path)
            return Outcome(kind=EndKind.DISCARD if state.stop is StopReason.LOST else EndKind.TIMED_OUT)
        return Outcome(
            kind=ending.kind, artifact=delivered.artifact, result_path=delivered.path, keepalive=self._results_tmp
        )


class _Sink:
    def __init__(self, publish: Callable[[Snapshot], None], record: Callable[[Entry], None]) -> None:
        self.publish, self.record = publish, record


def _call(fn: Callable[[], object]) -> tuple[object, BaseException | None]:
    try:
        return fn(), None
    except (KeyboardInterrupt, SystemExit):
        raise  # the test run is being stopped, not the handler
    except BaseException as exc:  # noqa: BLE001 - the outcome records it
        return None, exc


def _encode(payload: bytes | str | Mapping[str, object] | Sequence[object]) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    return json.dumps(payload).encode()
