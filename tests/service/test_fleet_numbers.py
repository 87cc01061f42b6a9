"""A shared fleet's calls on a number two tenants have (issue 22), over real gRPC on SQLite.

Job numbers are per tenant, and a shared fleet's worker (auth file `tenant = "*"`) serves
every tenant, so it may hold acme's and globex's PT-...-001 at once. Its calls name only
job_no and worker_token: the token tells which job (each job signs its own). Two servers on
one database: the one that granted the leases finds a job by its token among the rows it
keeps (jobwire.process_state.row_cache), the other reads every job of the number and lets the token pick
(jobwire.db.changes). A token that no job of the number issued is WORKER_LEASE_LOST and
writes nothing; an old lease of one of them is refused and kept as that job's evidence.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from auth_files import Token, write_auth_file
from served import Served, start_server
from service_support import FORGED_TOKEN, LEASE_LOST, db_rows, rpc_error
from wall_clock import numbering_clock

from jobwire.domain.kept_results import RESULT_CHUNK_BYTES
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(120)

FLEET = Token("numbers-fleet-worker", tenant="*", role="worker")
CLIENTS = {t: Token(f"numbers-fleet-{t}-client", tenant=t) for t in ("acme", "globex")}
ADMINS = {t: Token(f"numbers-fleet-{t}-admin", tenant=t, role="admin") for t in ("acme", "globex")}
OK = worker_pb2.LeaseState.OK


@pytest.fixture
async def pair(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[Served]]:
    """Two servers on one database, one auth file and one result store."""
    numbering_clock(monkeypatch)
    auth = write_auth_file(tmp_path / "auth.toml", [FLEET, *CLIENTS.values(), *ADMINS.values()])
    started = []
    try:
        for _ in range(2):
            started.append(await start_server(database_url, auth_file=auth, result_store=str(tmp_path / "store")))
        yield started
    finally:
        for s in started:
            await s.close()


async def submit(s: Served, tenant: str) -> job_pb2.Job:
    request = job_pb2.SubmitRequest(job_type="frames", labels={"of": tenant})
    return (await s.jobs.Submit(request, metadata=CLIENTS[tenant].metadata)).job


async def get(s: Served, tenant: str, job_no: str) -> job_pb2.Job:
    return await s.jobs.Get(job_pb2.GetRequest(job_no=job_no), metadata=CLIENTS[tenant].metadata)


async def claim(s: Served, max_jobs: int) -> dict[str, worker_pb2.Lease]:
    request = worker_pb2.ClaimRequest(
        worker_id="fleet-1", job_types=[worker_pb2.JobTypeSpec(name="frames")], max_jobs=max_jobs
    )
    return {lease.tenant: lease for lease in (await s.workers.Claim(request, metadata=FLEET.metadata)).leases}


def report(s: Served, job_no: str, token: str, processed: int) -> object:
    request = worker_pb2.ReportStageRequest(
        job_no=job_no, worker_token=token, stage="PROCESSING", processed_units=processed, total_units=10
    )
    return s.workers.ReportStage(request, metadata=FLEET.metadata)


async def heartbeat(s: Served, refs: list[tuple[str, str]]) -> list[int]:
    leases = [worker_pb2.LeaseRef(job_no=no, worker_token=token) for no, token in refs]
    request = worker_pb2.HeartbeatRequest(worker_id="fleet-1", leases=leases)
    reply = await s.workers.Heartbeat(request, metadata=FLEET.metadata)
    return [state.state for state in reply.leases]


async def late_rows(s: Served, tenant: str, job_no: str) -> int:
    request = admin_pb2.ListEventsRequest(job_no=job_no, page_size=500)
    events = (await s.admin.ListEvents(request, metadata=ADMINS[tenant].metadata)).events
    return sum(e.kind == "LATE_CALL_REJECTED" for e in events)


async def upload(s: Served, job_no: str, token: str, data: bytes) -> worker_pb2.UploadResultResponse:
    """A result of one chunk (the tests' are small)."""
    assert len(data) <= RESULT_CHUNK_BYTES

    async def chunks() -> AsyncIterator[job_pb2.ResultChunk]:
        yield job_pb2.ResultChunk(job_no=job_no, worker_token=token, content_type="text/plain", data=data)

    return await s.workers.UploadResult(chunks(), metadata=FLEET.metadata)


async def result(s: Served, tenant: str, job_no: str) -> bytes:
    request = job_pb2.GetResultRequest(job_no=job_no)
    return b"".join([c.data async for c in s.jobs.GetResult(request, metadata=CLIENTS[tenant].metadata)])


async def test_a_shared_fleet_holds_both_tenants_jobs_of_one_number_and_each_call_lands_by_its_token(
    pair: list[Served],
) -> None:
    granting, other = pair
    x = (await submit(granting, "acme")).job_no
    assert (await submit(granting, "globex")).job_no == x
    leases = await claim(granting, max_jobs=2)
    a, g = leases["acme"], leases["globex"]
    assert a.job_no == g.job_no == x and a.worker_token != g.worker_token

    # Through the granting server (rows it keeps, found by token) and through the other (rows read).
    for s, (acme_units, globex_units) in ((granting, (2, 5)), (other, (3, 6))):
        await asyncio.gather(report(s, x, a.worker_token, acme_units), report(s, x, g.worker_token, globex_units))
        assert (await get(s, "acme", x)).progress.processed_units == acme_units
        assert (await get(s, "globex", x)).progress.processed_units == globex_units
        assert await heartbeat(s, [(x, a.worker_token), (x, g.worker_token)]) == [OK, OK]

    # A token no job of the number issued: refused everywhere, nothing written, no evidence.
    before = await db_rows(granting)
    for s in pair:
        assert await rpc_error(report(s, x, FORGED_TOKEN, 9)) == LEASE_LOST
        assert await heartbeat(s, [(x, FORGED_TOKEN)]) == [worker_pb2.LeaseState.LOST]
        forged = worker_pb2.CompleteRequest(job_no=x, worker_token=FORGED_TOKEN, inline_result=b"forged")
        assert await rpc_error(s.workers.Complete(forged, metadata=FLEET.metadata)) == LEASE_LOST
        assert await rpc_error(upload(s, x, FORGED_TOKEN, b"forged")) == LEASE_LOST
    assert await db_rows(granting) == before

    # globex's lease ends (Release) and the fleet claims that job again: the old token is now
    # a late call, refused and kept as evidence on globex's job, acme's job untouched.
    release = worker_pb2.ReleaseRequest(job_no=x, worker_token=g.worker_token)
    await other.workers.Release(release, metadata=FLEET.metadata)
    g2 = (await claim(granting, max_jobs=1))["globex"]
    assert g2.job_no == x and g2.worker_token != g.worker_token
    acme_before = await get(granting, "acme", x)
    for s in pair:
        assert await rpc_error(report(s, x, g.worker_token, 9)) == LEASE_LOST
    assert await late_rows(granting, "globex", x) == 2 and await late_rows(granting, "acme", x) == 0
    assert (await get(granting, "acme", x)).version == acme_before.version
    assert (await get(granting, "globex", x)).progress.processed_units == 0  # the new attempt's, not the old token's

    # Results: acme's uploaded through the other server, globex's inline; each reads its own.
    up = await upload(other, x, a.worker_token, b"acme's frames")
    done = worker_pb2.CompleteRequest(job_no=x, worker_token=a.worker_token, upload_id=up.upload_id)
    assert (await other.workers.Complete(done, metadata=FLEET.metadata)).labels["of"] == "acme"
    inline = worker_pb2.CompleteRequest(job_no=x, worker_token=g2.worker_token, inline_result=b"globex's frames")
    assert (await granting.workers.Complete(inline, metadata=FLEET.metadata)).labels["of"] == "globex"
    assert await result(granting, "acme", x) == b"acme's frames"
    assert await result(other, "globex", x) == b"globex's frames"

    # A retried Complete replays the job it ended (its token is the one that ended it).
    again = await granting.workers.Complete(done, metadata=FLEET.metadata)
    assert (again.status, again.labels["of"]) == (job_pb2.Job.READY, "acme")
    assert [(await get(granting, t, x)).status for t in ("acme", "globex")] == [job_pb2.Job.READY] * 2
