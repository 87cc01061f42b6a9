"""The handler's view of its job (`JobContext`) and the attempt state the runtime shares with it.

Handlers may call the context from any thread (a sync handler runs in a pool thread and
may fan out further), so every change happens under one lock and is published to the
reporter in the order it happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, Protocol

from jobwire.domain import handler_evidence, limits
from jobwire.domain.errors import ProgressRegression
from jobwire.domain.handler_evidence import Entry
from jobwire.domain.progress import Progress, apply_report
from jobwire.domain.review import Review, review_request
from jobwire.domain.stages import StageDef
from jobwire.worker.sdk._errors import (
    AwaitingReview,
    InputInvalid,
    JobCancelled,
    LeaseLost,
    ShuttingDown,
    TimedOut,
    UndeclaredStage,
)


class StopReason(enum.IntEnum):
    """Why a job must stop; a higher value overrides a lower one."""

    SHUTDOWN = 1
    CANCEL = 2
    TIMED_OUT = 3  # the attempt's deadline passed (by this machine's clock, or the server said so)
    LOST = 4


_SIGNALS: dict[StopReason, type[BaseException]] = {
    StopReason.SHUTDOWN: ShuttingDown,
    StopReason.CANCEL: JobCancelled,
    StopReason.TIMED_OUT: TimedOut,
    StopReason.LOST: LeaseLost,
}
_MESSAGES = {
    StopReason.SHUTDOWN: "the worker is shutting down",
    StopReason.CANCEL: "the job was cancelled",
    StopReason.TIMED_OUT: "the attempt ran past its time limit",
    StopReason.LOST: "this worker no longer holds the job's lease",
}


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The latest reportable state of an attempt. `checkpoint_seq` counts checkpoints taken."""

    stage: str
    processed: int
    total: int | None
    checkpoint: bytes | None
    checkpoint_seq: int


class ReportSink(Protocol):
    """Where snapshots and evidence entries go: the coalescing reporter, or a test recorder."""

    def publish(self, snapshot: Snapshot) -> None: ...

    def record(self, entry: Entry) -> None: ...


@dataclass(frozen=True, kw_only=True)
class JobInfo:
    job_no: str
    job_type: str
    tenant: str  # whose job it is (a shared fleet's worker serves every tenant)
    payload: bytes
    attempt: int
    last_checkpoint: bytes | None
    stages: tuple[StageDef, ...]
    tmp_dir: Path
    deadline: datetime | None = None  # when the attempt's time runs out (aware, UTC)
    review: Review | None = None  # a reviewer's approval of this job, when there was one


class AttemptState:
    """One attempt's progress, checkpoint and stop signal; owned by the runtime."""

    def __init__(self, info: JobInfo, sink: ReportSink) -> None:
        self.info = info
        self._sink = sink
        # Re-entrant: a test's report callback may cancel the job from inside a report.
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._progress = Progress(stage_index=1, stage_count=len(info.stages))
        self._checkpoint: bytes | None = None
        self._checkpoint_seq = 0
        self._recorded = 0  # evidence entries of this attempt (the server bounds them per attempt)
        self._stop: StopReason | None = None
        self._delivered: StopReason | None = None
        # Called once, on their loop, when the first stop is requested.
        self._listeners: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []

    # -- written by the handler through JobContext -------------------------------------

    def enter_stage(self, code: str) -> None:
        with self._lock:
            codes = [stage.code for stage in self.info.stages]
            if code not in codes:
                raise UndeclaredStage(self.info.job_type, code, codes)
            index = codes.index(code) + 1
            if index == self._progress.stage_index:
                return
            if index < self._progress.stage_index:
                raise ProgressRegression(f"stage {code} is behind stage {self.stage}")
            self._progress = Progress(stage_index=index, stage_count=len(self.info.stages))
            self._publish()

    def report(self, processed: int, total: int | None) -> None:
        with self._lock:
            # The same rules the server applies, checked here so a mistake fails in the
            # handler's own stack instead of as a refused report later.
            updated = apply_report(self.info.stages, self._progress, self.stage, processed, total)
            if updated != self._progress:
                self._progress = updated
                self._publish()

    def save_checkpoint(self, data: bytes) -> None:
        data = limits.blob("checkpoint", bytes(data), limits.MAX_CHECKPOINT_BYTES)
        with self._lock:
            self._checkpoint = data
            self._checkpoint_seq += 1
            self._publish()

    def record(self, key: str, value: str) -> None:
        # The server's rules, checked here so a mistake fails in the handler's own stack.
        (entry,) = handler_evidence.entries([(key, value)])
        with self._lock:
            self._recorded = handler_evidence.admitted(self._recorded, 1)
            self._sink.record(entry)

    def check(self) -> None:
        with self._lock:
            reason = self._stop
            if reason is None:
                return
            self._delivered = max(reason, self._delivered or reason)
        raise _SIGNALS[reason](_MESSAGES[reason])

    def note_delivered(self) -> None:
        """The stop reached the handler by other means than `check()` (its task was cancelled)."""
        with self._lock:
            if self._stop is not None:
                self._delivered = max(self._stop, self._delivered or self._stop)

    def sleep(self, seconds: float) -> None:
        if _on_event_loop():
            raise TypeError("ctx.sleep() blocks the event loop; in an async handler use `await ctx.asleep(seconds)`")
        self._wake.wait(max(0.0, seconds))
        self.check()

    async def asleep(self, seconds: float) -> None:
        self.check()
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        remove = self.on_stop(loop, wake)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken, max(0.0, seconds))
        finally:
            remove()
        self.check()

    def on_stop(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` on `loop` when a stop is first requested (at once if it already was).

        Returns a function that removes the callback again.
        """
        entry = (loop, callback)
        with self._lock:
            stopped = self._stop is not None
            if not stopped:
                self._listeners.append(entry)
        if stopped:
            _call_on(loop, callback)

        def remove() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(entry)

        return remove

    # -- read and written by the runtime -------------------------------------------------

    def request_stop(self, reason: StopReason) -> None:
        """Ask the handler to stop at its next safe point; a stronger reason wins."""
        with self._lock:
            listeners: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []
            if self._stop is None:
                listeners, self._listeners = self._listeners, []
            if self._stop is None or reason > self._stop:
                self._stop = reason
        self._wake.set()
        for loop, callback in listeners:
            _call_on(loop, callback)

    @property
    def stop(self) -> StopReason | None:
        with self._lock:
            return self._stop

    @property
    def delivered(self) -> StopReason | None:
        """The strongest stop signal the handler was actually given by `check()`."""
        with self._lock:
            return self._delivered

    @property
    def stage(self) -> str:
        return self.info.stages[self._progress.stage_index - 1].code

    @property
    def checkpoint(self) -> bytes | None:
        with self._lock:
            return self._checkpoint

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> Snapshot:
        return Snapshot(
            stage=self.stage,
            processed=self._progress.processed_units,
            total=self._progress.total_units,
            checkpoint=self._checkpoint,
            checkpoint_seq=self._checkpoint_seq,
        )

    def _publish(self) -> None:
        # Under the lock, so snapshots reach the sink in the order they were taken.
        self._sink.publish(self._snapshot())


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _call_on(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    # A closed loop has nobody left to wake.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)


class JobContext:
    """What a handler knows and can say about the job it runs.

    Thread-safe: call it from the handler's thread, from threads it starts, or from the
    event loop for `async def` handlers. Only `check()`, `sleep()` and `asleep()` raise a
    stop signal; progress calls never block on the network.

    In an `async def` handler a stop (cancel, lost lease, time out, shutdown) also cancels the
    handler's task, so any `await` may end it with `asyncio.CancelledError`; the runtime
    ends the attempt for the stop's reason. Clean up in `finally`, and let it propagate.
    """

    def __init__(self, state: AttemptState) -> None:
        self._state = state

    @property
    def job_no(self) -> str:
        """The job number, e.g. ``PT-20261008-001``."""
        return self._state.info.job_no

    @property
    def job_type(self) -> str:
        return self._state.info.job_type

    @property
    def tenant(self) -> str:
        """Whose job this is: the tenant that submitted it (a shared fleet serves several)."""
        return self._state.info.tenant

    @property
    def payload(self) -> bytes:
        """The payload as submitted."""
        return self._state.info.payload

    @property
    def attempt(self) -> int:
        """This attempt's number, counting from 1."""
        return self._state.info.attempt

    @property
    def last_checkpoint(self) -> bytes | None:
        """The checkpoint an earlier attempt saved, or None; fixed for this attempt."""
        return self._state.info.last_checkpoint

    @property
    def stages(self) -> Sequence[StageDef]:
        """The stage plan this job runs through."""
        return self._state.info.stages

    @property
    def current_stage(self) -> str:
        return self._state.stage

    @property
    def tmp_dir(self) -> Path:
        """A private folder for this attempt; removed by the runtime when the attempt ends."""
        return self._state.info.tmp_dir

    @property
    def deadline(self) -> datetime | None:
        """When this attempt's time runs out (aware, UTC), or None when it has no limit.

        Past it the runtime stops the handler at its next safe point (`check()` raises
        TimedOut) and delivers nothing: the server ends the attempt and decides whether it
        runs again.
        """
        return self._state.info.deadline

    @property
    def stop_requested(self) -> bool:
        """True once the job should stop; `check()` then raises the reason."""
        return self._state.stop is not None

    def json(self) -> Any:
        """The payload decoded as JSON; an empty payload reads as ``{}``.

        Raises:
            InputInvalid: The payload is not valid JSON.
        """
        if not self.payload.strip():
            return {}
        try:
            return json.loads(self.payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputInvalid(f"the payload is not valid JSON: {exc}") from exc

    def stage(self, code: str) -> None:
        """Enter stage `code` of the plan; reported at once. Stages never go back.

        Raises:
            UndeclaredStage: The job type's plan has no such stage (declare it:
                ``@handlers.job("x", stages=[...])``).
            ProgressRegression: `code` is behind the current stage.
        """
        self._state.enter_stage(code)

    def progress(self, processed: int, total: int | None = None) -> None:
        """Report units done in the current stage; give `total` only when truly known.

        Reports are coalesced (at most one per 250 ms within a stage, the latest always
        sent), so calling this for every unit is fine.
        """
        self._state.report(processed, total)

    def checkpoint(self, data: bytes) -> None:
        """Save where a later attempt may resume (at most 64 KiB); sent with the next report."""
        self._state.save_checkpoint(data)

    def record(self, key: str, value: str) -> None:
        """Leave evidence for operators: `ctx.record("payment_request_id", "pi_3Nx...")`.

        The entry joins this attempt's trail with its stage and time (AdminService.ListEvents,
        the evidence page); the job's user never sees it. Entries are sent with the next
        reports, and before the attempt ends.

        Args:
            key: A name, [A-Za-z0-9][A-Za-z0-9_.:-]{0,63}.
            value: Plain text, at most 1000 characters, no control characters.

        Raises:
            InvalidArgument: A key or value past those rules (nothing is sent).
            EvidenceLimitReached: This attempt has recorded 200 entries already.
        """
        self._state.record(key, value)

    @property
    def review(self) -> Review | None:
        """The reviewer's decision (APPROVE), note and name when this job was approved after
        an `await_review`; None when nobody reviewed it."""
        return self._state.info.review

    def await_review(self, assignee: str, items: Sequence[str] = (), checkpoint: bytes | None = None) -> NoReturn:
        """Hand the job to a person and end this attempt: raises AwaitingReview, which the
        handler lets propagate (as it would a stop).

        The job then WAITs with no lease and no attempt clock. If the reviewer approves, a
        later attempt runs with `review` set and `last_checkpoint` as saved here (or by the
        last `checkpoint()`); if they reject it, the job ends FAILED with their note.

        Args:
            assignee: Who must review it (a name, at most 128 characters).
            items: What they should look at: at most 50 lines of plain text, 500 characters each.
            checkpoint: Where the next attempt resumes (at most 64 KiB).

        Raises:
            InvalidArgument: A missing assignee, or items past the limits (nothing is sent).
        """
        request = review_request(assignee, tuple(items))
        if checkpoint is not None:
            self._state.save_checkpoint(checkpoint)
        raise AwaitingReview(request)

    def check(self) -> None:
        """A safe point: return, or raise JobCancelled, LeaseLost, ShuttingDown or TimedOut.

        Call it where stopping leaves nothing half-done, e.g. between batches.
        """
        self._state.check()

    def sleep(self, seconds: float) -> None:
        """Sleep in a sync handler, waking early to stop; a safe point like `check()`.

        Raises:
            TypeError: Called on an event loop (an `async def` handler): use `asleep`.
        """
        self._state.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        """Sleep in an async handler, waking early to stop; a safe point like `check()`."""
        await self._state.asleep(seconds)
