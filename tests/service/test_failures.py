"""Failures: retries after a backoff with the checkpoint, attempt budgets, final failures,
Retry with a fresh budget, and a user view that never shows a trace, a path or a host."""

from __future__ import annotations

import time
from datetime import timedelta

import grpc
from service_support import claim, duration, get, rpc_failure, submit

from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

Job = job_pb2.Job
LEASE_S = 10.0


def _seconds(ts) -> float:  # type: ignore[no-untyped-def]
    return ts.ToNanoseconds() / 1e9


def _fail(
    lease: worker_pb2.Lease,
    *,
    retryable: bool,
    message: str = "the upstream service did not answer",
    detail: str = "",
    category: int = job_pb2.JobError.DEPENDENCY_FAILED,
) -> worker_pb2.FailRequest:
    return worker_pb2.FailRequest(
        job_no=lease.job_no,
        worker_token=lease.worker_token,
        category=category,  # type: ignore[arg-type]
        message=message,
        retryable=retryable,
        detail=detail,
    )


def _policy(max_attempts: int, initial: float, maximum: float, multiplier: float = 2.0) -> job_pb2.RetryPolicy:
    return job_pb2.RetryPolicy(
        max_attempts=max_attempts,
        initial_backoff=duration(initial),
        max_backoff=duration(maximum),
        backoff_multiplier=multiplier,
    )


async def _claim_when_due(served, job_type: str, timeout: float = 10.0) -> worker_pb2.Lease:  # type: ignore[no-untyped-def]
    """Poll Claim (long-polling briefly each time) until the job is runnable again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leases = await claim(served, job_type, wait=0.2, lease=LEASE_S)
        if leases:
            (lease,) = leases
            return lease
    raise AssertionError(f"no {job_type} job became claimable within {timeout}s")


async def test_a_retryable_failure_is_retried_after_its_backoff_with_its_checkpoint(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served, "import", retry_policy=_policy(2, 0.4, 1.0))
    assert job.max_attempts == 2
    (first,) = await claim(served, "import", lease=LEASE_S)
    assert first.attempt == 1 and not first.has_checkpoint
    await served.workers.ReportStage(
        worker_pb2.ReportStageRequest(
            job_no=job.job_no,
            worker_token=first.worker_token,
            stage="PROCESSING",
            processed_units=300,
            total_units=1000,
            checkpoint=b"rows:300",
        )
    )

    queued = await served.workers.Fail(_fail(first, retryable=True))
    assert queued.status == Job.QUEUED and queued.attempt == 1
    backoff = _seconds(queued.run_after) - _seconds(queued.updated_at)
    assert abs(backoff - 0.4) < 0.005, backoff  # run_after = the failure's time + initial_backoff
    assert queued.stage == "" and queued.progress.stage_index == 0

    # Not claimable before run_after. Whether a claim comes before it depends on the machine's
    # speed, so the order is asserted on the database's own clock: no lease starts before it.
    second = await _claim_when_due(served, "import")
    claimed_at = _seconds(second.lease_expires_at) - LEASE_S
    assert claimed_at >= _seconds(queued.run_after) - 0.001, "leased before its backoff elapsed"
    assert second.attempt == 2 and second.has_checkpoint and second.checkpoint == b"rows:300"
    seen = await get(served, job.job_no)
    assert (seen.status, seen.attempt, seen.stage, seen.progress.stage_index) == (Job.RUNNING, 2, "PREPARING", 1)

    # attempts exhausted: FAILED, still retryable by the user
    failed = await served.workers.Fail(_fail(second, retryable=True))
    assert failed.status == Job.FAILED and failed.HasField("finished_at")
    assert failed.error.retryable and failed.error.category == job_pb2.JobError.DEPENDENCY_FAILED
    assert failed.error.stage == "PREPARING"
    assert list(failed.display.actions) == [job_pb2.Display.VIEW, job_pb2.Display.RETRY]

    # Retry grants a fresh budget of max_attempts; attempt numbers keep counting
    retried = await served.jobs.Retry(job_pb2.RetryRequest(job_no=job.job_no))
    assert retried.status == Job.QUEUED and not retried.HasField("error") and not retried.HasField("finished_at")
    (third,) = await claim(served, "import", lease=LEASE_S)
    assert third.attempt == 3
    again = await served.workers.Fail(_fail(third, retryable=True))
    assert again.status == Job.QUEUED, "the fresh budget allows a second attempt"
    fourth = await _claim_when_due(served, "import")
    assert fourth.attempt == 4
    assert (await served.workers.Fail(_fail(fourth, retryable=True))).status == Job.FAILED


async def test_the_backoff_grows_and_is_capped(served) -> None:  # type: ignore[no-untyped-def]
    await submit(served, "flaky", retry_policy=_policy(4, 0.2, 0.5, multiplier=3.0))
    (first,) = await claim(served, "flaky", lease=LEASE_S)
    one = await served.workers.Fail(_fail(first, retryable=True))
    assert abs(_seconds(one.run_after) - _seconds(one.updated_at) - 0.2) < 0.005
    second = await _claim_when_due(served, "flaky")
    two = await served.workers.Fail(_fail(second, retryable=True))
    assert abs(_seconds(two.run_after) - _seconds(two.updated_at) - 0.5) < 0.005  # min(0.6, 0.5)


async def test_a_non_retryable_failure_is_final_and_refuses_retry(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served, "import", retry_policy=_policy(5, 0.1, 0.1))
    (lease,) = await claim(served, "import")
    failed = await served.workers.Fail(
        _fail(lease, retryable=False, category=job_pb2.JobError.INPUT_INVALID, message="column 3 is not a date")
    )
    assert failed.status == Job.FAILED and failed.attempt == 1
    assert failed.error.category == job_pb2.JobError.INPUT_INVALID and not failed.error.retryable
    assert failed.error.message == "column 3 is not a date"
    assert list(failed.display.actions) == [job_pb2.Display.VIEW]
    before = await get(served, job.job_no)
    exc = await rpc_failure(served.jobs.Retry(job_pb2.RetryRequest(job_no=job.job_no)))
    assert (exc.code(), error_reason(exc)) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_RETRYABLE")
    assert await get(served, job.job_no) == before
    assert await claim(served, "import") == []  # nothing is scheduled: no claim may find it


async def test_release_and_requeue_charge_no_attempt(served) -> None:  # type: ignore[no-untyped-def]
    """max_attempts=2: after a Release and an operator's Requeue, a retryable failure still
    requeues, because only the attempts that ended in a failure were charged."""
    job = await submit(served, "import", retry_policy=_policy(2, 0.0, 0.0))
    (a1,) = await claim(served, "import")
    released = await served.workers.Release(worker_pb2.ReleaseRequest(job_no=job.job_no, worker_token=a1.worker_token))
    assert released.status == Job.QUEUED
    assert (released.attempt, released.max_attempts) == (1, 3), "the released attempt is given back"
    (a2,) = await claim(served, "import", lease=30.0)
    served.clock.advance(timedelta(seconds=31))  # the lease ran out: an operator may requeue it
    requeued = await served.admin.Requeue(admin_pb2.RequeueRequest(job_no=job.job_no, reason="host is gone"))
    assert (requeued.attempt, requeued.max_attempts) == (2, 4)
    (a3,) = await claim(served, "import")
    assert (a1.attempt, a2.attempt, a3.attempt) == (1, 2, 3)
    assert (await served.workers.Fail(_fail(a3, retryable=True))).status == Job.QUEUED
    (a4,) = await claim(served, "import")
    assert (await served.workers.Fail(_fail(a4, retryable=True))).status == Job.FAILED


async def test_release_keeps_the_checkpoint_it_is_given(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served, "import")
    (a1,) = await claim(served, "import")
    await served.workers.ReportStage(
        worker_pb2.ReportStageRequest(
            job_no=job.job_no, worker_token=a1.worker_token, stage="PROCESSING", checkpoint=b"from-report"
        )
    )
    await served.workers.Release(
        worker_pb2.ReleaseRequest(job_no=job.job_no, worker_token=a1.worker_token, checkpoint=b"from-release")
    )
    (a2,) = await claim(served, "import")
    assert a2.has_checkpoint and a2.checkpoint == b"from-release"
    await served.workers.Release(worker_pb2.ReleaseRequest(job_no=job.job_no, worker_token=a2.worker_token))
    (a3,) = await claim(served, "import")
    assert a3.checkpoint == b"from-release", "a Release without a checkpoint keeps the last one"
    await served.workers.ReportStage(
        worker_pb2.ReportStageRequest(
            job_no=job.job_no, worker_token=a3.worker_token, stage="PREPARING", checkpoint=b""
        )
    )
    await served.workers.Release(worker_pb2.ReleaseRequest(job_no=job.job_no, worker_token=a3.worker_token))
    (a4,) = await claim(served, "import")
    assert a4.has_checkpoint and a4.checkpoint == b"", "an empty checkpoint is a checkpoint"


async def test_fail_while_cancel_requested_ends_cancelled_with_the_failure_as_evidence(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served, "import", retry_policy=_policy(3, 0.1, 0.1))
    (lease,) = await claim(served, "import")
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
    ended = await served.workers.Fail(_fail(lease, retryable=True, detail="socket closed by peer"))
    assert ended.status == Job.CANCELLED and not ended.HasField("error")
    events = await served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job.job_no))
    last = events.events[-1]
    assert last.to_status == Job.CANCELLED and last.from_status == Job.CANCEL_REQUESTED
    assert "socket closed by peer" in last.detail and "DEPENDENCY_FAILED" in last.detail
    assert list((await get(served, job.job_no)).display.actions) == [job_pb2.Display.RESUBMIT]


# -- what a user may see of a failure -----------------------------------------------------------

TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/home/worker/app/x.py", line 12, in run\n'
    '    conn = connect("10.0.0.7:5432")\n'
    "psycopg.OperationalError: could not connect to db01.prod.internal (10.0.0.7:5432)\n"
)
SECRETS = (
    "Traceback",
    'File "',
    "/home/worker",
    "x.py",
    "10.0.0.7",
    ":5432",  # a port (bare digits could be a timestamp's nanos)
    "db01",
    "prod.internal",
    "OperationalError",
    "C:\\",
    "fe80",
    "Users\\worker",
)

MESSAGES = [
    TRACE,
    'File "/home/worker/app/x.py", line 12, in run',
    "could not reach db01.prod.internal at 10.0.0.7:5432 while reading /home/worker/app/x.py",
    "upload to [fe80::1]:5432 failed, see C:\\Users\\worker\\app\\x.py",
]


async def test_the_user_view_of_a_failure_shows_no_trace_path_or_host(served) -> None:  # type: ignore[no-untyped-def]
    for message in MESSAGES:
        job = await submit(served, "report", owner="alice")
        (lease,) = await claim(served, "report")
        await served.workers.ReportStage(
            worker_pb2.ReportStageRequest(
                job_no=job.job_no,
                worker_token=lease.worker_token,
                stage="PROCESSING",
                note=f"reading {TRACE}"[:900].replace("\n", " "),
            )
        )
        reply = await served.workers.Fail(_fail(lease, retryable=False, message=message, detail=TRACE))
        assert reply.status == Job.FAILED and reply.error.message  # a plain message, never empty
        views = [
            reply,
            await get(served, job.job_no),
            await get(served, job.job_no, "zh-CN"),
            *(await served.jobs.ListJobs(job_pb2.ListJobsRequest(owner="alice"))).jobs,
        ]
        for view in views:
            text = str(view)
            leaked = [s for s in SECRETS if s in text]
            assert not leaked, f"{leaked} visible to the user for {message!r}:\n{text}"
        assert views[1].error.stage == "PROCESSING" and views[1].error.category == job_pb2.JobError.DEPENDENCY_FAILED

        # the operator sees the whole evidence
        events = await served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job.job_no))
        failed = [e for e in events.events if e.kind == "FAILED"]
        assert len(failed) == 1
        assert "/home/worker/app/x.py" in failed[0].detail and "db01.prod.internal" in failed[0].detail
        assert "10.0.0.7:5432" in failed[0].detail


async def test_a_fail_is_never_refused_for_its_text(served) -> None:  # type: ignore[no-untyped-def]
    """Colour codes, control characters and a very long message still end the attempt."""
    job = await submit(served, "render", retry_policy=_policy(1, 0.0, 0.0))
    (lease,) = await claim(served, "render")
    noisy = "\x1b[31mffmpeg: error\x1b[0m\x00 while decoding /srv/in/a.mp4 " + "x" * 2000
    failed = await served.workers.Fail(
        worker_pb2.FailRequest(job_no=job.job_no, worker_token=lease.worker_token, message=noisy, retryable=False)
    )
    assert failed.status == Job.FAILED
    assert failed.error.message.startswith("ffmpeg: error while decoding [path]")
    assert "\x1b" not in failed.error.message and "\x00" not in failed.error.message
    assert len(failed.error.message) <= 300
    events = await served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job.job_no))
    assert any("ffmpeg: error" in e.detail for e in events.events), "the raw text stays as evidence"
