"""Handlers driven through JobEnvironment: endings, results and temp folders, no server."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobwire.domain.errors import EvidenceLimitReached, InvalidArgument
from jobwire.domain.handler_evidence import MAX_ENTRIES_PER_ATTEMPT
from jobwire.domain.job import ErrorCategory
from jobwire.domain.review import Decision, Review, ReviewRequest
from jobwire.worker.sdk import JobCancelled, JobContext, Result, TimedOut
from jobwire.worker.sdk.testing import EndKind, JobEnvironment


def counting(ctx: JobContext, n: int = 20) -> Result:
    """Writes one line per unit into tmp_dir, checkpointing as it goes."""
    out = ctx.tmp_dir / "out.txt"
    ctx.stage("PROCESSING")
    with out.open("w") as f:
        for i in range(1, n + 1):
            ctx.check()
            f.write(f"line {i}\n")
            ctx.progress(i, total=n)
            ctx.checkpoint(str(i).encode())
    return Result.from_file(out, content_type="text/plain", summary=f"{n} lines")


def test_a_returned_file_is_delivered_with_its_true_hash_and_size(tmp_path: Path) -> None:
    env = JobEnvironment(results_dir=tmp_path / "results")
    outcome = env.run(counting)
    data = b"".join(f"line {i}\n".encode() for i in range(1, 21))
    assert outcome.kind is EndKind.COMPLETE
    assert outcome.artifact is not None
    assert outcome.artifact.sha256 == hashlib.sha256(data).hexdigest()
    assert outcome.artifact.size_bytes == len(data)
    assert outcome.artifact.uri.startswith("file://")
    assert outcome.artifact.uri == outcome.result_path.as_uri()  # type: ignore[union-attr]
    assert outcome.read_result() == data
    assert outcome.artifact.content_type == "text/plain"
    assert outcome.artifact.summary == "20 lines"
    assert outcome.result_path is not None and outcome.result_path.is_relative_to(tmp_path / "results")


def test_bytes_results_are_hashed_too(tmp_path: Path) -> None:
    env = JobEnvironment(results_dir=tmp_path)
    outcome = env.run(lambda ctx: Result.from_bytes(b"hello", content_type="text/plain"))
    assert outcome.artifact is not None
    assert outcome.artifact.sha256 == hashlib.sha256(b"hello").hexdigest()
    assert outcome.artifact.size_bytes == 5


def test_the_temp_folder_is_removed_after_every_ending() -> None:
    for switch in (None, "cancel", "lose_lease", "time_out", "shutdown"):
        env = JobEnvironment()
        if switch is not None:
            getattr(env, switch)()
        env.run(counting)
        assert env.tmp_dir is not None and not env.tmp_dir.exists(), switch


def test_cancel_at_a_safe_point_confirms_and_delivers_nothing(tmp_path: Path) -> None:
    env = JobEnvironment(results_dir=tmp_path / "results")
    env.on_report = lambda r: env.cancel() if r.processed == 5 else None
    outcome = env.run(counting)
    assert outcome.kind is EndKind.CONFIRM_CANCEL
    assert outcome.artifact is None
    assert env.last_report is not None and env.last_report.processed == 5
    assert not env.tmp_dir.exists()  # type: ignore[union-attr]
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*"))


def test_a_lost_lease_stops_the_handler_and_delivers_nothing(tmp_path: Path) -> None:
    env = JobEnvironment(results_dir=tmp_path / "results")
    env.on_report = lambda r: env.lose_lease() if r.processed == 3 else None
    outcome = env.run(counting)
    assert outcome.kind is EndKind.DISCARD
    assert env.last_report is not None and env.last_report.processed == 3
    assert not any((tmp_path / "results").rglob("*")) if (tmp_path / "results").exists() else True


def test_a_lease_lost_while_returning_is_never_completed(tmp_path: Path) -> None:
    env = JobEnvironment(results_dir=tmp_path / "results")

    def handler(ctx: JobContext) -> Result:
        env.lose_lease()  # after the last safe point
        return Result.from_bytes(b"late")

    assert env.run(handler).kind is EndKind.DISCARD


def test_past_the_deadline_a_safe_point_raises_timed_out_and_nothing_is_delivered(tmp_path: Path) -> None:
    deadline = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    env = JobEnvironment(results_dir=tmp_path / "results", deadline=deadline)
    seen: list[object] = []

    def handler(ctx: JobContext) -> Result:
        seen.append(ctx.deadline)
        try:
            return counting(ctx)
        except TimedOut:
            seen.append("TimedOut")
            raise

    env.on_report = lambda r: env.time_out() if r.processed == 4 else None
    outcome = env.run(handler)
    assert outcome.kind is EndKind.TIMED_OUT and outcome.artifact is None and outcome.failure is None
    assert seen == [deadline, "TimedOut"]
    assert env.last_report is not None and env.last_report.processed == 4
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*"))


def test_a_time_out_the_handler_swallows_still_delivers_nothing() -> None:
    env = JobEnvironment()

    def careless(ctx: JobContext) -> Result:
        try:
            ctx.check()
        except Exception:  # noqa: BLE001 - the point of the test: TimedOut is an Exception
            return Result.from_bytes(b"anyway")
        return Result.from_bytes(b"ok")

    env.time_out()
    assert env.run(careless).kind is EndKind.TIMED_OUT


def test_shutdown_releases_with_the_latest_checkpoint() -> None:
    env = JobEnvironment()
    env.on_report = lambda r: env.shutdown() if r.processed == 7 else None
    outcome = env.run(counting)
    assert outcome.kind is EndKind.RELEASE
    assert outcome.checkpoint == b"7"
    assert env.checkpoints[-1] == b"7"


def test_a_cancel_the_handler_swallows_still_ends_cancelled() -> None:
    env = JobEnvironment()

    def stubborn(ctx: JobContext) -> Result:
        with contextlib.suppress(JobCancelled):  # ignores it and returns partial output
            ctx.check()
        return Result.from_bytes(b"partial")

    env.cancel()
    assert env.run(stubborn).kind is EndKind.CONFIRM_CANCEL


def test_except_exception_does_not_swallow_a_cancel() -> None:
    env = JobEnvironment()

    def careless(ctx: JobContext) -> Result:
        try:
            ctx.check()
        except Exception:  # noqa: BLE001 - the point of the test
            return Result.from_bytes(b"swallowed")
        return Result.from_bytes(b"ok")

    env.cancel()
    assert env.run(careless).kind is EndKind.CONFIRM_CANCEL


def test_async_handlers_run_on_the_loop() -> None:
    env = JobEnvironment(payload={"n": 3})

    async def handler(ctx: JobContext) -> Result:
        for i in range(1, ctx.json()["n"] + 1):
            await asyncio.sleep(0)
            ctx.check()
            ctx.progress(i, total=3)
        return Result.from_json({"done": True})

    outcome = env.run(handler)
    assert outcome.kind is EndKind.COMPLETE
    assert outcome.read_result().startswith(b"{")
    assert [r.percent for r in env.reports] == [33, 66, 100]


async def test_cancel_from_another_task_reaches_an_async_handler() -> None:
    env = JobEnvironment()
    started = asyncio.Event()

    async def handler(ctx: JobContext) -> Result:
        started.set()
        while True:
            await asyncio.sleep(0.01)
            ctx.check()

    run = asyncio.create_task(env.run_async(handler))
    await started.wait()
    env.cancel()
    assert (await run).kind is EndKind.CONFIRM_CANCEL


def test_resuming_sees_the_last_checkpoint() -> None:
    env = JobEnvironment(attempt=2, last_checkpoint=b"12")

    def handler(ctx: JobContext) -> Result:
        assert ctx.attempt == 2
        return Result.from_bytes(ctx.last_checkpoint or b"none")

    assert env.run(handler).read_result() == b"12"
    assert JobEnvironment().run(lambda ctx: Result.from_bytes(repr(ctx.last_checkpoint).encode())).read_result() == (
        b"None"
    )


@pytest.mark.parametrize(
    "returned",
    [None, "text", b"bytes", ("a", 1), {"a": {1, 2}}],
)
def test_anything_but_a_result_or_json_is_result_invalid(returned: object) -> None:
    outcome = JobEnvironment().run(lambda ctx: returned)  # type: ignore[arg-type]
    assert outcome.kind is EndKind.FAIL
    assert outcome.failure is not None
    assert outcome.failure.category is ErrorCategory.RESULT_INVALID
    assert not outcome.failure.retryable


def test_a_result_file_outside_the_temp_folder_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "secret.txt"
    elsewhere.write_text("not yours")
    outcome = JobEnvironment().run(lambda ctx: Result.from_file(elsewhere))
    assert outcome.kind is EndKind.FAIL
    assert outcome.failure is not None and outcome.failure.category is ErrorCategory.RESULT_INVALID
    assert "secret" not in outcome.failure.message and str(tmp_path) not in outcome.failure.message


def test_temporary_output_is_not_delivered_until_the_handler_returns(tmp_path: Path) -> None:
    results = tmp_path / "results"
    env = JobEnvironment(results_dir=results)

    def handler(ctx: JobContext) -> Result:
        (ctx.tmp_dir / "big.bin").write_bytes(b"x" * 1000)
        assert not results.exists() or not any(results.rglob("*"))
        return Result.from_file(ctx.tmp_dir / "big.bin")

    outcome = env.run(handler)
    assert outcome.kind is EndKind.COMPLETE
    assert [p.name for p in results.rglob("*") if p.is_file()] == ["big.bin"]


def test_a_delivery_at_once_shows_no_delivering_stage() -> None:
    """The runtime shows DELIVERING only for a delivery that lasts; the harness delivers at once."""
    env = JobEnvironment()
    env.run(counting)
    assert {r.stage for r in env.reports} == {"PROCESSING"}


def test_the_registry_supplies_handler_and_plan() -> None:
    from jobwire.worker.sdk import Handlers

    registry = Handlers()

    @registry.job("thing", stages=["FETCHING", "DONE"])
    def thing(ctx: JobContext) -> Result:
        ctx.stage("DONE")
        return Result.from_bytes(b"x")

    env = JobEnvironment(handlers=registry, job_type="thing")
    assert env.run().kind is EndKind.COMPLETE
    assert [r.stage for r in env.reports] == ["DONE"]


def test_await_review_ends_the_attempt_with_the_request_and_the_checkpoint() -> None:
    def asks(ctx: JobContext) -> Result:
        ctx.stage("PROCESSING")
        try:
            ctx.await_review("alice", ["Payee is new"], checkpoint=b"half")
        except Exception:  # noqa: BLE001 - an ordinary except does not swallow it: it is a stop, not an error
            raise AssertionError("await_review was caught as an error") from None
        raise AssertionError("await_review returned")

    outcome = JobEnvironment().run(asks)
    assert outcome.kind is EndKind.AWAIT_REVIEW
    assert outcome.review == ReviewRequest(assignee="alice", items=("Payee is new",))
    assert outcome.checkpoint == b"half"


def test_a_handler_reads_the_approval_it_resumes_after() -> None:
    approved = Review(decision=Decision.APPROVE, note="ok", resolved_by="acme")
    outcome = JobEnvironment(review=approved).run(lambda ctx: Result.from_json({"note": ctx.review.note}))
    assert outcome.kind is EndKind.COMPLETE and json.loads(outcome.read_result()) == {"note": "ok"}


def test_the_harness_captures_the_evidence_a_handler_records_and_refuses_what_the_server_would() -> None:
    def charging(ctx: JobContext) -> Result:
        ctx.stage("PROCESSING")
        ctx.record("payment_request_id", "pi_3NxQ2f")
        ctx.record("receipt", "r-17")
        with pytest.raises(InvalidArgument, match=r"entries\[0\]\.value: must not contain control characters"):
            ctx.record("note", "two\nlines")
        return Result.from_bytes(b"ok")

    env = JobEnvironment()
    assert env.run(charging).kind is EndKind.COMPLETE
    assert env.evidence == [("payment_request_id", "pi_3NxQ2f"), ("receipt", "r-17")]


def test_an_attempt_records_at_most_200_entries() -> None:
    def chatty(ctx: JobContext) -> Result:
        for i in range(MAX_ENTRIES_PER_ATTEMPT):
            ctx.record("call", str(i))
        with pytest.raises(EvidenceLimitReached, match="at most 200 evidence entries per attempt"):
            ctx.record("call", "one more")
        return Result.from_bytes(b"ok")

    env = JobEnvironment()
    assert env.run(chatty).kind is EndKind.COMPLETE
    assert len(env.evidence) == MAX_ENTRIES_PER_ATTEMPT
