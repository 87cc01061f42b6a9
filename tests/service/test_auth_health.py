"""Health and reflection, and the auth file: bearer tokens per role, queue grants, tenants.

Another tenant's job must answer exactly as a job that does not exist: same code, same
reason, same message. A worker of another tenant gets WORKER_LEASE_LOST like any stranger.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from served import start_server
from service_support import artifact, db_rows, rpc_failure, stop_server

from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

SERVICES = {
    "jobwire.v1.JobService",
    "jobwire.v1.ScheduleService",
    "jobwire.v1.WorkerService",
    "jobwire.v1.AdminService",
}


async def _serving(served, service: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Check until `service` reports SERVING (the first database ping runs just after start)."""
    health = health_pb2_grpc.HealthStub(served.channel)
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
            last = reply.status
        except grpc.aio.AioRpcError as exc:
            last = exc.code()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{service!r} not SERVING after {timeout}s: {last}")


async def test_health_reports_serving(served) -> None:  # type: ignore[no-untyped-def]
    for service in ("", *sorted(SERVICES)):
        await _serving(served, service)
    health = health_pb2_grpc.HealthStub(served.channel)
    exc = await rpc_failure(health.Check(health_pb2.HealthCheckRequest(service="no.such.Service")))
    assert exc.code() == grpc.StatusCode.NOT_FOUND


async def _reflected_services(channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...] = ()) -> set[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)

    async def requests() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    async for reply in stub.ServerReflectionInfo(requests(), metadata=metadata):
        return {s.name for s in reply.list_services_response.service}
    raise AssertionError("no reflection reply")


async def test_reflection_lists_the_services(served) -> None:  # type: ignore[no-untyped-def]
    names = await _reflected_services(served.channel)
    assert names >= SERVICES
    assert "grpc.health.v1.Health" in names


# -- auth ----------------------------------------------------------------------------------------


def _secret(name: str) -> str:
    return f"secret-{name}-7f3a9c"


TOKENS = {
    name: Token(_secret(name), tenant, role, queues)
    for name, (tenant, role, queues) in {
        "acme-client": ("acme", "client", ("*",)),
        "acme-worker": ("acme", "worker", ("*",)),
        "acme-admin": ("acme", "admin", ("*",)),
        "acme-bulk-client": ("acme", "client", ("bulk",)),
        "acme-bulk-worker": ("acme", "worker", ("bulk",)),
        "globex-client": ("globex", "client", ("*",)),
        "globex-worker": ("globex", "worker", ("*",)),
        "globex-admin": ("globex", "admin", ("*",)),
    }.items()
}


# An operator's one token for the job and the admin service (`roles = [...]`).
TOKENS["acme-operator"] = Token(_secret("acme-operator"), "acme", queues=("*",), roles=("client", "admin"))


def _auth(name: str) -> tuple[tuple[str, str], ...]:
    return TOKENS[name].metadata


@pytest.fixture
async def authed(database_url: str, tmp_path: Path) -> AsyncIterator[object]:
    served = await start_server(database_url, auth_file=write_auth_file(tmp_path / "auth.toml", TOKENS.values()))
    try:
        yield served
    finally:
        await stop_server(served)


def _claim(job_type: str = "frames", queues: tuple[str, ...] = ()) -> worker_pb2.ClaimRequest:
    return worker_pb2.ClaimRequest(
        worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name=job_type)], queues=list(queues)
    )


async def test_no_or_unknown_token_is_unauthenticated(authed) -> None:  # type: ignore[no-untyped-def]
    calls = [
        lambda md: authed.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=md),
        lambda md: authed.jobs.Get(job_pb2.GetRequest(job_no="PT-20260101-001"), metadata=md),
        lambda md: authed.workers.Claim(_claim(), metadata=md),
        lambda md: authed.admin.Inspect(admin_pb2.InspectRequest(), metadata=md),
    ]
    bad_metadata = [
        (),
        (("authorization", "Bearer "),),
        (("authorization", "Bearer not-a-token"),),
        (("authorization", _secret("acme-client")),),  # no scheme
        (("authorization", f"Basic {_secret('acme-client')}"),),
        (("authorization", f"Bearer {_secret('acme-client')}x"),),
    ]
    rows = await db_rows(authed)
    for call in calls:
        for md in bad_metadata:
            exc = await rpc_failure(call(md))
            assert (exc.code(), error_reason(exc)) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"), md
            # what to do next: send a token at all, or one the auth file holds
            known_scheme = bool(md) and md[0][1].startswith("Bearer ") and md[0][1] != "Bearer "
            assert ("auth file" if known_scheme else "authorization: Bearer") in (exc.details() or ""), md
    assert await db_rows(authed) == rows


RETRY = job_pb2.RetryRequest(job_no="PT-20260101-001")
HEARTBEAT = worker_pb2.HeartbeatRequest(worker_id="w1")


async def test_a_token_calls_only_its_roles_service(authed) -> None:  # type: ignore[no-untyped-def]
    denied = [  # the token, the role(s) the call needs, the call
        ("acme-client", "worker", lambda md: authed.workers.Claim(_claim(), metadata=md)),
        ("acme-client", "admin", lambda md: authed.admin.Inspect(admin_pb2.InspectRequest(), metadata=md)),
        ("acme-worker", "client", lambda md: authed.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=md)),
        ("acme-worker", "admin", lambda md: authed.admin.ListWorkers(admin_pb2.ListWorkersRequest(), metadata=md)),
        ("acme-worker", "admin or client", lambda md: authed.jobs.Retry(RETRY, metadata=md)),
        ("acme-admin", "client", lambda md: authed.jobs.ListJobs(job_pb2.ListJobsRequest(), metadata=md)),
        ("acme-admin", "worker", lambda md: authed.workers.Heartbeat(HEARTBEAT, metadata=md)),
    ]  # fmt: skip
    rows = await db_rows(authed)
    for token, needs, call in denied:
        exc = await rpc_failure(call(_auth(token)))
        assert (exc.code(), error_reason(exc)) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"), token
        has = token.removeprefix("acme-")  # what to do next: the role it needs, beside the one it has
        assert (exc.details() or "").endswith(f"needs a token with the {needs} role; this one has {has}"), exc.details()
    assert await db_rows(authed) == rows
    # and each works with its own
    await authed.jobs.ListJobs(job_pb2.ListJobsRequest(), metadata=_auth("acme-client"))
    await authed.workers.Claim(_claim(), metadata=_auth("acme-worker"))
    await authed.admin.Inspect(admin_pb2.InspectRequest(), metadata=_auth("acme-admin"))


async def test_a_token_with_several_roles_calls_each_roles_service(authed) -> None:  # type: ignore[no-untyped-def]
    operator = _auth("acme-operator")
    submitted = await authed.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=operator)
    listed = await authed.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=submitted.job.job_no), metadata=operator)
    assert [e.kind for e in listed.events] == ["SUBMITTED"]
    await authed.admin.Inspect(admin_pb2.InspectRequest(), metadata=operator)
    exc = await rpc_failure(authed.workers.Claim(_claim(), metadata=operator))  # not a worker
    assert (exc.code(), error_reason(exc)) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")


async def test_queue_grants_are_enforced(authed) -> None:  # type: ignore[no-untyped-def]
    bulk = _auth("acme-bulk-client")
    rows = await db_rows(authed)
    for queue in ("", "default", "urgent"):  # "" means default
        exc = await rpc_failure(
            authed.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", queue=queue), metadata=bulk)
        )
        assert (exc.code(), error_reason(exc)) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"), queue
        assert "its queues are bulk" in (exc.details() or ""), exc.details()  # which ones it may use
    exc = await rpc_failure(authed.workers.Claim(_claim(), metadata=_auth("acme-bulk-worker")))
    assert exc.code() == grpc.StatusCode.PERMISSION_DENIED
    exc = await rpc_failure(
        authed.workers.Claim(_claim(queues=("bulk", "default")), metadata=_auth("acme-bulk-worker"))
    )
    assert exc.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await db_rows(authed) == rows

    ok = await authed.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", queue="bulk"), metadata=bulk)
    assert ok.job.queue == "bulk"
    (lease,) = (await authed.workers.Claim(_claim(queues=("bulk",)), metadata=_auth("acme-bulk-worker"))).leases
    assert lease.job_no == ok.job.job_no


async def test_another_tenants_job_is_exactly_like_an_unknown_job(authed) -> None:  # type: ignore[no-untyped-def]
    acme, globex = _auth("acme-client"), _auth("globex-client")
    mine = (await authed.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", owner="ann"), metadata=acme)).job
    day = mine.job_no.split("-")[1]
    unknown = f"PT-{day}-999"

    async def answer(call) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
        exc = await rpc_failure(call)
        return exc.code(), error_reason(exc), exc.details()

    async def first(stream):  # type: ignore[no-untyped-def]
        try:
            return await stream.read()
        finally:
            stream.cancel()

    probes = {
        "Get": lambda n: authed.jobs.Get(job_pb2.GetRequest(job_no=n), metadata=globex),
        "Cancel": lambda n: authed.jobs.Cancel(job_pb2.CancelRequest(job_no=n), metadata=globex),
        "Retry": lambda n: authed.jobs.Retry(job_pb2.RetryRequest(job_no=n), metadata=globex),
        "WatchStatus": lambda n: first(authed.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=n), metadata=globex)),
        "ListEvents": lambda n: authed.admin.ListEvents(
            admin_pb2.ListEventsRequest(job_no=n), metadata=_auth("globex-admin")
        ),
        "Requeue": lambda n: authed.admin.Requeue(admin_pb2.RequeueRequest(job_no=n), metadata=_auth("globex-admin")),
    }
    rows = await db_rows(authed)
    for name, probe in probes.items():
        foreign, missing = await answer(probe(mine.job_no)), await answer(probe(unknown))
        assert foreign[0] == grpc.StatusCode.NOT_FOUND, (name, foreign)
        assert foreign == missing, f"{name} tells another tenant's job from an unknown one"
    assert await db_rows(authed) == rows
    listed = await authed.jobs.ListJobs(job_pb2.ListJobsRequest(owner="ann"), metadata=globex)
    assert list(listed.jobs) == []

    # another tenant's worker cannot touch it either, even holding the real token
    assert not (await authed.workers.Claim(_claim(), metadata=_auth("globex-worker"))).leases
    (lease,) = (await authed.workers.Claim(_claim(), metadata=_auth("acme-worker"))).leases
    exc = await rpc_failure(
        authed.workers.Complete(
            worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact()),
            metadata=_auth("globex-worker"),
        )
    )
    assert (exc.code(), error_reason(exc)) == (grpc.StatusCode.FAILED_PRECONDITION, "WORKER_LEASE_LOST")
    hb = await authed.workers.Heartbeat(
        worker_pb2.HeartbeatRequest(
            worker_id="w9", leases=[worker_pb2.LeaseRef(job_no=lease.job_no, worker_token=lease.worker_token)]
        ),
        metadata=_auth("globex-worker"),
    )
    assert hb.leases[0].state == worker_pb2.LeaseState.LOST
    found = await authed.admin.Inspect(admin_pb2.InspectRequest(), metadata=_auth("globex-admin"))
    assert list(found.findings) == []
    still = await authed.jobs.Get(job_pb2.GetRequest(job_no=mine.job_no), metadata=acme)
    assert still.status == job_pb2.Job.RUNNING


async def test_idempotency_keys_are_per_tenant(authed) -> None:  # type: ignore[no-untyped-def]
    request = job_pb2.SubmitRequest(job_type="frames", idempotency_key="order-1", payload=b"x")
    a = await authed.jobs.Submit(request, metadata=_auth("acme-client"))
    b = await authed.jobs.Submit(request, metadata=_auth("globex-client"))
    assert a.created and b.created  # two jobs (numbers are per tenant: they may read the same)
    await authed.jobs.Cancel(job_pb2.CancelRequest(job_no=a.job.job_no), metadata=_auth("acme-client"))
    theirs = await authed.jobs.Get(job_pb2.GetRequest(job_no=b.job.job_no), metadata=_auth("globex-client"))
    assert theirs.status == job_pb2.Job.QUEUED


async def test_health_and_reflection_need_no_token(authed) -> None:  # type: ignore[no-untyped-def]
    """Load balancers and grpcurl probe without credentials; they learn nothing about jobs."""
    for service in ("", "jobwire.v1.JobService"):
        await _serving(authed, service)
    assert await _reflected_services(authed.channel) >= SERVICES


async def test_health_watch_streams_serving(served) -> None:  # type: ignore[no-untyped-def]
    """Health.Watch writes with context.write(); the interceptors must not break it."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = health_pb2_grpc.HealthStub(served.channel)
    stream = stub.Watch(health_pb2.HealthCheckRequest(service="jobwire.v1.JobService"))
    seen = []
    while not seen or seen[-1] != health_pb2.HealthCheckResponse.SERVING:
        # SERVICE_UNKNOWN comes first when the first database ping has not landed yet.
        seen.append((await asyncio.wait_for(stream.read(), timeout=10)).status)
    assert set(seen) <= {health_pb2.HealthCheckResponse.SERVICE_UNKNOWN, health_pb2.HealthCheckResponse.SERVING}
    stream.cancel()
