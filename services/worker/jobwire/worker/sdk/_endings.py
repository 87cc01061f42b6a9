"""How an attempt ends, decided once from what the handler did and what it was told.

The worker runtime and the test harness both act on `decide()`, so a handler behaves the
same under `JobEnvironment` as in production.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from jobwire.domain.review import ReviewRequest
from jobwire.worker.sdk._attempt import AttemptState, StopReason
from jobwire.worker.sdk._context import JobContext
from jobwire.worker.sdk._errors import AwaitingReview, Failure, JobInterrupted, failure_of
from jobwire.worker.sdk._handlers import AsyncHandler


class EndKind(enum.StrEnum):
    COMPLETE = "COMPLETE"  # deliver the result, then Complete
    FAIL = "FAIL"  # Fail with a category
    CONFIRM_CANCEL = "CONFIRM_CANCEL"  # temp output removed, then ConfirmCancel
    RELEASE = "RELEASE"  # graceful shutdown: Release with the latest checkpoint
    AWAIT_REVIEW = "AWAIT_REVIEW"  # the handler handed the job to a person: AwaitReview with the latest checkpoint
    DISCARD = "DISCARD"  # the lease is gone: drop everything, tell nobody
    TIMED_OUT = "TIMED_OUT"  # the attempt's time ran out: drop everything, tell nobody (the server ends it)
    ABANDON = "ABANDON"  # stopped without a safe point: leave the lease to expire


@dataclass(frozen=True, kw_only=True)
class Ending:
    kind: EndKind
    result: object = None
    failure: Failure | None = None
    review: ReviewRequest | None = None  # AWAIT_REVIEW: who and what


_BY_STOP = {
    StopReason.LOST: EndKind.DISCARD,
    StopReason.TIMED_OUT: EndKind.TIMED_OUT,
    StopReason.CANCEL: EndKind.CONFIRM_CANCEL,
    StopReason.SHUTDOWN: EndKind.RELEASE,
}


def decide(
    *, stop: StopReason | None, delivered: StopReason | None, result: object, error: BaseException | None
) -> Ending:
    """The ending of an attempt.

    Args:
        stop: The strongest stop requested so far (by the server or the worker).
        delivered: The strongest stop `check()` actually raised in the handler.
        result: What the handler returned (when `error` is None).
        error: What the handler raised, if anything.
    """
    if stop in (StopReason.LOST, StopReason.TIMED_OUT):
        # Someone else may own the job now, or will once the server sees the time ran out:
        # never Complete, Fail or Release it, whatever the handler did after the stop.
        return Ending(kind=_BY_STOP[stop])
    if error is None:
        if delivered is not None and stop is not None:
            # The handler was told to stop but returned anyway: its output may be partial.
            return Ending(kind=_BY_STOP[stop])
        return Ending(kind=EndKind.COMPLETE, result=result)
    if isinstance(error, AwaitingReview) and stop is not StopReason.CANCEL:
        # As graceful as a release, so it outranks a shutdown; a cancel still wins.
        return Ending(kind=EndKind.AWAIT_REVIEW, review=error.request)
    if isinstance(error, JobInterrupted | asyncio.CancelledError) and stop is not None:
        # The strongest reason wins: a cancel that arrived during shutdown is a cancel. An
        # async handler's task is cancelled by a stop: that is the stop, not a failure.
        return Ending(kind=_BY_STOP[stop])
    if isinstance(error, asyncio.CancelledError):
        return Ending(kind=EndKind.ABANDON)
    # Anything else, including a stop signal nobody asked for, is a failure.
    return Ending(kind=EndKind.FAIL, failure=failure_of(error))


def cancelled_from_outside(error: BaseException | None) -> bool:
    """True when the runtime's own task is being cancelled (not just the handler's)."""
    task = asyncio.current_task()
    return isinstance(error, asyncio.CancelledError) and task is not None and task.cancelling() > 0


async def run_async_handler(fn: AsyncHandler, ctx: JobContext, state: AttemptState) -> object:
    """Await an async handler in its own task, which a stop cancels at once.

    A stop then ends the handler at whatever it awaits (``asyncio.sleep(600)`` included),
    not only at its next safe point; `decide()` maps the CancelledError to the stop.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(fn(ctx))

    def stop_task() -> None:
        if task.cancel():
            state.note_delivered()  # the handler was told, as by check()

    remove = state.on_stop(loop, stop_task)
    try:
        return await task
    finally:
        remove()


DELIVERING = "DELIVERING"


def begin_delivery(state: AttemptState) -> None:
    """Enter the plan's DELIVERING stage (if it has one ahead): the runtime does once a
    result's delivery has lasted one report interval, so users see what takes the time.

    The default plan marks DELIVERING not cancellable: a cancel is refused while it shows.
    """
    codes = [s.code for s in state.info.stages]
    if DELIVERING in codes and codes.index(DELIVERING) > codes.index(state.stage):
        state.enter_stage(DELIVERING)
