"""Async handlers: no blocking sleep on the loop, and a stop ends whatever they await."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from jobwire.domain.handler_evidence import Entry
from jobwire.domain.stages import DEFAULT_PLAN
from jobwire.worker.sdk import JobCancelled, JobContext, Result
from jobwire.worker.sdk._attempt import AttemptState, JobInfo, Snapshot, StopReason
from jobwire.worker.sdk._endings import EndKind, decide
from jobwire.worker.sdk.testing import JobEnvironment


class _Sink:
    def publish(self, snapshot: Snapshot) -> None:
        pass

    def record(self, entry: Entry) -> None:
        pass


def _state() -> AttemptState:
    info = JobInfo(
        job_no="J", job_type="t", tenant="default", payload=b"", attempt=1, last_checkpoint=None, stages=DEFAULT_PLAN,
        tmp_dir=Path("."),
    )  # fmt: skip
    return AttemptState(info, _Sink())


# A handler asleep for 600 s that a stop fails to wake makes these bounds fail, whatever the
# machine's speed; they only keep a broken stop from hanging the test.
STOPPED_WITHIN_S = 30.0


async def _stop_once_started(env: JobEnvironment, switch: str, started: asyncio.Event) -> None:
    # The handler sets `started` and awaits in the same step of the loop: once this runs,
    # the handler is parked in its await.
    await started.wait()
    getattr(env, switch)()


async def test_ctx_sleep_on_the_event_loop_is_a_type_error() -> None:
    state = _state()
    with pytest.raises(TypeError, match="asleep"):
        state.sleep(0.01)


def test_ctx_sleep_in_an_async_handler_fails_the_job_and_says_why() -> None:
    async def handler(ctx: JobContext) -> Result:
        ctx.sleep(5)
        return Result.from_bytes(b"x")

    outcome = JobEnvironment().run(handler)  # refused before it sleeps: the TypeError is the proof
    assert outcome.kind is EndKind.FAIL and outcome.failure is not None
    assert outcome.failure.detail.startswith("TypeError: ctx.sleep() blocks the event loop")


async def test_ctx_sleep_still_works_in_a_thread() -> None:
    state = _state()
    await asyncio.to_thread(state.sleep, 0.01)


@pytest.mark.parametrize(
    ("switch", "kind"),
    [("cancel", EndKind.CONFIRM_CANCEL), ("shutdown", EndKind.RELEASE), ("lose_lease", EndKind.DISCARD)],
)
async def test_asleep_wakes_early_on_a_stop(switch: str, kind: EndKind) -> None:
    env = JobEnvironment()
    started = asyncio.Event()
    woke: list[BaseException] = []

    async def handler(ctx: JobContext) -> Result:
        started.set()
        try:
            await ctx.asleep(600)
        except BaseException as exc:
            woke.append(exc)
            raise
        return Result.from_bytes(b"late")

    stopper = asyncio.create_task(_stop_once_started(env, switch, started))
    outcome = await asyncio.wait_for(env.run_async(handler), STOPPED_WITHIN_S)
    await stopper
    assert outcome.kind is kind
    assert woke  # by the stop signal or by the task's cancellation, never by the timeout


async def test_asleep_wakes_when_another_thread_requests_a_stop() -> None:
    state = _state()
    asleep = asyncio.create_task(state.asleep(600))
    await asyncio.sleep(0)  # one turn of the loop, not a wait: the task runs into its await inside asleep
    assert not asleep.done()
    await asyncio.to_thread(state.request_stop, StopReason.CANCEL)
    with pytest.raises(JobCancelled):
        await asyncio.wait_for(asleep, STOPPED_WITHIN_S)


async def test_asleep_returns_after_its_time_and_is_a_safe_point() -> None:
    state = _state()
    began = time.monotonic()
    await state.asleep(0.05)
    assert time.monotonic() - began >= 0.04  # time passing is what is tested: a lower bound, load-proof
    state.request_stop(StopReason.CANCEL)
    with pytest.raises(JobCancelled):
        await state.asleep(600)


@pytest.mark.parametrize(
    ("switch", "kind"),
    [("cancel", EndKind.CONFIRM_CANCEL), ("shutdown", EndKind.RELEASE), ("lose_lease", EndKind.DISCARD)],
)
async def test_a_stop_cancels_an_async_handler_awaiting_anything(switch: str, kind: EndKind) -> None:
    env = JobEnvironment()
    started = asyncio.Event()
    cleaned = asyncio.Event()

    async def handler(ctx: JobContext) -> Result:
        ctx.checkpoint(b"7")
        started.set()
        try:
            await asyncio.sleep(600)  # no safe point at all
        finally:
            cleaned.set()
        return Result.from_bytes(b"late")

    stopper = asyncio.create_task(_stop_once_started(env, switch, started))
    outcome = await asyncio.wait_for(env.run_async(handler), STOPPED_WITHIN_S)
    await stopper
    assert outcome.kind is kind and outcome.failure is None
    assert cleaned.is_set()
    if kind is EndKind.RELEASE:
        assert outcome.checkpoint == b"7"
    assert env.tmp_dir is not None and not env.tmp_dir.exists()


def test_a_stop_before_an_async_handler_starts_ends_it_for_that_reason() -> None:
    async def handler(ctx: JobContext) -> Result:
        await asyncio.sleep(600)
        return Result.from_bytes(b"late")

    env = JobEnvironment()
    env.cancel()
    assert env.run(handler).kind is EndKind.CONFIRM_CANCEL


def test_a_handler_that_swallows_the_cancellation_still_ends_for_the_stop() -> None:
    started = asyncio.Event()

    async def handler(ctx: JobContext) -> Result:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(600)
        return Result.from_bytes(b"partial")

    async def main() -> EndKind:
        env = JobEnvironment()
        stopper = asyncio.create_task(_stop_once_started(env, "cancel", started))
        outcome = await asyncio.wait_for(env.run_async(handler), STOPPED_WITHIN_S)
        await stopper
        return outcome.kind

    assert asyncio.run(main()) is EndKind.CONFIRM_CANCEL


@pytest.mark.parametrize(
    ("stop", "kind"),
    [
        (StopReason.CANCEL, EndKind.CONFIRM_CANCEL),
        (StopReason.SHUTDOWN, EndKind.RELEASE),
        (StopReason.LOST, EndKind.DISCARD),
        (None, EndKind.ABANDON),
    ],
)
def test_decide_maps_a_cancelled_error_to_the_stop_never_to_fail(stop: StopReason | None, kind: EndKind) -> None:
    ending = decide(stop=stop, delivered=None, result=None, error=asyncio.CancelledError())
    assert ending.kind is kind and ending.failure is None


async def test_cancelling_the_test_itself_propagates() -> None:
    env = JobEnvironment()
    started = asyncio.Event()

    async def handler(ctx: JobContext) -> Result:
        started.set()
        await asyncio.sleep(600)
        return Result.from_bytes(b"late")

    run = asyncio.create_task(env.run_async(handler))
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert env.outcome is not None and env.outcome.kind is EndKind.ABANDON
    assert env.tmp_dir is not None and not env.tmp_dir.exists()
