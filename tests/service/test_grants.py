"""A token's queues scope everything it names or lists (security review, finding 4).

A client token with `queues = ["q1"]` could read, cancel, resolve and delete jobs of queue
`default`, and pause or delete its schedules: only Submit was refused. Now every call that
names a job, batch, schedule or operation answers a queue the token may not use exactly as
a job that does not exist (the same code, reason and message: no oracle), every list leaves
such rows out, and the same calls work on a job of the token's own queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from auth_files import Token, write_auth_file
from google.longrunning import operations_pb2
from served import Served, start_server

from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, job_pb2, schedule_pb2, worker_pb2

# Each scope is a WHERE clause of the store's reads and guarded writes, on either database.
pytestmark = pytest.mark.both_databases
EVERY = Token("grants-acme-every-queue", tenant="acme", roles=("client", "admin"))
Q1 = Token("grants-acme-q1-only", tenant="acme", queues=("q1",), roles=("client", "admin"))
WORKER = Token("grants-acme-worker", tenant="acme", role="worker")
NOBODYS = "PT-20000101-999999"  # a job number nobody has
OK = grpc.StatusCode.OK
REFUSED = grpc.StatusCode.FAILED_PRECONDITION  # the job's state says no: it was found


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    auth = write_auth_file(tmp_path / "auth.toml", [EVERY, Q1, WORKER])
    s = await start_server(database_url, auth_file=auth, schedule_interval_seconds=0)
    try:
        yield s
    finally:
        await s.close()


async def _job(s: Served, queue: str, owner: str = "alice") -> str:
    request = job_pb2.SubmitRequest(job_type="frames", queue=queue, owner=owner)
    return (await s.jobs.Submit(request, metadata=EVERY.metadata)).job.job_no


async def _first(stream: Any) -> None:
    """The first message of a server stream (or its error), then the stream is ended."""
    try:
        await stream.read()
    finally:
        stream.cancel()


def _wait(s: Served, no: str, md: Any) -> Awaitable[Any]:
    request = operations_pb2.WaitOperationRequest(name=f"operations/{no}")
    request.timeout.FromMilliseconds(100)
    return s.operations.WaitOperation(request, metadata=md)


Call = Callable[[Served, str, Any], Awaitable[Any]]
# Every RPC that names a job, and what it answers for a QUEUED job of the token's own queue.
JOB_CALLS: dict[str, tuple[Call, grpc.StatusCode]] = {
    "Get": (lambda s, no, md: s.jobs.Get(job_pb2.GetRequest(job_no=no), metadata=md), OK),
    "Cancel": (lambda s, no, md: s.jobs.Cancel(job_pb2.CancelRequest(job_no=no), metadata=md), OK),
    "Retry": (lambda s, no, md: s.jobs.Retry(job_pb2.RetryRequest(job_no=no), metadata=md), REFUSED),
    "Resolve": (
        lambda s, no, md: s.jobs.Resolve(
            job_pb2.ResolveRequest(job_no=no, decision=job_pb2.Review.APPROVE), metadata=md
        ),
        REFUSED,
    ),
    "GetResult": (
        lambda s, no, md: _first(s.jobs.GetResult(job_pb2.GetResultRequest(job_no=no), metadata=md)),
        REFUSED,
    ),
    "GetPayload": (lambda s, no, md: s.jobs.GetPayload(job_pb2.GetPayloadRequest(job_no=no), metadata=md), OK),
    "WatchStatus": (
        lambda s, no, md: _first(s.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=no), metadata=md)),
        OK,
    ),
    "WatchJobs": (lambda s, no, md: _first(s.jobs.WatchJobs(job_pb2.WatchJobsRequest(job_nos=[no]), metadata=md)), OK),
    "ListEvents": (lambda s, no, md: s.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=no), metadata=md), OK),
    # found, with no checkpoint yet: NOT_FOUND too, but CHECKPOINT_NOT_FOUND, not JOB_NOT_FOUND
    "GetCheckpoint": (
        lambda s, no, md: s.admin.GetCheckpoint(admin_pb2.GetCheckpointRequest(job_no=no), metadata=md),
        grpc.StatusCode.NOT_FOUND,
    ),
    "Requeue": (lambda s, no, md: s.admin.Requeue(admin_pb2.RequeueRequest(job_no=no), metadata=md), REFUSED),
    "GetOperation": (
        lambda s, no, md: s.operations.GetOperation(
            operations_pb2.GetOperationRequest(name=f"operations/{no}"), metadata=md
        ),
        OK,
    ),
    "CancelOperation": (
        lambda s, no, md: s.operations.CancelOperation(
            operations_pb2.CancelOperationRequest(name=f"operations/{no}"), metadata=md
        ),
        OK,
    ),
    "DeleteOperation": (
        lambda s, no, md: s.operations.DeleteOperation(
            operations_pb2.DeleteOperationRequest(name=f"operations/{no}"), metadata=md
        ),
        REFUSED,
    ),
    "WaitOperation": (_wait, OK),
}


async def _answer(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str | None, str]:
    """(code, ErrorInfo reason, message) of a call; OK with neither when it succeeded."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), error_reason(exc), exc.details() or ""
    return OK, None, ""


@pytest.mark.parametrize("name", sorted(JOB_CALLS))
async def test_a_job_of_a_queue_the_token_may_not_use_is_not_found(served: Served, name: str) -> None:
    call, on_own_queue = JOB_CALLS[name]
    hidden, own = await _job(served, "default"), await _job(served, "q1")
    unknown = await _answer(call(served, NOBODYS, Q1.metadata))
    assert unknown[0] == grpc.StatusCode.NOT_FOUND
    # exactly as a job that does not exist: the same code, reason and message
    assert await _answer(call(served, hidden, Q1.metadata)) == unknown
    mine = await _answer(call(served, own, Q1.metadata))
    assert mine[0] == on_own_queue and mine != unknown  # found: answered as a job that exists
    # and the job is untouched: still there, still QUEUED, for a token that sees it
    job = await served.jobs.Get(job_pb2.GetRequest(job_no=hidden), metadata=EVERY.metadata)
    assert job.status == job_pb2.Job.QUEUED


async def test_lists_leave_out_the_queues_the_token_may_not_use(served: Served) -> None:
    hidden, own = await _job(served, "default"), await _job(served, "q1")
    for statuses in ([], [job_pb2.Job.QUEUED]):
        request = job_pb2.ListJobsRequest(statuses=statuses)
        listed = await served.jobs.ListJobs(request, metadata=Q1.metadata)
        assert [j.job_no for j in listed.jobs] == [own]
        everything = await served.jobs.ListJobs(request, metadata=EVERY.metadata)
        assert [j.job_no for j in everything.jobs] == [own, hidden]
    for owner in ("alice", ""):
        request = job_pb2.ListJobsRequest(owner=owner, job_type="frames")
        assert [j.job_no for j in (await served.jobs.ListJobs(request, metadata=Q1.metadata)).jobs] == [own]
    operations = await served.operations.ListOperations(operations_pb2.ListOperationsRequest(), metadata=Q1.metadata)
    assert [o.name for o in operations.operations] == [f"operations/{own}"]
    findings = await served.admin.Inspect(
        admin_pb2.InspectRequest(kinds=[admin_pb2.Finding.NO_WORKER]), metadata=Q1.metadata
    )
    assert [f.job_no for f in findings.findings] == [own]


async def test_an_owners_watch_sends_only_the_jobs_of_the_tokens_queues(served: Served) -> None:
    await _job(served, "default")
    own = await _job(served, "q1")
    stream = served.jobs.WatchJobs(job_pb2.WatchJobsRequest(owner="alice"), metadata=Q1.metadata)
    try:
        first = await asyncio.wait_for(stream.read(), 10)
        assert first.job.job_no == own
        later_hidden, later_own = await _job(served, "default"), await _job(served, "q1")
        # the next thing the stream sends is the new job of q1, never the one of default
        assert (await asyncio.wait_for(stream.read(), 10)).job.job_no == later_own
        assert later_hidden != later_own
    finally:
        stream.cancel()


async def test_a_batch_is_seen_through_its_jobs_in_the_tokens_queues(served: Served) -> None:
    jobs = [job_pb2.SubmitRequest(job_type="frames", queue=q) for q in ("default", "q1", "default")]
    mixed = await served.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=jobs), metadata=EVERY.metadata)
    elsewhere = await served.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=[jobs[0]]), metadata=EVERY.metadata)
    seen = await served.jobs.GetBatch(job_pb2.GetBatchRequest(batch_id=mixed.batch_id), metadata=Q1.metadata)
    assert (seen.total, seen.counts.queued) == (1, 1)  # only its job of q1: counts still add up to total
    cancelled = await served.jobs.CancelBatch(job_pb2.CancelBatchRequest(batch_id=mixed.batch_id), metadata=Q1.metadata)
    assert (cancelled.total, cancelled.counts.cancelled) == (1, 1)
    whole = await served.jobs.GetBatch(job_pb2.GetBatchRequest(batch_id=mixed.batch_id), metadata=EVERY.metadata)
    assert (whole.total, whole.counts.queued, whole.counts.cancelled) == (3, 2, 1)  # its default jobs run on

    unknown = await _answer(
        served.jobs.GetBatch(job_pb2.GetBatchRequest(batch_id="B-" + "0" * 20), metadata=Q1.metadata)
    )
    assert unknown[0] == grpc.StatusCode.NOT_FOUND
    for call in (
        served.jobs.GetBatch(job_pb2.GetBatchRequest(batch_id=elsewhere.batch_id), metadata=Q1.metadata),
        served.jobs.CancelBatch(job_pb2.CancelBatchRequest(batch_id=elsewhere.batch_id), metadata=Q1.metadata),
        _first(served.jobs.WatchJobs(job_pb2.WatchJobsRequest(batch_id=elsewhere.batch_id), metadata=Q1.metadata)),
    ):
        assert await _answer(call) == unknown


def _schedule(schedule_id: str, queue: str) -> schedule_pb2.CreateScheduleRequest:
    template = job_pb2.SubmitRequest(job_type="frames", queue=queue)
    return schedule_pb2.CreateScheduleRequest(schedule_id=schedule_id, cron="0 2 * * *", template=template)


# Every RPC that names a schedule; DeleteSchedule last, as it takes the schedule away.
SCHEDULE_CALLS: dict[str, Callable[[Served, str, Any], Awaitable[Any]]] = {
    "GetSchedule": lambda s, sid, md: s.schedules.GetSchedule(schedule_pb2.ScheduleRef(schedule_id=sid), metadata=md),
    "ListScheduleJobs": lambda s, sid, md: s.schedules.ListScheduleJobs(
        schedule_pb2.ListScheduleJobsRequest(schedule_id=sid), metadata=md
    ),
    "PauseSchedule": lambda s, sid, md: s.schedules.PauseSchedule(
        schedule_pb2.ScheduleRef(schedule_id=sid), metadata=md
    ),
    "ResumeSchedule": lambda s, sid, md: s.schedules.ResumeSchedule(
        schedule_pb2.ScheduleRef(schedule_id=sid), metadata=md
    ),
    "DeleteSchedule": lambda s, sid, md: s.schedules.DeleteSchedule(
        schedule_pb2.ScheduleRef(schedule_id=sid), metadata=md
    ),
}


async def test_a_schedule_of_a_queue_the_token_may_not_use_is_not_found(served: Served) -> None:
    await served.schedules.CreateSchedule(_schedule("nightly-default", "default"), metadata=EVERY.metadata)
    await served.schedules.CreateSchedule(_schedule("nightly-q1", "q1"), metadata=EVERY.metadata)
    for name, call in SCHEDULE_CALLS.items():
        unknown = await _answer(call(served, "nobodys", Q1.metadata))
        assert unknown[0] == grpc.StatusCode.NOT_FOUND, name
        assert await _answer(call(served, "nightly-default", Q1.metadata)) == unknown, name
        assert (await _answer(call(served, "nightly-q1", Q1.metadata)))[0] == OK, name
    listed = await served.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest(), metadata=Q1.metadata)
    assert [one.schedule_id for one in listed.schedules] == []  # nightly-q1 was deleted above
    everything = await served.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest(), metadata=EVERY.metadata)
    assert [(one.schedule_id, one.paused) for one in everything.schedules] == [("nightly-default", False)]


async def test_workers_are_listed_for_the_queues_the_token_may_use(served: Served) -> None:
    for worker_id, queues in (("w-default", ["default"]), ("w-both", ["default", "q1"])):
        request = worker_pb2.ClaimRequest(
            worker_id=worker_id, queues=queues, job_types=[worker_pb2.JobTypeSpec(name="frames")]
        )
        await served.workers.Claim(request, metadata=WORKER.metadata)
    listed = await served.admin.ListWorkers(admin_pb2.ListWorkersRequest(), metadata=Q1.metadata)
    assert [(w.worker_id, list(w.queues)) for w in listed.workers] == [("w-both", ["q1"])]
    everyone = await served.admin.ListWorkers(admin_pb2.ListWorkersRequest(), metadata=EVERY.metadata)
    assert [w.worker_id for w in everyone.workers] == ["w-both", "w-default"]
