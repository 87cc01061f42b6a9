"""The attempt state the runtime shares with a handler's JobContext: its stage, progress,
checkpoint and stop, changed under one lock and published to the reporter in order.

Handlers may call the context from any thread (a sync handler runs in a pool thread and
may fan out further), so every change happens under one lock and is published to the
reporter in the order it happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from jobwire.domain import handler_evidence, limits
from jobwire.domain.errors import ProgressRegression
from jobwire.domain.handler_evidence import Entry
from jobwire.domain.progress import Progress, apply_report
from jobwire.domain.review import Review
from jobwire.domain.stages import StageDef
from jobwire.worker.sdk._errors import (
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
