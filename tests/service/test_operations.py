"""google.longrunning.Operations through a client none of us wrote: google-api-core's.

`OperationsClient` is synchronous over a plain grpc channel, so each call runs in a thread
(asyncio.to_thread) while this test's in-process aio server keeps serving. It has no
WaitOperation; `operation.from_gapic(...).result()` is how its users wait (by polling
GetOperation), and WaitOperation itself is called through the raw stub. Tenants acme and
globex share the server; a worker token is refused the whole service.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from auth_files import Token, write_auth_file
from google.api_core import exceptions, operation, operations_v1
from google.longrunning import operations_pb2
from google.rpc import code_pb2
from served import Served, start_server
from service_support import artifact, db_rows, duration, rpc_failure

from jobwire.v1 import job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(90)

ACME = Token("operations-acme-client-3c9", tenant="acme")
ACME_WORKER = Token("operations-acme-worker-3c9", tenant="acme", role="worker")
GLOBEX = Token("operations-globex-client-3c9", tenant="globex")
T = TypeVar("T")


@pytest.fixture
async def server(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    auth = write_auth_file(tmp_path / "auth.toml", [ACME, ACME_WORKER, GLOBEX])
    served = await start_server(database_url, auth_file=auth)
    try:
        yield served
    finally:
        await served.close()


@pytest.fixture
def client(server: Served) -> Iterator[operations_v1.OperationsClient]:
    channel = grpc.insecure_channel(server.target)
    try:
        yield operations_v1.OperationsClient(channel)
    finally:
        channel.close()


async def in_thread(call: Callable[..., T], *args: Any, who: Token = ACME, **kwargs: Any) -> T:
    """A blocking OperationsClient call, off the event loop that serves it."""
    return await asyncio.to_thread(call, *args, metadata=list(who.metadata), **kwargs)


async def submit(s: Served, who: Token = ACME, job_type: str = "frames") -> str:
    request = job_pb2.SubmitRequest(job_type=job_type, retry_policy=job_pb2.RetryPolicy(max_attempts=1))
    return (await s.jobs.Submit(request, metadata=who.metadata)).job.job_no


async def claim(s: Served, job_no: str, job_type: str = "frames") -> dict[str, str]:
    request = worker_pb2.ClaimRequest(worker_id="w", job_types=[worker_pb2.JobTypeSpec(name=job_type)], max_jobs=1)
    (lease,) = (await s.workers.Claim(request, metadata=ACME_WORKER.metadata)).leases
    assert lease.job_no == job_no
    return {"job_no": lease.job_no, "worker_token": lease.worker_token}


async def ready(s: Served, job_no: str) -> None:
    ref = await claim(s, job_no)
    await s.workers.Complete(worker_pb2.CompleteRequest(**ref, result=artifact()), metadata=ACME_WORKER.metadata)


async def failed(s: Served, job_no: str, category: int, message: str) -> None:
    ref = await claim(s, job_no)
    request = worker_pb2.FailRequest(**ref, category=category, message=message, detail="a trace nobody sees")
    await s.workers.Fail(request, metadata=ACME_WORKER.metadata)


def job_of(op: operations_pb2.Operation) -> job_pb2.Job:
    job = job_pb2.Job()
    assert op.metadata.Unpack(job)
    return job


async def test_a_ready_job_is_done_with_its_artifact_as_the_response(server: Served, client: Any) -> None:
    job_no = await submit(server)
    pending = await in_thread(client.get_operation, f"operations/{job_no}")
    assert (pending.name, pending.done, job_of(pending).status) == (f"operations/{job_no}", False, job_pb2.Job.QUEUED)

    await ready(server, job_no)
    op = await in_thread(client.get_operation, f"operations/{job_no}")
    assert op.done and op.WhichOneof("result") == "response"
    result = job_pb2.Artifact()
    assert op.response.Unpack(result)
    assert result == artifact()
    assert job_of(op).status == job_pb2.Job.READY

    # the way google-api-core's users wait: a future over GetOperation
    future = operation.from_gapic(
        pending,
        client,
        job_pb2.Artifact,
        metadata_type=job_pb2.Job,
        grpc_metadata=list(ACME.metadata),
    )
    assert await asyncio.to_thread(future.result, timeout=30) == artifact()
    assert future.metadata.job_no == job_no


@pytest.mark.parametrize(
    ("category", "code"),
    [
        (job_pb2.JobError.INPUT_INVALID, code_pb2.INVALID_ARGUMENT),
        (job_pb2.JobError.TIMEOUT, code_pb2.DEADLINE_EXCEEDED),
        (job_pb2.JobError.PROCESSING_ERROR, code_pb2.UNKNOWN),
    ],
)
async def test_a_failed_job_is_done_with_its_error(server: Served, client: Any, category: int, code: int) -> None:
    job_no = await submit(server)
    await failed(server, job_no, category, "the frame count is not a number")
    op = await in_thread(client.get_operation, f"operations/{job_no}")
    assert op.done and op.WhichOneof("result") == "error"
    assert (op.error.code, op.error.message) == (code, "the frame count is not a number")
    assert job_of(op).status == job_pb2.Job.FAILED


async def test_cancel_operation_cancels_the_job_and_its_error_is_cancelled(server: Served, client: Any) -> None:
    job_no = await submit(server)
    await in_thread(client.cancel_operation, f"operations/{job_no}")
    op = await in_thread(client.get_operation, f"operations/{job_no}")
    assert op.done and op.error.code == code_pb2.CANCELLED
    assert job_of(op).status == job_pb2.Job.CANCELLED
    job = await server.jobs.Get(job_pb2.GetRequest(job_no=job_no), metadata=ACME.metadata)
    assert job.status == job_pb2.Job.CANCELLED


async def list_names(client: Any, collection: str, who: Token = ACME) -> list[str]:
    """Every operation through the client's pager; it fetches the pages as it is iterated."""

    def read() -> list[str]:
        return [op.name for op in client.list_operations(collection, "", metadata=list(who.metadata))]

    return await asyncio.to_thread(read)


async def test_list_operations_pages_through_the_tenants_jobs(server: Served, client: Any) -> None:
    mine = [await submit(server) for _ in range(5)]
    await submit(server, GLOBEX)
    expected = sorted(f"operations/{no}" for no in mine)
    for collection in ("operations", ""):
        assert sorted(await list_names(client, collection)) == expected
    # OperationsClient has no page_size: the paging itself, through the stub
    names: list[str] = []
    token = ""
    for _ in range(10):
        request = operations_pb2.ListOperationsRequest(name="operations", page_size=2, page_token=token)
        page = await server.operations.ListOperations(request, metadata=ACME.metadata)
        assert len(page.operations) <= 2
        names += [op.name for op in page.operations]
        token = page.next_page_token
        if not token:
            break
    assert sorted(names) == expected


async def test_wait_operation_returns_when_the_job_ends(server: Served) -> None:
    job_no = await submit(server)
    request = operations_pb2.WaitOperationRequest(name=f"operations/{job_no}", timeout=duration(60))
    waiting = asyncio.ensure_future(server.operations.WaitOperation(request, metadata=ACME.metadata))
    # Whether the wait subscribed before the job ended or not, it answers with the end.
    await ready(server, job_no)
    op = await waiting
    assert op.done and op.WhichOneof("result") == "response"


async def test_wait_operation_answers_the_job_as_it_is_when_its_timeout_passes(server: Served) -> None:
    job_no = await submit(server)
    short = operations_pb2.WaitOperationRequest(name=f"operations/{job_no}", timeout=duration(0.2))
    op = await server.operations.WaitOperation(short, metadata=ACME.metadata)
    assert not op.done and job_of(op).status == job_pb2.Job.QUEUED
    # No timeout is the 60 s default, yet never past the caller's own deadline: an answer, not DEADLINE_EXCEEDED.
    unset = operations_pb2.WaitOperationRequest(name=f"operations/{job_no}")
    op = await server.operations.WaitOperation(unset, metadata=ACME.metadata, timeout=5)
    assert not op.done


async def test_another_tenants_operation_is_not_found(server: Served, client: Any) -> None:
    job_no = await submit(server)
    await ready(server, job_no)
    name = f"operations/{job_no}"
    for call in (client.get_operation, client.cancel_operation, client.delete_operation):
        with pytest.raises(exceptions.NotFound):
            await in_thread(call, name, who=GLOBEX)
    wait = operations_pb2.WaitOperationRequest(name=name, timeout=duration(1))
    refused = await rpc_failure(server.operations.WaitOperation(wait, metadata=GLOBEX.metadata))
    assert refused.code() == grpc.StatusCode.NOT_FOUND
    assert (await in_thread(client.get_operation, name)).done  # still there for acme


async def test_a_worker_token_may_not_use_operations(server: Served, client: Any) -> None:
    job_no = await submit(server)
    with pytest.raises(exceptions.PermissionDenied):
        await in_thread(client.get_operation, f"operations/{job_no}", who=ACME_WORKER)
    with pytest.raises(exceptions.PermissionDenied):
        await list_names(client, "operations", who=ACME_WORKER)


async def test_delete_refuses_an_unfinished_job_and_removes_a_finished_one(server: Served, client: Any) -> None:
    job_no = await submit(server)
    await claim(server, job_no)
    name = f"operations/{job_no}"
    with pytest.raises(exceptions.FailedPrecondition):
        await in_thread(client.delete_operation, name)
    assert job_of(await in_thread(client.get_operation, name)).status == job_pb2.Job.RUNNING

    done_no = await submit(server)
    await ready(server, done_no)
    before = await db_rows(server)
    await in_thread(client.delete_operation, f"operations/{done_no}")
    for again in (client.get_operation, client.delete_operation):
        with pytest.raises(exceptions.NotFound):
            await in_thread(again, f"operations/{done_no}")
    after = await db_rows(server)
    # the job, its artifact and its events (submitted, claimed, completed at least) are gone
    assert (before["job"] - after["job"], before["artifact"] - after["artifact"]) == (1, 1)
    assert before["job_event"] - after["job_event"] >= 3
    assert job_of(await in_thread(client.get_operation, name)).status == job_pb2.Job.RUNNING
