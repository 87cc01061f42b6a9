"""The Worker against an in-memory WorkerService: claims, endings on the wire, shutdown."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from sdk_support import FakeWorkerService, make_lease, rpc_error, unavailable, worker_running
from served import eventually

from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk import DependencyFailed, Handlers, JobContext, Result, Worker, WorkerConfig, _finisher
from jobwire.worker.sdk._reporter import REPORT_INTERVAL_S
from jobwire.worker.sdk._result import ResultStore

registry = Handlers()
release_stuck = threading.Event()
stuck_started = threading.Event()


@registry.job("write", stages=["PROCESSING", "DELIVERING"])
def write(ctx: JobContext) -> Result:
    n = ctx.json().get("n", 3)
    out = ctx.tmp_dir / "out.txt"
    with out.open("w") as f:
        for i in range(1, n + 1):
            ctx.check()
            f.write(f"{i}\n")
            ctx.progress(i, total=n)
            ctx.checkpoint(str(i).encode())
            ctx.sleep(ctx.json().get("sleep", 0))
    return Result.from_file(out, content_type="text/plain")


@registry.job("endless", stages=["PROCESSING", "DELIVERING"])
def endless(ctx: JobContext) -> Result:
    """Works until it is stopped (cancel, lost lease, shutdown): a job a test can act on while
    it runs, however slow the machine. Each unit is a safe point with a checkpoint."""
    i = 0
    while True:
        i += 1
        ctx.progress(i)
        ctx.checkpoint(str(i).encode())
        ctx.sleep(0.01)  # the pace of its work, and a safe point that wakes at once to stop


@registry.job("fails")
def fails(ctx: JobContext) -> Result:
    kind = ctx.json()["kind"]
    if kind == "dependency":
        raise DependencyFailed("the warehouse API is down")
    raise ValueError(f"cannot parse {ctx.tmp_dir}/input.csv")


@registry.job("stuck")
def stuck(ctx: JobContext) -> Result:
    stuck_started.set()
    release_stuck.wait(30)  # never reaches a safe point
    return Result.from_bytes(b"late")


@registry.job("napping")
async def napping(ctx: JobContext) -> Result:
    ctx.progress(1)
    await asyncio.sleep(600)  # no safe point: a stop must cancel the task
    return Result.from_bytes(b"late")


@registry.job("deadline")
def deadline(ctx: JobContext) -> Result:
    return Result.from_bytes(str(ctx.deadline.isoformat() if ctx.deadline else None).encode())


@registry.job("resume")
async def resume(ctx: JobContext) -> Result:
    return Result.from_bytes(repr(ctx.last_checkpoint).encode())


def running(
    config: WorkerConfig, fake: FakeWorkerService
) -> AbstractAsyncContextManager[tuple[Worker, asyncio.Task[int]]]:
    return worker_running(Worker(config, registry, stub=fake))


def _no_job_running(worker: Worker) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return worker.running == 0

    return probe


def tmp_left(config: WorkerConfig) -> list[Path]:
    assert config.tmp_root is not None
    return list(config.tmp_root.iterdir())


def results(config: WorkerConfig) -> list[Path]:
    return [p for p in config.results_dir.rglob("*") if p.is_file()] if config.results_dir.exists() else []


async def test_a_returned_result_is_delivered_then_completed(
    config: WorkerConfig, fake: FakeWorkerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # However slow this machine's fsync, the delivery ends within the (long) interval here.
    monkeypatch.setattr(_finisher, "REPORT_INTERVAL_S", 60.0)
    fake.pending.append(make_lease("PT-1", "write", b'{"n": 3}', stages=["PROCESSING", "DELIVERING"]))
    async with running(config, fake) as (worker, task):
        (complete,) = await fake.wait_for("Complete")
        worker.shutdown()
        assert await task == 0
    artifact = complete.result
    (path,) = results(config)
    assert artifact.uri == path.as_uri()
    assert artifact.sha256 == hashlib.sha256(b"1\n2\n3\n").hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert artifact.size_bytes == 6
    assert complete.worker_token == "tok-PT-1"
    assert tmp_left(config) == []
    # Delivered within one report interval: nobody could have seen DELIVERING, so it is not sent.
    assert "DELIVERING" not in {r.stage for r in fake.of("ReportStage")}


async def test_a_delivery_that_lasts_shows_the_delivering_stage_before_complete(
    config: WorkerConfig, fake: FakeWorkerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    deliver = ResultStore.deliver

    def slow(self: ResultStore, *args: Any, **kwargs: Any) -> Any:
        time.sleep(REPORT_INTERVAL_S * 3)  # a large file to a slow disk
        return deliver(self, *args, **kwargs)

    monkeypatch.setattr(ResultStore, "deliver", slow)
    fake.pending.append(make_lease("PT-1", "write", b'{"n": 3}', stages=["PROCESSING", "DELIVERING"]))
    async with running(config, fake):
        await fake.wait_for("Complete")
    order = [(c.method, getattr(c.request, "stage", "")) for c in fake.calls if c.method in ("ReportStage", "Complete")]
    assert order[-2:] == [("ReportStage", "DELIVERING"), ("Complete", "")]


async def test_failures_carry_category_and_keep_the_trace_internal(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    fake.pending += [
        make_lease("PT-1", "fails", b'{"kind": "dependency"}'),
        make_lease("PT-2", "fails", b'{"kind": "bug"}'),
    ]
    async with running(config, fake):
        await fake.wait_for("Fail", 2)
    dep, bug = fake.of("Fail", "PT-1")[0], fake.of("Fail", "PT-2")[0]
    assert (dep.category, dep.retryable, dep.message) == (
        job_pb2.JobError.DEPENDENCY_FAILED,
        True,
        "the warehouse API is down",
    )
    assert (bug.category, bug.retryable) == (job_pb2.JobError.PROCESSING_ERROR, True)  # a bug: retried
    assert bug.message == "The job failed while processing."  # the exception's text is not for users
    assert bug.detail.startswith("ValueError: cannot parse ")
    assert "Traceback" in bug.detail and "input.csv" in bug.detail
    assert fake.of("Complete") == []


@pytest.mark.parametrize("via", ["heartbeat", "report"])
async def test_cancel_removes_temp_output_then_confirms(
    config: WorkerConfig, fake: FakeWorkerService, via: str
) -> None:
    fake.pending.append(make_lease("PT-1", "endless", heartbeat_s=0.05))
    async with running(config, fake):
        await fake.wait_for("ReportStage")
        if via == "heartbeat":
            fake.lease_states["PT-1"] = worker_pb2.LeaseState.CANCEL_REQUESTED
        else:
            fake.cancel_in_reports.add("PT-1")
        await fake.wait_for("ConfirmCancel")
        assert tmp_left(config) == []
    assert fake.ended == {"PT-1": "ConfirmCancel"}
    assert results(config) == []


@pytest.mark.parametrize("via", ["heartbeat", "report"])
async def test_a_lost_lease_stops_the_job_and_tells_nobody(
    config: WorkerConfig, fake: FakeWorkerService, via: str
) -> None:
    fake.pending.append(make_lease("PT-1", "endless", heartbeat_s=0.05))
    async with running(config, fake) as (worker, _):
        await fake.wait_for("ReportStage")
        fake.lease_states["PT-1"] = worker_pb2.LeaseState.LOST  # heartbeat says LOST, reports get WORKER_LEASE_LOST
        if via == "report":
            fake.fail_next("Heartbeat", *[unavailable()] * 100)
        await eventually(_no_job_running(worker), what="the job stopped after its lease was lost")
    ends = [c.method for c in fake.calls if c.method in ("Complete", "Fail", "ConfirmCancel", "Release")]
    assert ends == []
    assert tmp_left(config) == [] and results(config) == []


async def stopped(worker: Worker) -> None:
    """Wait (bounded) until the worker runs no job any more."""
    for _ in range(500):
        if worker.running == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the job never stopped")


def endings_sent(fake: FakeWorkerService) -> list[str]:
    return [c.method for c in fake.calls if c.method in ("Complete", "Fail", "ConfirmCancel", "Release")]


@pytest.mark.parametrize("job_type", ["write", "napping"])
async def test_past_its_deadline_a_handler_is_stopped_and_nobody_is_told(
    config: WorkerConfig, fake: FakeWorkerService, caplog: pytest.LogCaptureFixture, job_type: str
) -> None:
    # A sync handler stops at its next safe point, an async one at its next await.
    fake.pending.append(make_lease("PT-1", job_type, b'{"n": 100000, "sleep": 0.01}', deadline_in=0.3))
    async with running(config, fake) as (worker, _):
        await fake.wait_for("ReportStage")
        await stopped(worker)
    assert endings_sent(fake) == []  # the server ends the attempt by its own clock
    assert tmp_left(config) == [] and results(config) == []
    assert "PT-1 attempt 1: timed out" in caplog.text


@pytest.mark.parametrize("via", ["heartbeat", "report"])
async def test_a_lease_the_server_timed_out_stops_the_job_and_tells_nobody(
    config: WorkerConfig, fake: FakeWorkerService, caplog: pytest.LogCaptureFixture, via: str
) -> None:
    fake.pending.append(make_lease("PT-1", "write", b'{"n": 1000, "sleep": 0.01}', heartbeat_s=0.05))
    async with running(config, fake) as (worker, _):
        await fake.wait_for("ReportStage")
        fake.lease_states["PT-1"] = worker_pb2.LeaseState.TIMED_OUT  # reports get WORKER_LEASE_LOST, TIMED_OUT
        if via == "report":
            fake.fail_next("Heartbeat", *[unavailable()] * 100)
        await stopped(worker)
    assert endings_sent(fake) == []
    assert tmp_left(config) == [] and results(config) == []
    assert "PT-1 attempt 1: timed out" in caplog.text


async def test_a_handler_sees_its_attempts_deadline(config: WorkerConfig, fake: FakeWorkerService) -> None:
    fake.pending += [make_lease("PT-1", "deadline", deadline_in=60), make_lease("PT-2", "deadline")]
    async with running(config, fake):
        await fake.wait_for("Complete", 2)
    seen = {c.job_no: Path(c.result.uri.removeprefix("file://")).read_text() for c in fake.of("Complete")}
    assert seen["PT-1"].endswith("+00:00") and seen["PT-2"] == "None"


async def test_shutdown_releases_with_the_latest_checkpoint(config: WorkerConfig, fake: FakeWorkerService) -> None:
    fake.pending.append(make_lease("PT-1", "endless"))
    async with running(config, fake) as (worker, task):
        await fake.wait_for("ReportStage", 2)
        worker.shutdown()
        assert await task == 0
    (release,) = fake.of("Release")
    assert release.HasField("checkpoint")
    last_cp = [r.checkpoint for r in fake.of("ReportStage") if r.HasField("checkpoint")][-1]
    assert int(release.checkpoint) >= int(last_cp)
    assert fake.of("Complete") == []
    assert tmp_left(config) == []


async def test_a_lease_granted_as_shutdown_begins_is_released_unrun(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    fake.claim_gate = asyncio.Event()
    async with running(config, fake) as (worker, task):
        await fake.wait_for("Claim")
        worker.shutdown()
        fake.pending.append(make_lease("PT-9", "write"))
        fake.claim_gate.set()
        assert await task == 0
    assert fake.ended == {"PT-9": "Release"}
    assert fake.of("ReportStage") == []


async def test_a_handler_that_never_reaches_a_safe_point_is_abandoned(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    config = replace(config, grace_period=0.3)
    fake.pending.append(make_lease("PT-1", "stuck"))
    release_stuck.clear()
    stuck_started.clear()
    try:
        async with running(config, fake) as (worker, task):
            assert await asyncio.to_thread(stuck_started.wait, 10), "the handler never started"
            worker.shutdown()
            assert await asyncio.wait_for(task, 3) == 1
            assert worker.abandoned_threads == 1
    finally:
        release_stuck.set()
    assert fake.ended == {}  # the lease expires; the job's policy decides


async def test_unavailable_endings_are_retried(config: WorkerConfig, fake: FakeWorkerService) -> None:
    fake.fail_next("Claim", unavailable(), unavailable())
    fake.fail_next("Complete", unavailable(), unavailable())
    fake.pending.append(make_lease("PT-1", "write", b'{"n": 2}'))
    async with running(config, fake):
        await fake.wait_for("Complete", 3, timeout=10)
    first, *_, last = fake.of("Complete")
    assert first == last
    assert fake.ended == {"PT-1": "Complete"}


async def test_claims_respect_concurrency_and_describe_the_handlers(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    fake.pending += [make_lease(f"PT-{i}", "write", b'{"n": 20, "sleep": 0.01}') for i in range(3)]
    async with running(config, fake):
        await fake.wait_for("Complete", 3, timeout=10)
    claims = fake.of("Claim")
    assert claims[0].max_jobs == 2 and claims[0].worker_id == "w-test" and list(claims[0].queues) == ["default"]
    assert all(c.max_jobs <= 2 for c in claims)
    assert claims[0].lease_duration.ToTimedelta().total_seconds() == 3.0
    specs = {s.name: [st.code for st in s.stages] for s in claims[0].job_types}
    assert specs["write"] == ["PROCESSING", "DELIVERING"]
    assert specs["fails"] == ["PREPARING", "PROCESSING", "VERIFYING", "DELIVERING"]


async def test_heartbeats_batch_all_running_jobs(config: WorkerConfig, fake: FakeWorkerService) -> None:
    fake.pending += [make_lease(f"PT-{i}", "endless", heartbeat_s=0.05) for i in range(2)]
    async with running(config, fake) as (worker, task):

        async def both_in_one_heartbeat() -> bool:
            return any(len(b.leases) == 2 for b in fake.of("Heartbeat"))

        await eventually(both_in_one_heartbeat, what="one Heartbeat for both running jobs")
        worker.shutdown()
        assert await asyncio.wait_for(task, 5) == 0
    assert max(len(b.leases) for b in fake.of("Heartbeat")) == 2
    assert fake.ended == {"PT-0": "Release", "PT-1": "Release"}


async def test_a_fleet_worker_runs_two_tenants_jobs_of_one_number_side_by_side(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    """Numbers are per tenant: a shared fleet's worker may hold acme's and globex's PT-1 at once."""
    fake.pending += [make_lease("PT-1", "endless", heartbeat_s=0.05, tenant=t) for t in ("acme", "globex")]
    tokens = ["tok-acme-PT-1", "tok-globex-PT-1"]
    async with running(config, fake) as (worker, task):

        async def both_in_one_heartbeat() -> bool:
            return any(sorted(ref.worker_token for ref in b.leases) == tokens for b in fake.of("Heartbeat"))

        await eventually(both_in_one_heartbeat, what="one Heartbeat for both leases of PT-1")
        assert worker.running == 2
        reported = {r.worker_token for r in fake.of("ReportStage")}
        worker.shutdown()
        assert await asyncio.wait_for(task, 5) == 0
    assert reported <= set(tokens)
    assert sorted(r.worker_token for r in fake.of("Release")) == tokens


async def test_two_tenants_results_of_one_number_are_delivered_apart(
    config: WorkerConfig, fake: FakeWorkerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_finisher, "REPORT_INTERVAL_S", 60.0)
    stages = ["PROCESSING", "DELIVERING"]
    fake.pending += [
        make_lease("PT-1", "write", f'{{"n": {n}}}'.encode(), stages=stages, tenant=t)
        for t, n in (("acme", 2), ("globex", 3))
    ]
    async with running(config, fake) as (worker, task):
        completes = await fake.wait_for("Complete", 2)
        worker.shutdown()
        assert await task == 0
    uris = {c.worker_token: c.result.uri for c in completes}
    delivered = {p.relative_to(config.results_dir).as_posix(): p.read_bytes() for p in results(config)}
    assert delivered == {"acme/PT-1/attempt-1/out.txt": b"1\n2\n", "globex/PT-1/attempt-1/out.txt": b"1\n2\n3\n"}
    assert uris == {
        f"tok-{t}-PT-1": (config.results_dir / t / "PT-1" / "attempt-1" / "out.txt").as_uri()
        for t in ("acme", "globex")
    }


async def test_the_checkpoint_of_the_last_attempt_reaches_the_handler(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    fake.pending += [
        make_lease("PT-1", "resume", attempt=2, checkpoint=b"7"),
        make_lease("PT-2", "resume", attempt=2, checkpoint=b""),
        make_lease("PT-3", "resume"),
    ]
    async with running(config, fake):
        await fake.wait_for("Complete", 3)
    by_job = {c.job_no: Path(c.result.uri.removeprefix("file://")).read_bytes() for c in fake.of("Complete")}
    assert by_job == {"PT-1": b"b'7'", "PT-2": b"b''", "PT-3": b"None"}


def test_config_is_validated(tmp_path: Path) -> None:
    from jobwire.domain.errors import InvalidArgument

    with pytest.raises(ValueError):
        WorkerConfig(target="x:1", concurrency=0)
    with pytest.raises(InvalidArgument):
        WorkerConfig(target="x:1", lease_duration=0.5)
    with pytest.raises(InvalidArgument):
        WorkerConfig(target="x:1", queues=("bad queue",))
    assert WorkerConfig(target="x:1", queues=["a", "b"]).queues == ("a", "b")  # type: ignore[arg-type]
    assert WorkerConfig(target="x:1").heartbeat_interval == 10.0


@pytest.mark.parametrize(
    ("job_type", "payload", "ending"),
    [
        ("write", b'{"n": 2}', "Complete"),
        ("fails", b'{"kind": "bug"}', "Fail"),
        ("endless", b"", "Release"),
    ],
)
async def test_temp_output_is_gone_before_the_ending_is_sent(
    config: WorkerConfig, fake: FakeWorkerService, job_type: str, payload: bytes, ending: str
) -> None:
    seen: dict[str, list[Path]] = {}
    fake.on_end = lambda method, request: seen.setdefault(method, tmp_left(config))
    fake.pending.append(make_lease("PT-1", job_type, payload))
    async with running(config, fake) as (worker, _):
        if ending == "Release":
            await fake.wait_for("ReportStage")
            worker.shutdown()
        await fake.wait_for(ending)
    assert seen == {ending: []}


async def test_handlers_keep_running_while_the_server_is_unreachable(
    config: WorkerConfig, fake: FakeWorkerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_finisher, "REPORT_INTERVAL_S", 60.0)  # the last report is the handler's, not DELIVERING
    fake.fail_next("ReportStage", *[unavailable()] * 4)
    fake.fail_next("Heartbeat", *[unavailable()] * 4)
    fake.pending.append(make_lease("PT-1", "write", b'{"n": 60, "sleep": 0.01}', heartbeat_s=0.05))
    async with running(config, fake):
        await fake.wait_for("Complete", timeout=10)
    reports = fake.of("ReportStage")
    assert len(reports) > 4  # the failed ones, then the recovered ones
    assert reports[-1].processed_units == 60  # the latest state got through once the server was back
    assert fake.ended == {"PT-1": "Complete"}


async def test_results_url_names_no_worker_path_on_the_wire(config: WorkerConfig, fake: FakeWorkerService) -> None:
    config = replace(config, results_url="https://files.example/jobwire/")
    fake.pending.append(make_lease("PT-1", "write", b'{"n": 2}', stages=["PROCESSING", "DELIVERING"]))
    async with running(config, fake):
        (complete,) = await fake.wait_for("Complete")
    assert complete.result.uri == "https://files.example/jobwire/PT-1/attempt-1/out.txt"
    (path,) = results(config)
    assert path.read_bytes() == b"1\n2\n"


@pytest.mark.parametrize(("state", "ending"), [("cancel", "ConfirmCancel"), ("shutdown", "Release")])
async def test_a_stop_cancels_an_async_handlers_await(
    config: WorkerConfig, fake: FakeWorkerService, state: str, ending: str
) -> None:
    fake.pending.append(make_lease("PT-1", "napping", heartbeat_s=0.05))
    async with running(config, fake) as (worker, task):
        await fake.wait_for("ReportStage")
        # The handler awaits for 600 s: an ending within these bounds means the stop cancelled it.
        if state == "cancel":
            fake.lease_states["PT-1"] = worker_pb2.LeaseState.CANCEL_REQUESTED
            await fake.wait_for(ending)
        else:
            worker.shutdown()
            assert await asyncio.wait_for(task, 10) == 0  # ended cleanly, nothing abandoned
        assert tmp_left(config) == []
    assert fake.ended == {"PT-1": ending}
    assert fake.of("Fail") == []


async def test_claim_sends_each_handlers_stage_plan(config: WorkerConfig, fake: FakeWorkerService) -> None:
    async with running(config, fake):
        (claim, *_) = await fake.wait_for("Claim")
    plans = {spec.name: [(s.code, s.cancellable, dict(s.labels)) for s in spec.stages] for spec in claim.job_types}
    assert [code for code, _, _ in plans["write"]] == ["PROCESSING", "DELIVERING"]
    assert plans["write"] == [(s.code, s.cancellable, dict(s.labels)) for s in registry["write"].stages]


def test_stage_plans_convert_both_ways_with_one_helper() -> None:
    from jobwire.codec import stages_from_proto, stages_to_proto
    from jobwire.domain.stages import DEFAULT_PLAN

    plan = (*registry["write"].stages, *DEFAULT_PLAN[:1])
    assert stages_from_proto(stages_to_proto(plan)) == plan
    assert stages_from_proto([]) == ()


async def test_the_log_says_how_each_job_really_ended(
    config: WorkerConfig, fake: FakeWorkerService, caplog: pytest.LogCaptureFixture
) -> None:
    """Security review, finding 13: the log said COMPLETE for a job whose result the server
    refused (it failed RESULT_INVALID), and FAIL without the reason."""
    fake.fail_next("Complete", rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "result.uri: bad"))
    fake.pending += [make_lease("PT-1", "write", b'{"n": 1}'), make_lease("PT-2", "fails", b'{"kind": "dependency"}')]
    with caplog.at_level(logging.INFO, logger="jobwire.worker"):
        async with running(config, fake):
            await fake.wait_for("Fail", 2)
    endings = {
        r.getMessage().split(":", 1)[0]: r.getMessage() for r in caplog.records if " attempt 1: " in r.getMessage()
    }
    assert "failed RESULT_INVALID (not retryable)" in endings["job PT-1 attempt 1"]
    assert "READY" not in endings["job PT-1 attempt 1"]
    assert endings["job PT-2 attempt 1"].endswith("failed DEPENDENCY_FAILED (retryable): the warehouse API is down")


async def test_missing_tmp_and_results_folders_are_made_before_the_first_claim(
    config: WorkerConfig, fake: FakeWorkerService, tmp_path: Path
) -> None:
    """Found by the soak: --tmp-dir naming a folder that did not exist failed every job leased."""
    config = replace(config, tmp_root=tmp_path / "new" / "tmp", results_dir=tmp_path / "new" / "results")
    fake.pending.append(make_lease("PT-1", "write", b'{"n": 1}'))
    async with running(config, fake) as (worker, task):
        (complete,) = await fake.wait_for("Complete")
        worker.shutdown()
        assert await task == 0
    assert complete.result.size_bytes > 0 and config.tmp_root.is_dir()
