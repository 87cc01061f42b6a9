"""ListJobs by queue and by labels (the console's job search): each narrows the list, with the
other filters and across pages, and a queue the token may not use is refused."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from served import Served
from service_support import rpc_error

from jobwire.v1 import job_pb2

pytestmark = pytest.mark.timeout(60)
CLIENT = Token("acme-client", tenant="acme")
EXPORTS = Token("acme-exports", tenant="acme", queues=("exports",))


@pytest.fixture
async def served(serve: Callable[..., Awaitable[Served]], tmp_path: Path) -> Served:
    return await serve(auth_file=write_auth_file(tmp_path / "auth.toml", [CLIENT, EXPORTS]))


async def _submit(s: Served, queue: str, labels: dict[str, str], job_type: str = "frames") -> str:
    request = job_pb2.SubmitRequest(job_type=job_type, queue=queue, labels=labels)
    return (await s.jobs.Submit(request, metadata=CLIENT.metadata)).job.job_no


async def _listed(s: Served, token: Token = CLIENT, **fields: object) -> list[str]:
    """Every page of the list, newest first."""
    found: list[str] = []
    request = job_pb2.ListJobsRequest(page_size=2, **fields)  # type: ignore[arg-type]
    while True:
        reply = await s.jobs.ListJobs(request, metadata=token.metadata)
        found += [job.job_no for job in reply.jobs]
        if not reply.next_page_token:
            return found
        request.page_token = reply.next_page_token


async def test_queue_and_labels_narrow_the_list(served: Served) -> None:
    a = await _submit(served, "exports", {"team": "red", "env": "prod"})
    b = await _submit(served, "exports", {"team": "blue"})
    c = await _submit(served, "mail", {"team": "red"})
    d = await _submit(served, "exports", {"team": "redder", "note": 'say "team": "red"'})
    e = await _submit(served, "exports", {"team": "red"}, job_type="report")
    assert await _listed(served, queue="exports") == [e, d, b, a]
    assert await _listed(served, labels={"team": "red"}) == [e, c, a]  # not "redder", nor the quote in a value
    assert await _listed(served, queue="exports", labels={"team": "red"}) == [e, a]
    assert await _listed(served, labels={"team": "red", "env": "prod"}) == [a]
    assert await _listed(served, queue="exports", job_type="frames", labels={"team": "red"}) == [a]
    assert await _listed(served, labels={"note": 'say "team": "red"'}) == [d]
    assert await _listed(served, queue="nothing-here") == []


async def test_a_queue_the_token_may_not_use_is_refused(served: Served) -> None:
    await _submit(served, "mail", {})
    mine = await _submit(served, "exports", {})
    assert await _listed(served, EXPORTS, queue="exports") == [mine]
    code, _ = await rpc_error(served.jobs.ListJobs(job_pb2.ListJobsRequest(queue="mail"), metadata=EXPORTS.metadata))
    assert code == grpc.StatusCode.PERMISSION_DENIED


async def test_a_batch_lists_its_own_jobs_newest_first(served: Served) -> None:
    batch = await served.jobs.SubmitBatch(
        job_pb2.SubmitBatchRequest(jobs=[job_pb2.SubmitRequest(job_type="frames", queue="exports")] * 5),
        metadata=CLIENT.metadata,
    )
    await _submit(served, "exports", {})  # not the batch's
    made = [job.job_no for job in batch.jobs]
    assert await _listed(served, batch_id=batch.batch_id) == made[::-1]
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=made[1]), metadata=CLIENT.metadata)
    assert await _listed(served, batch_id=batch.batch_id, statuses=[job_pb2.Job.CANCELLED]) == [made[1]]
    assert await _listed(served, batch_id="B-" + "0" * 20) == []  # no such batch
