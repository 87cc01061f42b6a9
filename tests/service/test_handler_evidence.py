"""Evidence a handler leaves (WorkerService.RecordEvidence), on SQLite and MariaDB: each entry an
event of its own with the attempt, stage and time, listed by ListEvents and never shown to a
user; a token that no longer holds the lease keeps nothing; every bound refuses in words."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from served import Served
from service_support import LEASE_LOST, claim, events, get, rpc_error, rpc_failure, run_worker_until, running, submit

from jobwire.client.status import error_info, field_violations
from jobwire.domain.handler_evidence import MAX_ENTRIES_PER_ATTEMPT, MAX_ENTRIES_PER_CALL, MAX_VALUE_CHARS
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk import Handlers, JobContext, Result, Worker, WorkerConfig

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(60)]  # a per-attempt bound held under racing calls

PAYMENT = ("payment_request_id", "pi_3NxQ2fLkdIwHu7ix0a1b2c3d")
OCR = ("ocr.request", "req-7781 page 3")


def record(
    lease: worker_pb2.Lease, *entries: tuple[str, str], token: str | None = None
) -> worker_pb2.RecordEvidenceRequest:
    return worker_pb2.RecordEvidenceRequest(
        job_no=lease.job_no,
        worker_token=lease.worker_token if token is None else token,
        entries=[worker_pb2.EvidenceEntry(key=k, value=v) for k, v in entries],
    )


async def recorded(served: Served, job_no: str) -> list[tuple[str, str, int, str]]:
    """(key, value, attempt, stage) of each HANDLER_EVIDENCE event, in order."""
    return [(e.key, e.detail, e.attempt, e.stage) for e in await events(served, job_no) if e.kind == "HANDLER_EVIDENCE"]


handlers = Handlers()


@handlers.job("charge", stages=["PREPARING", "CHARGING", "DELIVERING"])
def charge(ctx: JobContext) -> Result:
    ctx.stage("CHARGING")
    ctx.record(*PAYMENT)
    ctx.record(*OCR)
    return Result.from_bytes(b"charged")


async def test_a_handlers_two_entries_reach_the_trail_before_its_job_ends(served: Served, tmp_path: Path) -> None:
    job = await submit(served, "charge")
    config = WorkerConfig(
        target=served.target, worker_id="w-evidence", concurrency=1, lease_duration=30, claim_wait=0.2,
        grace_period=2, tmp_root=tmp_path / "tmp",
    )  # fmt: skip
    ready = await run_worker_until(served, Worker(config, handlers), job.job_no, job_pb2.Job.READY)
    assert await recorded(served, job.job_no) == [(*PAYMENT, 1, "CHARGING"), (*OCR, 1, "CHARGING")]
    kinds = [e.kind for e in await events(served, job.job_no)]
    assert kinds.index("HANDLER_EVIDENCE") < kinds.index("COMPLETED")  # sent before the ending
    assert PAYMENT[1].encode() not in ready.SerializeToString()


async def test_two_entries_are_listed_with_their_attempt_and_stage_and_a_user_sees_neither(served: Served) -> None:
    job, lease = await running(served)
    await served.workers.ReportStage(
        worker_pb2.ReportStageRequest(job_no=job.job_no, worker_token=lease.worker_token, stage="PROCESSING")
    )
    before = await get(served, job.job_no)
    reply = await served.workers.RecordEvidence(record(lease, PAYMENT, OCR))
    assert reply.attempt_entries == 2
    assert await recorded(served, job.job_no) == [(*PAYMENT, 1, "PROCESSING"), (*OCR, 1, "PROCESSING")]
    trail = await events(served, job.job_no)
    entry = trail[-1]
    assert entry.created_at.seconds > 0 and entry.worker_id == "w1" and entry.to_status == job_pb2.Job.RUNNING

    after = await get(served, job.job_no)
    assert after.version == before.version  # no version: nothing a watcher is sent
    shown = after.SerializeToString()
    assert PAYMENT[1].encode() not in shown and b"payment_request_id" not in shown
    listed = await served.jobs.ListJobs(job_pb2.ListJobsRequest())
    assert PAYMENT[1].encode() not in listed.SerializeToString()


async def test_a_stale_tokens_entries_are_refused_and_leave_nothing(served: Served) -> None:
    job, first = await running(served, retry_policy=job_pb2.RetryPolicy(max_attempts=3))
    await served.workers.Fail(
        worker_pb2.FailRequest(job_no=job.job_no, worker_token=first.worker_token, message="flaky", retryable=True)
    )
    served.clock.advance(timedelta(minutes=2))  # past the retry's backoff
    (second,) = await claim(served)
    assert second.attempt == 2
    assert await rpc_error(served.workers.RecordEvidence(record(first, PAYMENT))) == LEASE_LOST
    forged = await rpc_error(served.workers.RecordEvidence(record(first, PAYMENT, token="1.AAAAAAAAAAAAAAAAAAAAAAAA")))
    assert forged == LEASE_LOST
    assert await recorded(served, job.job_no) == []
    await served.workers.RecordEvidence(record(second, OCR))
    assert await recorded(served, job.job_no) == [(*OCR, 2, second.stages[0].code)]


@pytest.mark.parametrize(
    ("entries", "field", "words"),
    [
        pytest.param([], "entries", f"1 to {MAX_ENTRIES_PER_CALL} entries per call", id="none"),
        pytest.param([OCR] * (MAX_ENTRIES_PER_CALL + 1), "entries", "entries per call", id="one too many"),
        pytest.param(
            [OCR, ("k", "v" * (MAX_VALUE_CHARS + 1))], "entries[1].value", "at most 1000 characters", id="a long value"
        ),
        pytest.param([("k", "line\nbreak")], "entries[0].value", "control characters", id="a control character"),
        pytest.param([("bad key", "v")], "entries[0].key", "must match", id="a key that is no name"),
        pytest.param([("k" * 65, "v")], "entries[0].key", "must match", id="a key too long"),
    ],
)
async def test_a_call_past_a_bound_is_refused_naming_it(
    served: Served, entries: list[tuple[str, str]], field: str, words: str
) -> None:
    job, lease = await running(served)
    refused = await rpc_failure(served.workers.RecordEvidence(record(lease, *entries)))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [name for name, _ in field_violations(refused)] == [field]
    assert words in (refused.details() or "")
    assert await recorded(served, job.job_no) == []


async def test_an_attempt_past_its_bound_is_refused_whole_and_the_next_attempt_starts_again(served: Served) -> None:
    job, lease = await running(served, retry_policy=job_pb2.RetryPolicy(max_attempts=2))
    calls = MAX_ENTRIES_PER_ATTEMPT // MAX_ENTRIES_PER_CALL
    for _ in range(calls):
        await served.workers.RecordEvidence(record(lease, *[OCR] * MAX_ENTRIES_PER_CALL))
    refused = await rpc_failure(served.workers.RecordEvidence(record(lease, PAYMENT)))
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    info = error_info(refused)
    assert info is not None and info.reason == "EVIDENCE_LIMIT"
    assert "at most 200 evidence entries per attempt" in (refused.details() or "")
    assert len(await recorded(served, job.job_no)) == MAX_ENTRIES_PER_ATTEMPT  # the refused call kept nothing

    await served.workers.Fail(
        worker_pb2.FailRequest(job_no=job.job_no, worker_token=lease.worker_token, message="again", retryable=True)
    )
    served.clock.advance(timedelta(minutes=2))
    (second,) = await claim(served)
    assert (await served.workers.RecordEvidence(record(second, PAYMENT))).attempt_entries == 1


async def test_two_calls_racing_for_the_last_places_do_not_both_pass(served: Served) -> None:
    job, lease = await running(served)
    for _ in range(3):
        await served.workers.RecordEvidence(record(lease, *[OCR] * MAX_ENTRIES_PER_CALL))
    left = MAX_ENTRIES_PER_ATTEMPT - 3 * MAX_ENTRIES_PER_CALL
    racing = [served.workers.RecordEvidence(record(lease, *[PAYMENT] * left)) for _ in range(2)]
    results = await asyncio.gather(*racing, return_exceptions=True)
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(refused) == 1 and refused[0].code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(await recorded(served, job.job_no)) == MAX_ENTRIES_PER_ATTEMPT
