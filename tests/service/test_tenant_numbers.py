"""Job numbers per tenant (issue 22), over real gRPC on SQLite and MariaDB.

Each tenant has its own day sequence, so one tenant's numbers say nothing of another's
traffic, and two tenants have the same numbers: a job is named by its tenant and number.
Two tenants, acme and globex, each with a client, a worker and an admin token, submit
side by side; every call that names a number acts on the caller's own job of that number.
Job numbering reads a wall clock the test holds still (tests/service/wall_clock.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from google.longrunning import operations_pb2
from served import Served, eventually, start_server
from service_support import artifact, rpc_failure
from wall_clock import Clock, numbering_clock
from watch_support import next_job

from jobwire.client.status import error_reason
from jobwire.db import dependencies
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(120)]  # job numbers drawn from the database

Q, RUNNING, READY, FAILED, CANCELLED = (
    job_pb2.Job.QUEUED, job_pb2.Job.RUNNING, job_pb2.Job.READY, job_pb2.Job.FAILED, job_pb2.Job.CANCELLED,
)  # fmt: skip
NOON = datetime(2031, 6, 1, 12, tzinfo=UTC)
ROLES = ("client", "worker", "admin")


def token(tenant: str, role: str) -> Token:
    return Token(f"numbers-{tenant}-{role}", tenant=tenant, role=role)


@dataclass(frozen=True)
class Tenant:
    """One tenant's tokens, and the calls the tests make with them."""

    name: str
    s: Served

    @property
    def client(self) -> Token:
        return token(self.name, "client")

    @property
    def worker(self) -> Token:
        return token(self.name, "worker")

    @property
    def admin(self) -> Token:
        return token(self.name, "admin")

    async def submit(self, queue: str = "", **fields: object) -> job_pb2.Job:
        request = job_pb2.SubmitRequest(job_type="frames", queue=queue, labels={"of": self.name}, **fields)  # type: ignore[arg-type]
        return (await self.s.jobs.Submit(request, metadata=self.client.metadata)).job

    async def get(self, job_no: str) -> job_pb2.Job:
        return await self.s.jobs.Get(job_pb2.GetRequest(job_no=job_no), metadata=self.client.metadata)

    async def claim(self, max_jobs: int = 1) -> list[worker_pb2.Lease]:
        request = worker_pb2.ClaimRequest(
            worker_id=f"{self.name}-w", job_types=[worker_pb2.JobTypeSpec(name="frames")], max_jobs=max_jobs
        )
        return list((await self.s.workers.Claim(request, metadata=self.worker.metadata)).leases)

    async def report(self, lease: worker_pb2.Lease, processed: int) -> None:
        request = worker_pb2.ReportStageRequest(
            job_no=lease.job_no, worker_token=lease.worker_token, stage="PROCESSING", processed_units=processed,
            total_units=10,
        )  # fmt: skip
        await self.s.workers.ReportStage(request, metadata=self.worker.metadata)

    async def complete(self, lease: worker_pb2.Lease, data: bytes | None = None) -> job_pb2.Job:
        request = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token)
        if data is None:
            request.result.CopyFrom(artifact())
        else:
            request.inline_result = data
        return await self.s.workers.Complete(request, metadata=self.worker.metadata)

    async def fail(self, lease: worker_pb2.Lease) -> None:
        request = worker_pb2.FailRequest(
            job_no=lease.job_no, worker_token=lease.worker_token, category=job_pb2.JobError.INPUT_INVALID,
            message="bad input", retryable=False,
        )  # fmt: skip
        await self.s.workers.Fail(request, metadata=self.worker.metadata)

    async def events(self, job_no: str) -> list[admin_pb2.JobEvent]:
        request = admin_pb2.ListEventsRequest(job_no=job_no, page_size=500)
        return list((await self.s.admin.ListEvents(request, metadata=self.admin.metadata)).events)

    async def kinds(self, job_no: str) -> list[str]:
        return [e.kind for e in await self.events(job_no)]

    async def result(self, job_no: str) -> bytes:
        request = job_pb2.GetResultRequest(job_no=job_no)
        return b"".join([c.data async for c in self.s.jobs.GetResult(request, metadata=self.client.metadata)])


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return numbering_clock(monkeypatch, NOON)


@pytest.fixture
async def tenants(database_url: str, tmp_path: Path, clock: Clock) -> AsyncIterator[tuple[Tenant, Tenant]]:
    auth = write_auth_file(tmp_path / "auth.toml", [token(name, role) for name in ("acme", "globex") for role in ROLES])
    served = await start_server(database_url, auth_file=auth, reaper_interval_seconds=0.1)  # the sweep: often
    try:
        yield Tenant("acme", served), Tenant("globex", served)
    finally:
        await served.close()


def number(clock: Clock, seq: int) -> str:
    return f"PT-{clock.day}-{seq:03d}"


async def test_each_tenants_numbers_start_at_001_and_stay_dense_whatever_the_other_submits(
    tenants: tuple[Tenant, Tenant], clock: Clock
) -> None:
    acme, globex = tenants
    mine: dict[str, list[str]] = {"acme": [], "globex": []}
    for who in (acme, globex, globex, globex, acme, globex, acme, globex, globex):
        mine[who.name].append((await who.submit()).job_no)
    batch = [job_pb2.SubmitRequest(job_type="frames") for _ in range(3)]
    made = await globex.s.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=batch), metadata=globex.client.metadata)
    mine["globex"] += [job.job_no for job in made.jobs]
    mine["acme"].append((await acme.submit()).job_no)  # after globex's batch: acme's next, all the same
    assert mine["acme"] == [number(clock, n) for n in (1, 2, 3, 4)]
    assert mine["globex"] == [number(clock, n) for n in range(1, 10)]


async def test_a_number_both_tenants_have_names_each_tenants_own_job_in_every_call(
    tenants: tuple[Tenant, Tenant], clock: Clock
) -> None:
    acme, globex = tenants
    ours, theirs = await acme.submit(), await globex.submit()
    x = ours.job_no
    assert theirs.job_no == x == number(clock, 1)
    (a_lease,) = await acme.claim()
    (g_lease,) = await globex.claim()
    assert (a_lease.job_no, a_lease.tenant, g_lease.job_no, g_lease.tenant) == (x, "acme", x, "globex")

    # Each worker reports its own job of that number, the two calls together (one transaction, as it happens).
    await asyncio.gather(acme.report(a_lease, 3), globex.report(g_lease, 7))
    assert (await acme.get(x)).progress.processed_units == 3
    assert (await globex.get(x)).progress.processed_units == 7
    # A worker holding the other tenant's token of that number has no lease of its own job: nothing written.
    crossed = worker_pb2.ReportStageRequest(
        job_no=x, worker_token=g_lease.worker_token, stage="PROCESSING", processed_units=9
    )
    refused = await rpc_failure(acme.s.workers.ReportStage(crossed, metadata=acme.worker.metadata))
    assert error_reason(refused) == "WORKER_LEASE_LOST"
    assert [(await t.get(x)).version for t in (acme, globex)] == [ours.version + 2, theirs.version + 2]

    await acme.complete(a_lease, b"acme's frames")
    cancelled = await globex.s.jobs.Cancel(job_pb2.CancelRequest(job_no=x), metadata=globex.client.metadata)
    assert cancelled.status == job_pb2.Job.CANCEL_REQUESTED and cancelled.labels["of"] == "globex"
    a_job, g_job = await acme.get(x), await globex.get(x)
    assert (a_job.status, a_job.labels["of"]) == (READY, "acme")
    assert (g_job.status, g_job.labels["of"]) == (job_pb2.Job.CANCEL_REQUESTED, "globex")

    assert await acme.result(x) == b"acme's frames"
    not_yet = await rpc_failure(globex.result(x))
    assert error_reason(not_yet) == "RESULT_NOT_AVAILABLE"

    assert "COMPLETED" in await acme.kinds(x) and "CANCEL_REQUESTED" not in await acme.kinds(x)
    assert "CANCEL_REQUESTED" in await globex.kinds(x) and "COMPLETED" not in await globex.kinds(x)

    for who, status in ((acme, READY), (globex, job_pb2.Job.CANCEL_REQUESTED)):
        stream = who.s.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=x), metadata=who.client.metadata)
        first = await next_job(stream)
        assert first is not None and (first.status, first.labels["of"]) == (status, who.name)
        stream.cancel()
        op = await who.s.operations.GetOperation(
            operations_pb2.GetOperationRequest(name=f"operations/{x}"), metadata=who.client.metadata
        )
        assert op.done == (who is acme)

    # globex's worker confirms the cancel of its job; acme's stays as it is.
    await globex.s.workers.ConfirmCancel(
        worker_pb2.ConfirmCancelRequest(job_no=x, worker_token=g_lease.worker_token), metadata=globex.worker.metadata
    )
    assert [(await t.get(x)).status for t in (acme, globex)] == [READY, CANCELLED]


async def test_dependencies_and_batches_resolve_numbers_within_the_tenant(tenants: tuple[Tenant, Tenant]) -> None:
    acme, globex = tenants
    a1 = await acme.submit(retry_policy=job_pb2.RetryPolicy(max_attempts=1))
    g1 = await globex.submit()
    g2 = await globex.submit()
    assert a1.job_no == g1.job_no
    unknown = await rpc_failure(acme.submit(depends_on=[g2.job_no]))  # acme has no job of that number
    assert unknown.code() == grpc.StatusCode.INVALID_ARGUMENT and (unknown.details() or "").startswith("depends_on:")

    a2 = await acme.submit(depends_on=[a1.job_no])
    g3 = await globex.submit(depends_on=[g1.job_no])
    batch = [job_pb2.SubmitRequest(job_type="frames", queue="parked", depends_on=[g1.job_no]) for _ in range(2)]
    g_batch = await globex.s.jobs.SubmitBatch(
        job_pb2.SubmitBatchRequest(jobs=batch), metadata=globex.client.metadata
    )  # fmt: skip
    assert [j.status for j in (a2, g3, *g_batch.jobs)] == [Q] * 4

    # globex's first job ends READY: its dependents run; acme's job of that number still waits.
    (g_lease,) = await globex.claim()
    assert g_lease.job_no == g1.job_no
    await globex.complete(g_lease)
    assert [lease.job_no for lease in await globex.claim(max_jobs=5)] == [g2.job_no, g3.job_no]
    assert (await acme.get(a2.job_no)).display.detail == f"Queued · Waiting for {a1.job_no}"
    (lease,) = await acme.claim(max_jobs=5)
    assert lease.job_no == a1.job_no

    # acme's ends FAILED: its dependent is cancelled with it; globex's jobs of those numbers are not.
    await acme.fail(lease)
    assert (await acme.get(a2.job_no)).status == CANCELLED
    last = (await acme.events(a2.job_no))[-1]
    assert last.kind == "DEPENDENCY_FAILED" and f"{a1.job_no} ended FAILED" in last.detail
    assert [(await globex.get(j.job_no)).status for j in (g1, g2, g3)] == [READY, RUNNING, RUNNING]

    # Batches: each tenant's batch counts and cancels its own jobs only.
    a_batch = await acme.s.jobs.SubmitBatch(
        job_pb2.SubmitBatchRequest(jobs=[job_pb2.SubmitRequest(job_type="frames", queue="parked")] * 2),
        metadata=acme.client.metadata,
    )
    shared = {j.job_no for j in a_batch.jobs} & {j.job_no for j in g_batch.jobs}
    assert shared, "the two batches' jobs have numbers in common"
    await acme.s.jobs.CancelBatch(job_pb2.CancelBatchRequest(batch_id=a_batch.batch_id), metadata=acme.client.metadata)
    assert [(await acme.get(j.job_no)).status for j in a_batch.jobs] == [CANCELLED] * 2
    assert [(await globex.get(j.job_no)).status for j in g_batch.jobs] == [Q] * 2


async def test_the_sweep_settles_each_tenants_chain_of_the_same_numbers(tenants: tuple[Tenant, Tenant]) -> None:
    """Chains longer than one transaction follows, one per tenant, numbered alike: what the
    ending leaves (jobwire.runtime.settling) ends each down to its last job, and only its own."""
    acme, globex = tenants
    chains: dict[str, list[str]] = {}
    for who in (acme, globex):
        chain = [(await who.submit(queue="parked")).job_no]
        for _ in range(dependencies.MAX_ROUNDS + 3):
            chain.append((await who.submit(queue="parked", depends_on=[chain[-1]])).job_no)
        chains[who.name] = chain
    assert chains["acme"] == chains["globex"]
    await acme.s.jobs.Cancel(job_pb2.CancelRequest(job_no=chains["acme"][0]), metadata=acme.client.metadata)
    await globex.s.jobs.Cancel(job_pb2.CancelRequest(job_no=chains["globex"][0]), metadata=globex.client.metadata)
    for who in (acme, globex):
        last = chains[who.name][-1]

        async def ended(who: Tenant = who, last: str = last) -> job_pb2.Job | None:
            job = await who.get(last)
            return job if job.status == CANCELLED else None

        assert (await eventually(ended, what=f"{who.name}'s chain cancelled")).labels["of"] == who.name
