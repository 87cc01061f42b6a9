"""An admin forces a Retry of a FAILED job whose error is not retryable: the job is queued
again, the trail names who forced it; nobody else may force one. The forced retries and the
refusal of a job not FAILED are the store's guarded updates, so they run on SQLite and
MariaDB; who may force (auth, tenants) is the server's, on SQLite."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from served import Served, start_server
from service_support import stop_server

from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(90)

CLIENT = Token("secret-force-client", "acme", "client")
WORKER = Token("secret-force-worker", "acme", "worker")
ALICE = Token("secret-force-alice", "acme", roles=("client", "admin"), name="alice")  # an operator's console
ADMIN = Token("secret-force-admin", "acme", "admin")  # no name: the trail shows its digest's head
OTHER = Token("secret-force-globex", "globex", roles=("client", "admin"), name="bob")


@pytest.fixture
async def s(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    auth = write_auth_file(tmp_path / "auth.toml", [CLIENT, WORKER, ALICE, ADMIN, OTHER])
    served = await start_server(database_url, auth_file=auth)
    yield served
    await stop_server(served)


async def failed_for_good(s: Served) -> job_pb2.Job:
    """A job its worker failed as INPUT_INVALID, not retryable, with attempts left."""
    submit = job_pb2.SubmitRequest(job_type="import", retry_policy=job_pb2.RetryPolicy(max_attempts=3))
    job = (await s.jobs.Submit(submit, metadata=CLIENT.metadata)).job
    (lease,) = await claim(s)
    fail = worker_pb2.FailRequest(
        job_no=job.job_no, worker_token=lease.worker_token, category=job_pb2.JobError.INPUT_INVALID,
        message="column 3 is not a date", retryable=False,
    )  # fmt: skip
    failed = await s.workers.Fail(fail, metadata=WORKER.metadata)
    assert (failed.status, failed.error.retryable) == (job_pb2.Job.FAILED, False)
    return failed


async def claim(s: Served) -> list[worker_pb2.Lease]:
    request = worker_pb2.ClaimRequest(worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name="import")])
    return list((await s.workers.Claim(request, metadata=WORKER.metadata)).leases)


async def retry(s: Served, job_no: str, token: Token, *, force: bool) -> job_pb2.Job:
    return await s.jobs.Retry(job_pb2.RetryRequest(job_no=job_no, force=force), metadata=token.metadata)


async def refused(s: Served, job_no: str, token: Token, *, force: bool) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await retry(s, job_no, token, force=force)
    return caught.value


async def retried_event(s: Served, job_no: str) -> admin_pb2.JobEvent:
    reply = await s.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job_no), metadata=ADMIN.metadata)
    (event,) = [e for e in reply.events if e.kind == "RETRIED"]
    return event


@pytest.mark.both_databases  # FAILED -> QUEUED, forced, then claimed as attempt 2
async def test_an_admin_forces_a_not_retryable_job_back_to_the_queue_and_the_trail_names_them(s: Served) -> None:
    failed = await failed_for_good(s)
    plain = await refused(s, failed.job_no, ALICE, force=False)  # without force, even an admin is told no
    assert (plain.code(), error_reason(plain)) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_RETRYABLE")
    assert "an admin may force a retry (jobctl retry --force)" in (plain.details() or "")

    queued = await retry(s, failed.job_no, ALICE, force=True)
    assert (queued.status, queued.version) == (job_pb2.Job.QUEUED, failed.version + 1)
    assert list(queued.display.actions) == [job_pb2.Display.VIEW, job_pb2.Display.CANCEL]
    event = await retried_event(s, failed.job_no)
    assert (event.from_status, event.to_status) == (job_pb2.Job.FAILED, job_pb2.Job.QUEUED)
    assert event.detail == "forced by admin alice: error was INPUT_INVALID"
    (lease,) = await claim(s)
    assert (lease.job_no, lease.attempt) == (failed.job_no, 2)


@pytest.mark.both_databases  # the forced retry's event, as the store records it
async def test_a_token_without_a_name_is_named_by_its_digest(s: Served) -> None:
    failed = await failed_for_good(s)
    assert (await retry(s, failed.job_no, ADMIN, force=True)).status == job_pb2.Job.QUEUED
    head = hashlib.sha256(ADMIN.secret.encode()).hexdigest()[:8]
    assert (await retried_event(s, failed.job_no)).detail == f"forced by admin {head}: error was INPUT_INVALID"


async def test_a_client_token_may_not_force_and_nothing_changes(s: Served) -> None:
    failed = await failed_for_good(s)
    denied = await refused(s, failed.job_no, CLIENT, force=True)
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "only a token with the admin role may force a retry" in (denied.details() or "")
    plain = await refused(s, failed.job_no, CLIENT, force=False)
    assert error_reason(plain) == "NOT_RETRYABLE" and "jobctl retry --force" in (plain.details() or "")
    seen = await s.jobs.Get(job_pb2.GetRequest(job_no=failed.job_no), metadata=CLIENT.metadata)
    assert (seen.status, seen.version) == (job_pb2.Job.FAILED, failed.version)


async def test_an_admin_of_another_tenant_finds_no_such_job(s: Served) -> None:
    failed = await failed_for_good(s)
    assert (await refused(s, failed.job_no, OTHER, force=True)).code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.both_databases  # the store refuses the change from any status but FAILED
async def test_force_retries_only_a_failed_job(s: Served) -> None:
    queued = (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="import"), metadata=CLIENT.metadata)).job
    again = await refused(s, queued.job_no, ALICE, force=True)
    assert (again.code(), error_reason(again)) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_RETRYABLE")
