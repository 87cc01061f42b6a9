"""No tenant may starve another: watch streams and waiting claims are held per tenant share.

Security review, finding 3: with JOBWIRE_MAX_STREAMS=3, one tenant's three WatchJobs
streams made another tenant's WatchStatus fail RESOURCE_EXHAUSTED; 300 waiting Claims of
one token were all woken by one Submit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from served import Served, eventually, start_server
from service_support import rpc_error, spec
from watch_support import next_job

from jobwire.runtime.shares import TenantShares
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.server import leasing

pytestmark = pytest.mark.timeout(60)
# Each tenant a client token and a worker token (an auth file gives each token one role).
TOKENS = {
    (tenant, role): Token(f"{tenant}-token" + ("-w" if role == "worker" else ""), tenant=tenant, role=role)
    for tenant in ("acme", "globex")
    for role in ("client", "worker")
}
ACME = TOKENS["acme", "client"].metadata
GLOBEX = TOKENS["globex", "client"].metadata


@pytest.fixture
def auth_file(tmp_path: Path) -> Path:
    return write_auth_file(tmp_path / "auth.toml", TOKENS.values())


@pytest.fixture
async def served(database_url: str, auth_file: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Served]:
    monkeypatch.setattr(leasing, "MAX_WAITING_CLAIMS", 4)
    s = await start_server(database_url, auth_file=auth_file, max_streams=3)
    try:
        yield s
    finally:
        await s.channel.close()
        await s.runtime.stop(grace=1.0)


def _worker(tenant: str) -> tuple[tuple[str, str], ...]:
    return TOKENS[tenant, "worker"].metadata


async def test_one_tenants_streams_leave_room_for_another(served: Served) -> None:
    job = (await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=ACME)).job
    first = served.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=job.job_no), metadata=ACME)
    assert (await next_job(first)).job_no == job.job_no  # type: ignore[union-attr]
    # acme's share is 3 // 2 = 1 stream: its next ones are refused though the server has room
    for _ in range(2):
        again = served.jobs.WatchJobs(job_pb2.WatchJobsRequest(owner="a"), metadata=ACME)
        assert await rpc_error(again.read()) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_STREAMS")
    reply = await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=GLOBEX)
    theirs = served.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=reply.job.job_no), metadata=GLOBEX)
    assert (await next_job(theirs)).job_no == reply.job.job_no  # type: ignore[union-attr]
    theirs.cancel()
    first.cancel()


async def _waiting(served: Served, tenant: str, count: int) -> None:
    async def probe() -> bool:
        return served.runtime.wakeup.waiting_for(tenant, "default", "frames") == count

    await eventually(probe, what=f"{count} claims of {tenant} waiting")


def _claim(served: Served, tenant: str, wait: float) -> grpc.aio.UnaryUnaryCall:
    request = worker_pb2.ClaimRequest(worker_id=f"{tenant}-w", job_types=[spec("frames")], max_jobs=1)
    request.wait.FromMilliseconds(int(wait * 1000))
    return served.workers.Claim(request, metadata=_worker(tenant))


async def test_one_tenants_waiting_claims_leave_room_for_another(served: Served) -> None:
    waiting = [asyncio.ensure_future(_claim(served, "acme", 20)) for _ in range(2)]  # acme's share: 4 // 2
    await _waiting(served, "acme", 2)
    refused = await rpc_error(_claim(served, "acme", 20))
    assert refused == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_WAITING_CLAIMS")
    theirs = asyncio.ensure_future(_claim(served, "globex", 20))
    await _waiting(served, "globex", 1)  # waiting, not refused
    await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=GLOBEX)
    reply = await asyncio.wait_for(theirs, 10)
    assert len(reply.leases) == 1
    for call in waiting:
        call.cancel()


async def test_a_submit_wakes_one_waiting_claim_not_all(served: Served) -> None:
    first, second = (asyncio.ensure_future(_claim(served, "acme", 3)) for _ in range(2))
    await _waiting(served, "acme", 2)
    await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=ACME)
    done, pending = await asyncio.wait({first, second}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1 and len(done.pop().result().leases) == 1
    (other,) = pending
    assert len((await asyncio.wait_for(other, 10)).leases) == 0  # its wait ran out: nothing was its


def test_shares_by_tenant_count() -> None:
    assert TenantShares(100, 1).per_tenant == 100
    assert TenantShares(100, 2).per_tenant == 50
    assert TenantShares(100, 40).per_tenant == 25
    assert TenantShares(3, 2).per_tenant == 1
    shares = TenantShares(2, 1)
    with shares.hold("a"), shares.hold("a"):
        assert shares.total == 2
        with pytest.raises(Exception, match="limit"), shares.hold("b"):
            pass
    assert shares.total == 0 and shares.held("a") == 0


async def test_a_watch_weighs_the_jobs_it_watches(database_url: str, auth_file: Path) -> None:
    """Security review, issue 22, finding 6: a stream of 1,000 jobs weighs 1,000, not one stream."""
    s = await start_server(database_url, auth_file=auth_file, max_streams=10, max_watched_jobs=2000)
    try:
        made = await s.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(
            jobs=[job_pb2.SubmitRequest(job_type="frames") for _ in range(1000)]
        ), metadata=ACME)  # fmt: skip
        nos = [job.job_no for job in made.jobs]
        many = s.jobs.WatchJobs(job_pb2.WatchJobsRequest(job_nos=nos), metadata=ACME)
        assert (await next_job(many)) is not None
        # acme's share is 2,000 // 2 watched jobs: the 1,000-job stream holds all of it, though
        # five of its ten streams are left.
        one = s.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=nos[0]), metadata=ACME)
        assert await rpc_error(one.read()) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_WATCHED_JOBS")
        owner = s.jobs.WatchJobs(job_pb2.WatchJobsRequest(owner="someone"), metadata=ACME)  # weighs 1,000
        assert await rpc_error(owner.read()) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_WATCHED_JOBS")
        theirs = (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=GLOBEX)).job
        watch = s.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=theirs.job_no), metadata=GLOBEX)
        assert (await next_job(watch)).job_no == theirs.job_no  # type: ignore[union-attr]
        watch.cancel()
        many.cancel()  # its 1,000 go back

        async def acme_watches_again() -> bool:
            again = s.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=nos[0]), metadata=ACME)
            try:
                return (await next_job(again)) is not None
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                return False
            finally:
                again.cancel()

        await eventually(acme_watches_again, what="the 1,000-job stream's share given back")
    finally:
        await s.channel.close()
        await s.runtime.stop(grace=1.0)


def test_shares_take_weights() -> None:
    shares = TenantShares(2000, 2)
    give_back = shares.take("a", weight=1000)
    with pytest.raises(Exception, match="limit"):
        shares.take("a")
    shares.take("b", weight=1000)()
    give_back()
    give_back()  # once only
    assert shares.total == 0 and shares.held("a") == 0
