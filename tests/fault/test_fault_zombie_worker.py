"""A worker frozen past its lease (SIGSTOP) and thawed (SIGCONT) after another took over.

The frozen worker is a real process (zombie_worker.py, raw gRPC stubs). When it wakes it
tries to report and complete: both are refused, recorded as evidence, and the job is
completed exactly once, by the worker that took it over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from fault_support import claim_request, events, result
from served import eventually

from jobwire.v1 import job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(60)

ZOMBIE = Path(__file__).with_name("zombie_worker.py")
LEASE_S = 1.0


async def line(proc: asyncio.subprocess.Process, step: str) -> dict[str, Any]:
    """The zombie's next line for `step`, skipping its heartbeat lines."""
    assert proc.stdout is not None
    while True:
        raw = await asyncio.wait_for(proc.stdout.readline(), timeout=15)
        assert raw, f"the zombie worker exited before {step!r}"
        said = json.loads(raw)
        if said["step"] == step:
            return said  # type: ignore[no-any-return]


async def test_a_paused_worker_cannot_finish_a_job_another_took_over(servers, database_url) -> None:  # type: ignore[no-untyped-def]
    s = await servers(database_url, reaper_interval_seconds=0.2, stall_grace_seconds=0.5)
    policy = job_pb2.RetryPolicy(max_attempts=3, on_lease_lost=job_pb2.RetryPolicy.RETRY)
    job = (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", retry_policy=policy))).job
    zombie = await asyncio.create_subprocess_exec(
        sys.executable, str(ZOMBIE), s.target, "frames", str(LEASE_S),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        claimed = await line(zombie, "claimed")
        assert claimed["job_no"] == job.job_no and claimed["attempt"] == 1
        await line(zombie, "reported")
        os.kill(zombie.pid, signal.SIGSTOP)  # frozen mid-job, waiting for stdin: no heartbeats, no reports

        async def requeued() -> job_pb2.Job | None:
            got = await s.jobs.Get(job_pb2.GetRequest(job_no=job.job_no))
            return got if got.status == job_pb2.Job.QUEUED else None

        await eventually(requeued, what="the reaper requeues the frozen worker's job")
        [rescue] = (await s.workers.Claim(claim_request(worker_id="rescuer"))).leases
        assert rescue.attempt == 2 and rescue.checkpoint == b"zombie-2"
        await s.workers.ReportStage(worker_pb2.ReportStageRequest(
            job_no=job.job_no, worker_token=rescue.worker_token, stage="PROCESSING", processed_units=3, total_units=10,
        ))  # fmt: skip

        os.kill(zombie.pid, signal.SIGCONT)
        assert zombie.stdin is not None
        zombie.stdin.write(b"go on\n")  # it waits for this after its first report
        await zombie.stdin.drain()
        late_report = await line(zombie, "report")
        late_complete = await line(zombie, "complete")
        assert (late_report["code"], late_report["reason"]) == ("FAILED_PRECONDITION", "WORKER_LEASE_LOST")
        assert (late_complete["code"], late_complete["reason"]) == ("FAILED_PRECONDITION", "WORKER_LEASE_LOST")
        assert await asyncio.wait_for(zombie.wait(), timeout=10) == 0
    finally:
        if zombie.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(zombie.pid, signal.SIGCONT)
                zombie.kill()
            await zombie.wait()

    during = await s.jobs.Get(job_pb2.GetRequest(job_no=job.job_no))
    assert during.status == job_pb2.Job.RUNNING and during.progress.processed_units == 3  # the zombie changed nothing
    done = await s.workers.Complete(worker_pb2.CompleteRequest(
        job_no=job.job_no, worker_token=rescue.worker_token, result=result("file:///results/rescuer.bin"),
    ))  # fmt: skip
    assert done.status == job_pb2.Job.READY and done.result.uri == "file:///results/rescuer.bin"
    trail = await events(s, job.job_no)
    [completed] = [e for e in trail if e.kind == "COMPLETED"]
    assert completed.worker_id == "rescuer" and completed.attempt == 2
    late = [e for e in trail if e.kind == "LATE_CALL_REJECTED"]
    assert len(late) >= 2  # the report and the complete (and any heartbeat is answered LOST, unrecorded)
    assert [e.kind for e in trail].count("LEASE_REVOKED_REQUEUED") == 1
