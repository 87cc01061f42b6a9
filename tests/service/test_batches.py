"""Batches over real gRPC on SQLite: all jobs or none, counts that add up while a
fleet drains them, CancelBatch, replays, tenancy and WatchJobs(batch_id).

Waits poll with a deadline (`eventually`); nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from db_edits import db_execute
from rich.console import Console
from served import Served, eventually, start_server
from service_support import artifact, claim, db_rows, events, open_stubs, rpc_failure
from watch_support import next_job

from jobwire.client.cli import run
from jobwire.client.status import error_info, field_violations
from jobwire.db.tables import job
from jobwire.domain.batches import REPLY_BUDGET
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(180)

CANCELLED, CANCEL_REQUESTED = job_pb2.Job.CANCELLED, job_pb2.Job.CANCEL_REQUESTED


def jobs(n: int, **fields: object) -> list[job_pb2.SubmitRequest]:
    return [job_pb2.SubmitRequest(job_type="frames", payload=b"%d" % i, **fields) for i in range(n)]  # type: ignore[arg-type]


async def submit_batch(s: Served, requests: list[job_pb2.SubmitRequest], key: str = "") -> job_pb2.SubmitBatchResponse:
    return await s.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=requests, idempotency_key=key))


async def get_batch(s: Served, batch_id: str) -> job_pb2.Batch:
    return await s.jobs.GetBatch(job_pb2.GetBatchRequest(batch_id=batch_id))


def added_up(batch: job_pb2.Batch) -> None:
    c = batch.counts
    assert c.queued + c.running + c.cancel_requested + c.ready + c.failed + c.cancelled == batch.total
    assert batch.finished == c.ready + c.failed + c.cancelled
    assert batch.progress == pytest.approx(batch.finished / batch.total)


async def test_a_batch_with_one_bad_job_makes_none(served: Served) -> None:
    before = await db_rows(served)
    requests = jobs(500)
    requests[250].job_type = "not a name"
    error = await rpc_failure(submit_batch(served, requests))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in field_violations(error)] == ["jobs[250].job_type"]
    requests = jobs(500)
    requests[499].depends_on.append("PT-20260101-999")  # found unknown only by the database
    error = await rpc_failure(submit_batch(served, requests))
    assert [f for f, _ in field_violations(error)] == ["jobs[499].depends_on"]
    after = await db_rows(served)
    assert {k: after[k] for k in ("job", "job_event", "job_batch", "job_dependency")} == {
        k: before[k] for k in ("job", "job_event", "job_batch", "job_dependency")
    }


async def test_a_fleet_drains_a_batch_of_500_while_its_counts_add_up(served: Served) -> None:
    made = await submit_batch(served, jobs(500))
    assert len(made.jobs) == 500 and {j.batch_id for j in made.jobs} == {made.batch_id}
    assert [j.job_no for j in made.jobs] == sorted(j.job_no for j in made.jobs)
    stubs = await open_stubs(served.target, 3)

    async def worker(n: int) -> None:
        s = stubs[n % len(stubs)]
        while leases := await claim(s, worker_id=f"w{n}", max_jobs=5):
            for lease in leases:
                await s.workers.Complete(
                    worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
                )

    fleet = asyncio.gather(*(worker(n) for n in range(6)))
    try:
        seen = []
        while not fleet.done():
            batch = await get_batch(served, made.batch_id)
            added_up(batch)
            seen.append(batch.finished)
        await fleet
    finally:
        for s in stubs:
            await s.close()
    assert seen == sorted(seen)  # finished never goes back
    batch = await get_batch(served, made.batch_id)
    added_up(batch)
    assert (batch.total, batch.counts.ready, batch.finished, batch.progress) == (500, 500, 500, 1.0)


async def test_cancel_batch_stops_the_rest(served: Served) -> None:
    made = await submit_batch(served, jobs(20))
    running = await claim(served, max_jobs=2)
    batch = await served.jobs.CancelBatch(job_pb2.CancelBatchRequest(batch_id=made.batch_id))
    added_up(batch)
    assert (batch.counts.cancelled, batch.counts.cancel_requested) == (18, 2)
    assert await claim(served, max_jobs=20) == []
    assert {lease.job_no for lease in running} <= {j.job_no for j in made.jobs}


async def test_a_replayed_key_returns_the_same_batch(served: Served) -> None:
    first = await submit_batch(served, jobs(5), key="nightly-2026-11-30")
    rows = await db_rows(served)
    again = await submit_batch(served, jobs(5), key="nightly-2026-11-30")
    assert again.batch_id == first.batch_id
    assert [j.job_no for j in again.jobs] == [j.job_no for j in first.jobs]
    assert (await db_rows(served))["job"] == rows["job"]
    error = await rpc_failure(submit_batch(served, jobs(6), key="nightly-2026-11-30"))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS


async def test_watch_jobs_by_batch_sees_every_jobs_changes(served: Served) -> None:
    made = await submit_batch(served, jobs(3))
    call = served.jobs.WatchJobs(job_pb2.WatchJobsRequest(batch_id=made.batch_id))
    try:
        initial = [await next_job(call) for _ in range(3)]
        assert {j.job_no for j in initial if j} == {j.job_no for j in made.jobs}
        await served.jobs.CancelBatch(job_pb2.CancelBatchRequest(batch_id=made.batch_id))
        cancelled: set[str] = set()
        while len(cancelled) < 3:
            update = await next_job(call)
            assert update is not None and update.batch_id == made.batch_id
            if update.status == CANCELLED:
                cancelled.add(update.job_no)
        assert cancelled == {j.job_no for j in made.jobs}
    finally:
        call.cancel()


ACME = Token("batches-acme-client-9d3", tenant="acme")
GLOBEX = Token("batches-globex-client-9d3", tenant="globex")


async def test_another_tenants_batch_is_not_found(database_url: str, tmp_path: Path) -> None:
    served = await start_server(database_url, auth_file=write_auth_file(tmp_path / "auth.toml", [ACME, GLOBEX]))
    try:
        request = job_pb2.SubmitBatchRequest(jobs=jobs(2))
        made = await served.jobs.SubmitBatch(request, metadata=ACME.metadata)
        ref = job_pb2.GetBatchRequest(batch_id=made.batch_id)
        for call in (
            served.jobs.GetBatch(ref, metadata=GLOBEX.metadata),
            served.jobs.CancelBatch(job_pb2.CancelBatchRequest(batch_id=made.batch_id), metadata=GLOBEX.metadata),
        ):
            assert (await rpc_failure(call)).code() == grpc.StatusCode.NOT_FOUND
        stream = served.jobs.WatchJobs(job_pb2.WatchJobsRequest(batch_id=made.batch_id), metadata=GLOBEX.metadata)
        assert (await rpc_failure(stream.read())).code() == grpc.StatusCode.NOT_FOUND
        assert (await served.jobs.GetBatch(ref, metadata=ACME.metadata)).counts.queued == 2
    finally:
        await served.close()


async def test_progress_is_the_finished_share(served: Served) -> None:
    made = await submit_batch(served, jobs(2))
    (lease,) = await claim(served)
    await served.workers.Complete(
        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
    )

    async def half() -> job_pb2.Batch | None:
        batch = await get_batch(served, made.batch_id)
        return batch if batch.progress == 0.5 else None

    assert (await eventually(half, what="half the batch finished")).counts.ready == 1


def jobctl(target: str, *argv: str) -> tuple[int, str]:
    out, err = (Console(file=io.StringIO(), width=300, color_system=None) for _ in range(2))
    code = run(["--target", target, *argv], out=out, err=err, env={})
    return code, out.file.getvalue() + err.file.getvalue()  # type: ignore[attr-defined]


async def test_jobctl_batch_submit_get_watch_and_cancel(served: Served, tmp_path: Path) -> None:
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('{"job_type": "frames", "payload": {"n": 1}}\n\n{"job_type": "frames", "priority": 5}\n')
    code, text = await asyncio.to_thread(jobctl, served.target, "batch", "submit", str(lines))
    assert code == 0 and "2 jobs" in text
    batch_id = text.split()[0]
    code, text = await asyncio.to_thread(jobctl, served.target, "batch", "get", batch_id)
    assert code == 0 and "0/2 finished (0%)" in text and "queued 2" in text
    code, text = await asyncio.to_thread(jobctl, served.target, "batch", "cancel", batch_id)
    assert code == 0 and "2/2 finished (100%)" in text and "cancelled 2" in text
    code, text = await asyncio.to_thread(jobctl, served.target, "batch", "watch", batch_id)
    assert code == 0 and text.count("Cancelled") >= 2
    lines.write_text('{"job_type": "frames", "colour": "red"}\n')
    code, text = await asyncio.to_thread(jobctl, served.target, "batch", "submit", str(lines))
    assert code == 2 and "jobs.jsonl:1" in text


async def test_a_job_waiting_for_two_jobs_of_a_cancelled_batch_is_cancelled_once(served: Served) -> None:
    made = await submit_batch(served, jobs(2))
    waiting = await served.jobs.Submit(
        job_pb2.SubmitRequest(job_type="frames", depends_on=[j.job_no for j in made.jobs])
    )
    await served.jobs.CancelBatch(job_pb2.CancelBatchRequest(batch_id=made.batch_id))
    trail = await events(served, waiting.job.job_no)
    assert [e.kind for e in trail] == ["SUBMITTED", "DEPENDENCY_FAILED"]
    assert made.jobs[0].job_no in trail[-1].detail


# -- a reply that fits (security review, issue 22, finding 7) -------------------------------

# 32 labels of 120 characters: ~4.1 KB a job, and a reply of 1,000 such jobs over the 4 MiB
# a gRPC message may carry (once committed, then its reply failed, and every replay with it).
HEAVY_LABELS = {f"k{i:02d}": "v" * 120 for i in range(32)}


async def test_a_batch_whose_reply_would_not_fit_is_refused_and_writes_nothing(served: Served) -> None:
    before = await db_rows(served)
    requests = jobs(1000, labels=HEAVY_LABELS)
    for key in ("", "heavy"):  # with a key or without, again and again: the same refusal
        error = await rpc_failure(submit_batch(served, requests, key))
        assert (error.code(), error_info(error).reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "BATCH_TOO_LARGE")
        assert "split the batch" in (error.details() or "")
    assert await db_rows(served) == before
    made = await submit_batch(served, requests[:500], "half")  # half of it fits
    assert len(made.jobs) == 500 and made.jobs_omitted == 0


async def test_a_replay_whose_jobs_grew_past_one_reply_lists_what_fits_and_counts_the_rest(served: Served) -> None:
    made = await submit_batch(served, jobs(1000, labels={"k": "v"}), "grows")
    assert len(made.jobs) == 1000 and made.jobs_omitted == 0
    # Its jobs grew since (as a batch made before the rule may be): each now weighs ~4 KB.
    await db_execute(served, sa.update(job).where(job.c.batch_id == made.batch_id).values(
        labels=json.dumps(HEAVY_LABELS)
    ))  # fmt: skip
    replay = await submit_batch(served, jobs(1000, labels={"k": "v"}), "grows")
    assert replay.batch_id == made.batch_id
    assert 0 < replay.jobs_omitted < 1000 and len(replay.jobs) + replay.jobs_omitted == 1000
    assert [j.job_no for j in replay.jobs] == [j.job_no for j in made.jobs[: len(replay.jobs)]]
    assert replay.ByteSize() <= REPLY_BUDGET
