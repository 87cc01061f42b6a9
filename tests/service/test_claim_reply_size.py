"""A Claim leases no more jobs than its reply can carry.

Security review, finding 1: four jobs with 1 MiB payloads and Claim(max_jobs=4) (the SDK's
default batch) answered RESOURCE_EXHAUSTED "Sent message larger than max" after the four
leases committed; the jobs stayed RUNNING until they stalled, and each retry stranded
another batch.
"""

from __future__ import annotations

import pytest
from service_support import claim, get, submit

from jobwire.domain.limits import MAX_GRPC_MESSAGE_BYTES, MAX_PAYLOAD_BYTES
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(60)


async def test_big_payloads_are_leased_as_many_as_fit_and_the_rest_stay_queued(served) -> None:  # type: ignore[no-untyped-def]
    jobs = [await submit(served, "big", payload=bytes([i]) * MAX_PAYLOAD_BYTES) for i in range(4)]
    first = await claim(served, "big", max_jobs=4)
    reply = worker_pb2.ClaimResponse(leases=first)
    assert 1 <= len(first) < 4 and reply.ByteSize() <= MAX_GRPC_MESSAGE_BYTES
    assert [lease.payload[:1] for lease in first] == [bytes([i]) for i in range(len(first))]  # oldest first
    left = [j.job_no for j in jobs[len(first) :]]
    assert [(await get(served, n)).status for n in left] == [job_pb2.Job.QUEUED] * len(left)
    rest = await claim(served, "big", max_jobs=4)
    assert [lease.job_no for lease in rest] == left
    assert await claim(served, "big", max_jobs=4) == []
