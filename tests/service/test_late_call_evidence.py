"""Late-call evidence: written for tokens that were real leases of the job, and only a few per job.

Security review, finding 7: 100 Complete calls with the forged token `1.forged` wrote 100
LATE_CALL_REJECTED rows. A job's tokens are now signed with its own key, so a token the
job never issued is refused without a row, and a real old lease's calls leave at most
EvidenceLimit's rows per job and minute.
"""

from __future__ import annotations

import asyncio

import grpc
from service_support import FORGED_TOKEN, claim, complete_request, db_rows, rpc_error, running

from jobwire.process_state.evidence_limit import PER_WINDOW, EvidenceLimit
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

LOST = (grpc.StatusCode.FAILED_PRECONDITION, "WORKER_LEASE_LOST")


async def _late_rows(served, job_no: str) -> int:  # type: ignore[no-untyped-def]
    events = await served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job_no, page_size=500))
    return sum(e.kind == "LATE_CALL_REJECTED" for e in events.events)


async def test_forged_tokens_are_refused_without_evidence(served) -> None:  # type: ignore[no-untyped-def]
    job, lease = await running(served)
    before = await db_rows(served)
    signature = lease.worker_token.partition(".")[2]
    one_off = signature[:-1] + ("B" if signature.endswith("A") else "A")  # never the real one (1 in 64 ended in A)
    for token in ("1.forged", FORGED_TOKEN, "0.x", f"1.{one_off}"):
        calls = [served.workers.Complete(complete_request(job.job_no, token)) for _ in range(25)]
        assert set(await asyncio.gather(*(rpc_error(c) for c in calls))) == {LOST}
    assert await db_rows(served) == before
    assert await _late_rows(served, job.job_no) == 0


async def test_a_real_old_lease_leaves_evidence_up_to_the_limit(served) -> None:  # type: ignore[no-untyped-def]
    job, first = await running(served, retry_policy=job_pb2.RetryPolicy(max_attempts=3))
    await served.workers.Release(worker_pb2.ReleaseRequest(job_no=job.job_no, worker_token=first.worker_token))
    (second,) = await claim(served, job.job_type)
    assert second.worker_token != first.worker_token
    for _ in range(20):  # a zombie retrying in a loop
        assert await rpc_error(served.workers.Complete(complete_request(job.job_no, first.worker_token))) == LOST
    assert await _late_rows(served, job.job_no) == PER_WINDOW
    done = await served.workers.Complete(complete_request(job.job_no, second.worker_token))
    assert done.status == job_pb2.Job.READY


def test_the_limit_opens_again_after_its_window() -> None:
    limit = EvidenceLimit(per_window=2, window_s=10.0)
    assert [limit.allow(1, now=0.0) for _ in range(3)] == [True, True, False]
    assert limit.allow(1, now=9.9) is False
    assert limit.allow(1, now=10.0) is True


def test_the_limit_forgets_the_least_recent_job_past_its_capacity() -> None:
    limit = EvidenceLimit(per_window=1, window_s=60.0, capacity=2)
    assert (limit.allow(1, now=0.0), limit.allow(1, now=1.0)) == (True, False)
    limit.allow(2, now=1.0)
    limit.allow(3, now=1.0)  # the map holds 2 and 3 now
    assert limit.allow(1, now=2.0) is True
