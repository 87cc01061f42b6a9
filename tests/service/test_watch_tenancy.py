"""WatchJobs never shows one tenant another tenant's jobs: not by owner, not by job number.

Two tenants, acme and globex, with the same owner name and the same job types. A globex
stream for owner "alice" sees only globex's alice; a globex stream that names acme's job
numbers is NOT_FOUND exactly as for numbers that do not exist (another tenant's
job answers as one that does not exist: its existence is not disclosed), before sending anything. Numbers are per
tenant, so a number both have names, in each tenant's stream, that tenant's own job. Acme's own
stream is the control: it shows that acme's changes did reach the change feed. A stream
has no "nothing more" message, so each check ends on a change of globex's own, made after
acme's: the feed delivers in order, so anything of acme's would have come before it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from served import Served, start_server
from service_support import artifact, rpc_failure
from watch_support import next_job, read_until

from jobwire.client.status import error_reason
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(60)

ACME = Token("watch-tenancy-acme-client-7f1", tenant="acme")
ACME_WORKER = Token("watch-tenancy-acme-worker-7f1", tenant="acme", role="worker")
GLOBEX = Token("watch-tenancy-globex-client-7f1", tenant="globex")
GLOBEX_WORKER = Token("watch-tenancy-globex-worker-7f1", tenant="globex", role="worker")
Q, R, READY, CANCELLED = job_pb2.Job.QUEUED, job_pb2.Job.RUNNING, job_pb2.Job.READY, job_pb2.Job.CANCELLED


@pytest.fixture
async def tenants(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    auth = write_auth_file(tmp_path / "auth.toml", [ACME, ACME_WORKER, GLOBEX, GLOBEX_WORKER])
    served = await start_server(database_url, auth_file=auth)
    try:
        yield served
    finally:
        await served.close()


async def submit(s: Served, who: Token, owner: str = "alice", queue: str = "") -> str:
    request = job_pb2.SubmitRequest(job_type="frames", owner=owner, queue=queue)
    return (await s.jobs.Submit(request, metadata=who.metadata)).job.job_no


def watch_jobs(s: Served, who: Token, owner: str = "", job_nos: tuple[str, ...] = ()) -> grpc.aio.UnaryStreamCall:
    request = job_pb2.WatchJobsRequest(owner=owner, job_nos=list(job_nos))
    return s.jobs.WatchJobs(request, metadata=who.metadata)


async def cancel(s: Served, who: Token, job_no: str) -> None:
    await s.jobs.Cancel(job_pb2.CancelRequest(job_no=job_no), metadata=who.metadata)


async def run_to_ready(s: Served, job_no: str) -> None:
    """Acme's worker claims `job_no`, reports, and completes it: three changes a watcher sees."""
    claim = worker_pb2.ClaimRequest(worker_id="acme-w", job_types=[worker_pb2.JobTypeSpec(name="frames")], max_jobs=1)
    (lease,) = (await s.workers.Claim(claim, metadata=ACME_WORKER.metadata)).leases
    assert lease.job_no == job_no
    ref = {"job_no": lease.job_no, "worker_token": lease.worker_token}
    await s.workers.ReportStage(
        worker_pb2.ReportStageRequest(**ref, stage="PROCESSING", processed_units=5, total_units=10),
        metadata=ACME_WORKER.metadata,
    )
    await s.workers.Complete(worker_pb2.CompleteRequest(**ref, result=artifact()), metadata=ACME_WORKER.metadata)


def seen(jobs: list[job_pb2.Job]) -> list[tuple[str, int]]:
    return [(j.job_no, j.status) for j in jobs]


async def test_naming_another_tenants_owner_shows_only_your_own_jobs(tenants: Served) -> None:
    s = tenants
    a1, a2 = await submit(s, ACME), await submit(s, ACME)
    g1 = await submit(s, GLOBEX, queue="parked")
    theirs = watch_jobs(s, GLOBEX, owner="alice")
    ours = watch_jobs(s, ACME, owner="alice")  # the control
    first = await next_job(theirs)
    assert first is not None and (first.job_no, first.status) == (g1, Q)
    assert sorted(seen([await next_job(ours), await next_job(ours)])) == sorted([(a1, Q), (a2, Q)])  # type: ignore[list-item]

    # Every kind of change to acme's alice jobs, and a new one.
    await cancel(s, ACME, a1)
    await run_to_ready(s, a2)
    a3 = await submit(s, ACME)
    acme_saw = await read_until(ours, lambda j: j.job_no == a3)
    assert {(a1, CANCELLED), (a2, R), (a2, READY), (a3, Q)} <= set(seen(acme_saw))  # they did reach the feed

    g2 = await submit(s, GLOBEX, queue="parked")  # globex's own change, after all of acme's
    globex_saw = await read_until(theirs, lambda j: j.job_no == g2)
    assert seen(globex_saw) == [(g2, Q)]
    await cancel(s, GLOBEX, g1)
    assert seen(await read_until(theirs, lambda j: j.job_no == g1)) == [(g1, CANCELLED)]
    theirs.cancel()
    ours.cancel()


async def test_naming_another_tenants_job_numbers_is_not_found_and_sends_nothing(tenants: Served) -> None:
    s = tenants
    both = await submit(s, ACME, queue="parked")
    a1, a2 = await submit(s, ACME), await submit(s, ACME, queue="parked")  # numbers globex has none of
    g1 = await submit(s, GLOBEX, queue="parked")
    assert g1 == both  # each tenant's first number of the day
    missing = "PT-20990101-999"  # well formed, never issued

    async def refusal(*job_nos: str) -> tuple[grpc.StatusCode, str | None, str | None]:
        # the first read fails: not one update came before the error
        failure = await rpc_failure(watch_jobs(s, GLOBEX, job_nos=job_nos).read())
        return failure.code(), failure.details(), error_reason(failure)

    nowhere = await refusal(missing)
    assert nowhere[0] == grpc.StatusCode.NOT_FOUND and nowhere[2] == "JOB_NOT_FOUND"
    # exactly as for a job that does not exist: the code, the message, the reason
    assert await refusal(a1) == nowhere
    assert await refusal(a1, a2) == nowhere
    assert await refusal(g1, a1) == nowhere  # one of globex's own among them changes nothing
    assert await refusal(a2, g1) == nowhere
    # and the owner of the job numbers sees them (the numbers are real)
    ours = watch_jobs(s, ACME, job_nos=(a1, a2))
    assert sorted(seen([await next_job(ours), await next_job(ours)])) == sorted([(a1, Q), (a2, Q)])  # type: ignore[list-item]

    # A globex stream of its own job, while acme's named jobs change: only globex's job on it.
    theirs = watch_jobs(s, GLOBEX, job_nos=(g1,))
    assert seen([await next_job(theirs)]) == [(g1, Q)]  # type: ignore[list-item]
    await cancel(s, ACME, both)  # acme's job of globex's number: not globex's to see
    refused_while_watching = await refusal(a1, g1)  # a refused stream leaves no subscription behind
    assert refused_while_watching == nowhere
    await run_to_ready(s, a1)
    await cancel(s, ACME, a2)
    acme_saw = await read_until(ours, lambda j: j.job_no == a2 and j.status == CANCELLED)
    assert (a1, READY) in seen(acme_saw)
    await cancel(s, GLOBEX, g1)
    assert seen(await read_until(theirs, lambda j: True)) == [(g1, CANCELLED)]
    theirs.cancel()
    ours.cancel()


async def test_watch_status_of_another_tenants_job_is_not_found_as_if_it_did_not_exist(tenants: Served) -> None:
    s = tenants
    a1 = await submit(s, ACME)

    async def refusal(job_no: str) -> tuple[grpc.StatusCode, str | None, str | None]:
        call = s.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=job_no), metadata=GLOBEX.metadata)
        failure = await rpc_failure(call.read())
        return failure.code(), failure.details(), error_reason(failure)

    nowhere = await refusal("PT-20990101-999")
    assert nowhere[0] == grpc.StatusCode.NOT_FOUND
    assert await refusal(a1) == nowhere
