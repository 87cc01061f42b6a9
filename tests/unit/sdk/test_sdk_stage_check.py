"""A stage the handler enters but its plan lacks: refused before running when the source says
so, at the call otherwise, always with the stages that exist and how to declare them."""

from __future__ import annotations

import asyncio
import functools

import pytest
from sdk_support import FakeWorkerService, make_lease

from jobwire.v1 import job_pb2
from jobwire.worker.sdk import Handlers, JobContext, Result, UndeclaredStage, Worker, WorkerConfig
from jobwire.worker.sdk._stage_check import check_stages, literal_stages
from jobwire.worker.sdk.testing import EndKind, JobEnvironment

DECLARE = "@handlers.job('fetch', stages=[..., 'DOWNLOADING', ...])"
DEFAULT_STAGES = "PREPARING, PROCESSING, VERIFYING, DELIVERING"


def downloads(ctx: JobContext) -> Result:
    ctx.stage("DOWNLOADING")
    return Result.from_bytes(b"x")


def enters(ctx: JobContext) -> Result:
    ctx.stage(ctx.json()["stage"])  # a name known only at run time: judged at the call
    return Result.from_bytes(b"x")


def registry(fn: object, stages: list[str] | None = None) -> Handlers:
    handlers = Handlers()
    handlers.add("fetch", fn, stages=stages)  # type: ignore[arg-type]
    return handlers


def test_a_worker_refuses_to_start_naming_the_handler_the_stage_and_the_fix() -> None:
    with pytest.raises(UndeclaredStage) as refused:
        Worker(WorkerConfig(target="fake:0"), registry(downloads), stub=FakeWorkerService())
    text = str(refused.value)
    assert f"handler {__name__}.downloads (test_sdk_stage_check.py:22) calls ctx.stage('DOWNLOADING')" in text
    assert f"its stages are {DEFAULT_STAGES} (the default plan" in text
    assert DECLARE in text
    assert isinstance(refused.value, ValueError)  # jobwire-worker exits 2 with it, as for any bad setting


def test_the_harness_refuses_the_same_handler_before_it_runs() -> None:
    with pytest.raises(UndeclaredStage, match=r"calls ctx\.stage\('DOWNLOADING'\): job type 'fetch'"):
        JobEnvironment(handlers=registry(downloads), job_type="fetch").run()
    with pytest.raises(UndeclaredStage, match="its stages are FETCHING, DELIVERING \\(as declared\\)"):
        JobEnvironment(job_type="fetch", stages=["FETCHING", "DELIVERING"]).run(downloads)


def test_a_declared_stage_passes() -> None:
    outcome = JobEnvironment(handlers=registry(downloads, ["DOWNLOADING", "DELIVERING"]), job_type="fetch").run()
    assert outcome.kind is EndKind.COMPLETE


def test_a_stage_named_at_run_time_fails_at_the_call_as_a_retryable_bug_with_the_words_in_detail() -> None:
    Worker(WorkerConfig(target="fake:0"), registry(enters), stub=FakeWorkerService())  # nothing to judge at start
    outcome = JobEnvironment(handlers=registry(enters), job_type="fetch", payload={"stage": "DOWNLOADING"}).run()
    assert outcome.kind is EndKind.FAIL and outcome.failure is not None
    assert (outcome.failure.category.value, outcome.failure.retryable) == ("PROCESSING_ERROR", True)
    head = outcome.failure.detail.partition("\n")[0]
    assert head.startswith("UndeclaredStage: ctx.stage('DOWNLOADING'): job type 'fetch' has no stage")
    assert DEFAULT_STAGES in head and DECLARE in head
    assert "DOWNLOADING" not in outcome.failure.message  # users read the plain sentence only


async def test_the_worker_reports_it_as_a_retryable_failure_and_logs_the_words(
    config: WorkerConfig, fake: FakeWorkerService, caplog: pytest.LogCaptureFixture
) -> None:
    fake.pending.append(make_lease("PT-1", "fetch", b'{"stage": "DOWNLOADING"}'))
    worker = Worker(config, registry(enters), stub=fake)
    task = asyncio.create_task(worker.run())
    try:
        (failed,) = await fake.wait_for("Fail")
    finally:
        worker.shutdown(immediate=True)
        await asyncio.wait_for(task, 5)
    assert (failed.category, failed.retryable) == (job_pb2.JobError.PROCESSING_ERROR, True)
    assert failed.detail.startswith("UndeclaredStage: ctx.stage('DOWNLOADING')") and DECLARE in failed.detail
    assert "failed PROCESSING_ERROR (retryable)" in caplog.text
    assert f"job type 'fetch' has no stage 'DOWNLOADING'; its stages are {DEFAULT_STAGES}" in caplog.text


# -------------------------------------------------------------- what the check judges


async def async_downloads(ctx: JobContext) -> Result:
    await asyncio.sleep(0)
    ctx.stage(code="DOWNLOADING")
    return Result.from_bytes(b"x")


class Fetcher:
    def stage(self, code: str) -> None:
        """Not a JobContext: a handler method's `self` is never judged."""

    def handle(self, ctx: JobContext) -> Result:
        self.stage("ANYTHING")
        ctx.stage("DOWNLOADING")
        return Result.from_bytes(b"x")

    def __call__(self, ctx: JobContext) -> Result:
        ctx.stage("DOWNLOADING")
        return Result.from_bytes(b"x")


def test_literals_are_found_in_async_handlers_keyword_calls_and_methods() -> None:
    assert [code for code, _ in literal_stages(async_downloads)] == ["DOWNLOADING"]
    assert [code for code, _ in literal_stages(Fetcher().handle)] == ["DOWNLOADING"]
    assert [where for _, where in literal_stages(downloads)] == ["test_sdk_stage_check.py:22"]


def rebinds(ctx: JobContext) -> Result:
    ctx = wrapped(ctx)  # whatever `ctx` is now, the check cannot know
    ctx.stage("DOWNLOADING")
    return Result.from_bytes(b"x")


def wrapped(ctx: JobContext) -> JobContext:
    return ctx


def nested(ctx: JobContext) -> Result:
    def inner(ctx: object) -> None:
        getattr(ctx, "stage")("X")  # noqa: B009 - not a JobContext call

    class Other:
        def stage(self, code: str) -> None: ...

    def with_own(ctx: Other) -> None:
        ctx.stage("SOMETHING_ELSE")  # this `ctx` is not the handler's

    with_own(Other())
    inner(ctx)
    return Result.from_bytes(b"x")


def dynamic(ctx: JobContext) -> Result:
    plan = [s.code for s in ctx.stages]
    ctx.stage(plan[-1])
    ctx.stage(f"{'PROCESS'}ING")
    code = "DOWNLOADING"
    ctx.stage(code)
    return Result.from_bytes(b"x")


@pytest.mark.parametrize(
    "fn",
    [
        rebinds,
        nested,
        dynamic,
        lambda ctx: ctx.stage("DOWNLOADING"),
        functools.partial(downloads),
        Fetcher(),  # a callable object
        print,  # no Python source at all
    ],
    ids=["rebinds", "nested", "dynamic", "lambda", "partial", "callable", "builtin"],
)
def test_what_the_source_does_not_say_for_sure_is_never_refused(fn: object) -> None:
    check_stages(registry(fn))  # no UndeclaredStage


def test_the_example_handlers_pass() -> None:
    from examples import handlers

    check_stages(handlers)
