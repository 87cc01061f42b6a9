"""Fair tenants (issue 14): a shared fleet's workers take turns between tenants, over real gRPC.

A worker token with `tenant = "*"` serves its queue names for every tenant. Its claims go
round-robin across the tenants with runnable jobs (then priority, then age inside each), so
tenant A's 2,000 queued jobs do not put tenant B's one job behind them. Every other rule
holds per job's own tenant: its queue limits, its token, its evidence.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from google.protobuf.duration_pb2 import Duration
from processes import start_server_process
from served import Served, eventually, start_server
from service_support import LONG_WAIT_S, Stubs, open_stubs, until_waiting, woken

from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(120)
QUEUE = "exports"
TENANTS = ("a", "b", "c")
FLEET = Token("fleet-worker", tenant="*", role="worker", queues=(QUEUE,))


@dataclass
class Fleet:
    served: Served
    clients: dict[str, Token]
    admins: dict[str, Token]
    workers: dict[str, Token]  # each tenant's own workers

    async def submit(self, tenant: str, priority: int = 0) -> job_pb2.Job:
        request = job_pb2.SubmitRequest(job_type="frames", queue=QUEUE, priority=priority)
        return (await self.served.jobs.Submit(request, metadata=self.clients[tenant].metadata)).job

    async def submit_many(self, tenant: str, n: int) -> None:
        for start in range(0, n, 1000):
            jobs = [job_pb2.SubmitRequest(job_type="frames", queue=QUEUE) for _ in range(min(1000, n - start))]
            await self.served.jobs.SubmitBatch(
                job_pb2.SubmitBatchRequest(jobs=jobs), metadata=self.clients[tenant].metadata
            )

    async def claim(self, max_jobs: int = 1, wait: float = 0.0, through: Stubs | None = None) -> list[worker_pb2.Lease]:
        request = worker_pb2.ClaimRequest(
            worker_id="fleet-1",
            job_types=[worker_pb2.JobTypeSpec(name="frames")],
            queues=[QUEUE],
            max_jobs=max_jobs,
            wait=Duration(seconds=int(wait), nanos=int((wait % 1) * 1e9)),
        )
        workers = (through or self.served).workers
        return list((await workers.Claim(request, metadata=FLEET.metadata)).leases)

    async def get(self, tenant: str, job_no: str) -> job_pb2.Job:
        return await self.served.jobs.Get(job_pb2.GetRequest(job_no=job_no), metadata=self.clients[tenant].metadata)


@pytest.fixture
def auth_file(tmp_path: Path) -> Path:
    return tmp_path / "auth.toml"


@pytest.fixture
async def fleet(database_url: str, auth_file: Path) -> AsyncIterator[Fleet]:
    clients = {t: Token(f"{t}-client", tenant=t, role="client") for t in TENANTS}
    admins = {t: Token(f"{t}-admin", tenant=t, role="admin") for t in TENANTS}
    workers = {t: Token(f"{t}-worker", tenant=t, role="worker") for t in TENANTS}
    tokens = [*clients.values(), *admins.values(), *workers.values(), FLEET]
    served = await start_server(database_url, auth_file=write_auth_file(auth_file, tokens))
    try:
        yield Fleet(served, clients, admins, workers)
    finally:
        await served.close()


async def test_one_tenants_backlog_does_not_delay_another_tenants_job(fleet: Fleet) -> None:
    await fleet.submit_many("a", 2000)
    b_job = await fleet.submit("b")
    first = [lease for _ in range(2) for lease in await fleet.claim()]
    assert b_job.job_no in [lease.job_no for lease in first]
    assert {lease.tenant for lease in first} == {"a", "b"}  # the lease says whose job it is
    # A claim of several takes from each tenant in turn: B's next job goes in the first claim.
    b_next = await fleet.submit("b")
    batch = await fleet.claim(max_jobs=4)
    assert b_next.job_no in [lease.job_no for lease in batch]
    assert [lease.tenant for lease in batch].count("a") == 3


@pytest.mark.both_databases  # turns listed by each database's own skip scan
async def test_turns_hold_for_a_fleet_claiming_through_two_processes(
    fleet: Fleet, database_url: str, auth_file: Path
) -> None:
    """Each process keeps its own turns: B's job is still among the first few claimed."""
    other = start_server_process(
        ["jobwire", "serve"],
        {"JOBWIRE_DATABASE_URL": database_url, "JOBWIRE_LISTEN": "127.0.0.1:0", "JOBWIRE_AUTH_FILE": str(auth_file)},
    )
    try:
        await fleet.submit_many("a", 2000)
        b_job = await fleet.submit("b")
        stubs = await open_stubs(fleet.served.target, 1) + await open_stubs(other.target, 1)
        try:
            rounds = [await asyncio.gather(*(fleet.claim(through=s) for s in stubs)) for _ in range(2)]
        finally:
            for s in stubs:
                await s.close()
        claimed = [lease.job_no for both in rounds for leases in both for lease in leases]
        assert len(claimed) == 4 and b_job.job_no in claimed
    finally:
        other.terminate()


@pytest.mark.both_databases  # turns listed by each database's own skip scan
async def test_turns_go_round_robin_then_by_priority_inside_each_tenant(fleet: Fleet) -> None:
    submitted: dict[str, list[job_pb2.Job]] = {t: [] for t in TENANTS}
    for _ in range(3):
        for tenant in TENANTS:
            submitted[tenant].append(await fleet.submit(tenant))
    urgent = await fleet.submit("c", priority=5)  # last submitted, first of c's
    claimed = [lease for _ in range(9) for lease in await fleet.claim()]
    tenants = [lease.tenant for lease in claimed]
    for start in range(0, 9, 3):
        assert sorted(tenants[start : start + 3]) == list(TENANTS), tenants  # each round: every tenant once
    for tenant in ("a", "b"):
        mine = [lease.job_no for lease in claimed if lease.tenant == tenant]
        assert mine == [job.job_no for job in submitted[tenant]]  # oldest first inside a tenant
    assert next(lease.job_no for lease in claimed if lease.tenant == "c") == urgent.job_no


async def test_a_shared_worker_runs_any_tenants_job_to_the_end(fleet: Fleet) -> None:
    a_job, b_job = await fleet.submit("a"), await fleet.submit("b")
    leases = await fleet.claim(max_jobs=2)
    assert sorted((lease.tenant, lease.job_no) for lease in leases) == [("a", a_job.job_no), ("b", b_job.job_no)]
    worker = fleet.served.workers
    for lease in leases:
        ref = {"job_no": lease.job_no, "worker_token": lease.worker_token}
        report = worker_pb2.ReportStageRequest(**ref, stage="PROCESSING", processed_units=1, total_units=2)
        await worker.ReportStage(report, metadata=FLEET.metadata)
        beat = worker_pb2.HeartbeatRequest(worker_id="fleet-1", leases=[worker_pb2.LeaseRef(**ref)])
        (state,) = (await worker.Heartbeat(beat, metadata=FLEET.metadata)).leases
        assert state.state == worker_pb2.LeaseState.OK
        artifact = job_pb2.Artifact(uri="file:///out.bin", size_bytes=1, sha256="0" * 64)
        await worker.Complete(worker_pb2.CompleteRequest(**ref, result=artifact), metadata=FLEET.metadata)
    for tenant, job in (("a", a_job), ("b", b_job)):
        assert (await fleet.get(tenant, job.job_no)).status == job_pb2.Job.READY


async def test_a_tenants_worker_cannot_act_on_a_shared_fleets_lease_of_another_tenant(fleet: Fleet) -> None:
    await fleet.submit("a")
    (lease,) = await fleet.claim()
    complete = worker_pb2.CompleteRequest(
        job_no=lease.job_no,
        worker_token=lease.worker_token,
        result=job_pb2.Artifact(uri="file:///out.bin", size_bytes=1, sha256="0" * 64),
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await fleet.served.workers.Complete(complete, metadata=fleet.workers["b"].metadata)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # WORKER_LEASE_LOST: no oracle
    assert (await fleet.get("a", lease.job_no)).status == job_pb2.Job.RUNNING


async def test_a_waiting_shared_claim_is_woken_by_any_tenants_submit(fleet: Fleet) -> None:
    waiting = asyncio.ensure_future(fleet.claim(wait=LONG_WAIT_S))
    await until_waiting(fleet.served, waiting)
    job = await fleet.submit("c")
    assert [(lease.tenant, lease.job_no) for lease in await woken(waiting)] == [("c", job.job_no)]


async def test_each_tenants_queue_limits_hold_for_the_shared_fleet(fleet: Fleet) -> None:
    await fleet.served.admin.PauseQueue(admin_pb2.PauseQueueRequest(queue=QUEUE), metadata=fleet.admins["a"].metadata)
    a_jobs = [await fleet.submit("a") for _ in range(2)]
    b_job = await fleet.submit("b")
    assert [lease.job_no for lease in await fleet.claim(max_jobs=5)] == [b_job.job_no]
    assert await fleet.claim(max_jobs=5) == []  # a's queue is paused; b's has nothing more
    assert (await fleet.get("a", a_jobs[0].job_no)).display.detail == "Queued: the queue is paused"
    await fleet.served.admin.ResumeQueue(admin_pb2.ResumeQueueRequest(queue=QUEUE), metadata=fleet.admins["a"].metadata)
    claimed = await eventually(lambda: fleet.claim(max_jobs=5), what="a's jobs after the resume")
    assert sorted(lease.job_no for lease in claimed) == sorted(job.job_no for job in a_jobs)


async def test_a_kind_the_shared_fleet_claims_for_is_served_for_every_tenant(fleet: Fleet) -> None:
    for tenant in TENANTS:
        await fleet.submit(tenant)
    await fleet.claim()  # one job taken: the fleet asked for queue exports, job type frames
    findings = await fleet.served.admin.Inspect(
        admin_pb2.InspectRequest(kinds=[admin_pb2.Finding.NO_WORKER]), metadata=fleet.admins["b"].metadata
    )
    assert list(findings.findings) == []


async def test_a_shared_fleet_token_may_not_submit(fleet: Fleet) -> None:
    request = job_pb2.SubmitRequest(job_type="frames", queue=QUEUE)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await fleet.served.jobs.Submit(request, metadata=FLEET.metadata)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_tenants_operator_sees_the_shared_fleet_that_serves_its_queue(fleet: Fleet) -> None:
    await fleet.submit("a")
    await fleet.submit("b")
    assert len(await fleet.claim(max_jobs=2)) == 2  # the fleet holds a lease of each tenant
    idle = worker_pb2.ClaimRequest(worker_id="b-own", job_types=[worker_pb2.JobTypeSpec(name="frames")])
    await fleet.served.workers.Claim(idle, metadata=fleet.workers["b"].metadata)  # b's own worker, nothing left
    for tenant, expected in (("a", {"fleet-1": (True, 1)}), ("b", {"fleet-1": (True, 1), "b-own": (False, 0)})):
        request = admin_pb2.ListWorkersRequest()
        listed = await fleet.served.admin.ListWorkers(request, metadata=fleet.admins[tenant].metadata)
        assert {w.worker_id: (w.shared_fleet, w.leases_held) for w in listed.workers} == expected
