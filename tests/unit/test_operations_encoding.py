"""A job as a google.longrunning Operation, and how long WaitOperation may wait: values only."""

from __future__ import annotations

import pytest
from google.longrunning import operations_pb2
from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2

from jobwire.domain.errors import InvalidArgument
from jobwire.jobapi.operations_servicer import MAX_WAIT_S, wait_seconds
from jobwire.rpc import operations as ops
from jobwire.v1 import job_pb2

NO = "PT-20261201-007"


def test_every_error_category_has_a_code_and_none_is_ok() -> None:
    categories = set(job_pb2.JobError.Category.values())
    assert set(ops.ERROR_CODES) == categories
    assert code_pb2.OK not in ops.ERROR_CODES.values()


@pytest.mark.parametrize("status", [job_pb2.Job.QUEUED, job_pb2.Job.RUNNING, job_pb2.Job.WAITING])
def test_an_unfinished_job_is_not_done_and_has_no_result(status: int) -> None:
    op = ops.operation(job_pb2.Job(job_no=NO, status=status))  # type: ignore[arg-type]
    assert (op.name, op.done, op.WhichOneof("result")) == (f"operations/{NO}", False, None)


def test_a_failed_jobs_error_is_its_plain_message_under_the_mapped_code() -> None:
    error = job_pb2.JobError(category=job_pb2.JobError.TIMEOUT, message="ran out of time", stage="RENDER")
    op = ops.operation(job_pb2.Job(job_no=NO, status=job_pb2.Job.FAILED, error=error))
    assert (op.done, op.error.code, op.error.message) == (True, code_pb2.DEADLINE_EXCEEDED, "ran out of time")


@pytest.mark.parametrize("name", ["", NO, "operations/", "operations/x", f"operations/{NO}/", f"jobs/{NO}"])
def test_a_malformed_name_is_refused_as_name(name: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        ops.job_no_of(name)
    assert refused.value.field == "name"


def wait(seconds: int | None = None, nanos: int = 0) -> operations_pb2.WaitOperationRequest:
    request = operations_pb2.WaitOperationRequest(name=f"operations/{NO}")
    if seconds is not None:
        request.timeout.CopyFrom(Duration(seconds=seconds, nanos=nanos))
    return request


def test_wait_is_the_default_unset_capped_above_and_within_the_deadline() -> None:
    assert wait_seconds(wait(), None) == MAX_WAIT_S
    assert wait_seconds(wait(3600), None) == MAX_WAIT_S
    assert wait_seconds(wait(0, 500_000_000), None) == 0.5
    assert wait_seconds(wait(0), None) == 0.0
    assert wait_seconds(wait(30), 10.0) < 10.0
    assert wait_seconds(wait(), 0.1) == 0.0  # a deadline already (nearly) past: answer at once


@pytest.mark.parametrize(("seconds", "nanos"), [(-1, 0), (0, -1), (0, 1_000_000_000), (2**63 - 1, 0), (10**14, 0)])
def test_a_bad_timeout_is_refused_as_timeout(seconds: int, nanos: int) -> None:
    with pytest.raises(InvalidArgument) as refused:
        wait_seconds(wait(seconds, nanos), None)
    assert refused.value.field == "timeout"
