"""The happy path and the seed cases, over real gRPC, on SQLite."""

from __future__ import annotations

import json

import grpc
from google.protobuf import json_format
from service_support import artifact, claim, rpc_error, running, submit

from jobwire.v1 import job_pb2, worker_pb2


async def test_submit_claim_report_complete(served) -> None:  # type: ignore[no-untyped-def]
    job, lease = await running(served, payload=b'{"frames": 900}')
    assert job.status == job_pb2.Job.QUEUED and job.queue == "default"
    assert lease.attempt == 1 and lease.payload == b'{"frames": 900}'
    assert [s.code for s in lease.stages] == ["PREPARING", "PROCESSING", "VERIFYING", "DELIVERING"]
    done = await served.workers.Complete(
        worker_pb2.CompleteRequest(job_no=job.job_no, worker_token=lease.worker_token, result=artifact())
    )
    assert done.status == job_pb2.Job.READY and done.downloadable
    assert done.result.sha256 == "ab" * 32
    got = await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no))
    assert got.version == done.version and list(got.display.actions) == [
        job_pb2.Display.PREVIEW,
        job_pb2.Display.DOWNLOAD,
    ]


async def test_seed_get_renders_as_json(served) -> None:  # type: ignore[no-untyped-def]
    job, lease = await running(served)
    await served.workers.ReportStage(worker_pb2.ReportStageRequest(
        job_no=job.job_no, worker_token=lease.worker_token, stage="PROCESSING", processed_units=450, total_units=900,
    ))  # fmt: skip
    got = await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no))
    as_json = json.loads(json_format.MessageToJson(got))
    assert as_json["jobNo"] == job.job_no
    assert as_json["status"] == "RUNNING"
    assert as_json["stage"] == "PROCESSING"
    assert as_json["progress"]["processedUnits"] == "450"
    assert as_json["progress"]["totalUnits"] == "900"
    assert as_json["progress"]["percent"] == 50
    assert as_json["cancellable"] is True
    assert "updatedAt" in as_json


async def test_cancelled_job_cannot_become_ready_from_a_late_worker(served) -> None:  # type: ignore[no-untyped-def]
    job, lease = await running(served)
    stopping = await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
    assert stopping.status == job_pb2.Job.CANCEL_REQUESTED
    cancelled = await served.workers.ConfirmCancel(
        worker_pb2.ConfirmCancelRequest(job_no=job.job_no, worker_token=lease.worker_token)
    )
    assert cancelled.status == job_pb2.Job.CANCELLED
    code, reason = await rpc_error(served.workers.Complete(
        worker_pb2.CompleteRequest(job_no=job.job_no, worker_token=lease.worker_token, result=artifact())
    ))  # fmt: skip
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "WORKER_LEASE_LOST")
    after = await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no))
    assert after.status == job_pb2.Job.CANCELLED and not after.HasField("result")
    assert after.version == cancelled.version


async def test_queue_position_counts_runnable_jobs_ahead(served) -> None:  # type: ignore[no-untyped-def]
    assert await claim(served) == []  # a worker serves frames: its jobs can be claimed, so they count
    first = await submit(served)
    second = await submit(served)
    urgent = await submit(served, priority=5)
    positions = {}
    for job in (first, second, urgent):
        positions[job.job_no] = (await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no))).queue_position
    assert positions == {urgent.job_no: 0, first.job_no: 1, second.job_no: 2}
    leases = await claim(served, max_jobs=3)
    assert [lease.job_no for lease in leases] == [urgent.job_no, first.job_no, second.job_no]


async def test_a_worker_of_several_queues_gets_the_best_jobs_across_them(served) -> None:  # type: ignore[no-untyped-def]
    low = await submit(served, queue="bulk", priority=0)
    high = await submit(served, queue="urgent", priority=9)
    mid = await submit(served, queue="bulk", priority=5)
    other = await submit(served, queue="elsewhere", priority=99)
    leases = await claim(served, max_jobs=2, queues=["bulk", "urgent"])
    assert [lease.job_no for lease in leases] == [high.job_no, mid.job_no]
    (last,) = await claim(served, max_jobs=5, queues=["bulk", "urgent"])
    assert last.job_no == low.job_no
    queued = await served.jobs.Get(job_pb2.GetRequest(job_no=other.job_no))
    assert queued.status == job_pb2.Job.QUEUED, "a queue the worker did not name is left alone"
