"""Dependencies over real gRPC on SQLite: a job waits, QUEUED and unclaimable, until
every job it depends on is READY; one that ends FAILED or CANCELLED cancels it, and so on down.

The ordering checks read the event trail (each dependent's CLAIMED after its dependency's
COMPLETED), never the clock; waits poll with a deadline (`eventually`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from served import Served, eventually, start_server
from service_support import artifact, claim, events, get, open_stubs, rpc_error, rpc_failure, submit, when

from jobwire.client import JobClient
from jobwire.client.channel import ChannelConfig
from jobwire.db import dependencies
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(120)

Q, READY, CANCELLED = job_pb2.Job.QUEUED, job_pb2.Job.READY, job_pb2.Job.CANCELLED
SWEEP = {"reaper_interval_seconds": 0.1}


async def complete(s: Served, lease: worker_pb2.Lease) -> None:
    await s.workers.Complete(
        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact())
    )


async def fail(s: Served, lease: worker_pb2.Lease, message: str = "bad input") -> None:
    failure = worker_pb2.FailRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, category=job_pb2.JobError.INPUT_INVALID,
        message=message, retryable=False,
    )  # fmt: skip
    await s.workers.Fail(failure)


async def test_a_chain_runs_in_order(served: Served) -> None:
    a = await submit(served)
    b = await submit(served, depends_on=[a.job_no])
    c = await submit(served, depends_on=[b.job_no, b.job_no])  # repeats count once
    assert list(c.depends_on) == [b.job_no]
    assert b.status == Q and not b.HasField("queue_position")
    assert (await get(served, b.job_no)).display.detail == f"Queued · Waiting for {a.job_no}"
    assert (await get(served, c.job_no, "zh-CN")).display.detail == f"排队中 · 等待 {b.job_no} 完成"
    for expected in (a, b, c):
        # Only the head of the chain is claimable, however many are queued.
        leases = await claim(served, max_jobs=10)
        assert [lease.job_no for lease in leases] == [expected.job_no]
        await complete(served, leases[0])
    assert [(await get(served, j.job_no)).status for j in (a, b, c)] == [READY] * 3
    trail = await events(served, c.job_no)
    assert [e.kind for e in trail] == ["SUBMITTED", "DEPENDENCY_READY", "CLAIMED", "COMPLETED"]


async def test_queue_positions_count_only_runnable_jobs(served: Served) -> None:
    assert await claim(served) == []  # a worker serves frames
    a = await submit(served)
    await submit(served, depends_on=[a.job_no])
    last = await submit(served)
    assert (await get(served, last.job_no)).queue_position == 1  # a only: the waiting job is not in line


async def test_a_failure_cancels_the_chain_naming_the_cause(served: Served) -> None:
    a = await submit(served)
    b = await submit(served, depends_on=[a.job_no])
    c = await submit(served, depends_on=[b.job_no])
    (lease,) = await claim(served)
    await fail(served, lease)
    for job, cause in ((b, a), (c, b)):
        ended = await eventually(
            when(served, job.job_no, lambda j: j.status == CANCELLED), what=f"{job.job_no} cancelled"
        )
        assert ended.finished_at.seconds
        last = (await events(served, job.job_no))[-1]
        assert last.kind == "DEPENDENCY_FAILED"
        assert cause.job_no in last.detail
    assert await claim(served) == []


async def test_a_chain_longer_than_one_transaction_follows_is_ended_right_after_it(serve) -> None:  # type: ignore[no-untyped-def]
    # The sweep runs once an hour here: the settler the ending kicked ends the rest of the chain.
    served = await serve(reaper_interval_seconds=3600)
    head = await submit(served)
    chain = [head.job_no]
    for _ in range(dependencies.MAX_ROUNDS + 3):
        chain.append((await submit(served, depends_on=[chain[-1]])).job_no)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=head.job_no))
    last = await eventually(when(served, chain[-1], lambda j: j.status == CANCELLED), what="the chain's end cancelled")
    assert last.status == CANCELLED
    assert f"{chain[-2]} ended CANCELLED" in (await events(served, chain[-1]))[-1].detail


async def test_unknown_and_ended_dependencies_are_refused_and_create_nothing(served: Served) -> None:
    a = await submit(served)
    unknown = a.job_no[:-3] + "999"
    code, reason = await rpc_error(served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", depends_on=[unknown])))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=a.job_no))
    error = await rpc_failure(served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames", depends_on=[a.job_no])))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert a.job_no in (error.details() or "") and "depends_on" in (error.details() or "")
    listed = await served.jobs.ListJobs(job_pb2.ListJobsRequest())
    assert [j.job_no for j in listed.jobs] == [a.job_no]


async def test_a_dependent_submitted_while_its_dependency_runs_is_released_by_its_ending(serve) -> None:  # type: ignore[no-untyped-def]
    # The claim left the running job's row in the server's row cache from before anything
    # depended on it; its Complete must still find the new dependent, in its own transaction
    # (the sweep runs once an hour here, so only the ending itself can have released it).
    served = await serve(reaper_interval_seconds=3600)
    a = await submit(served)
    (lease,) = await claim(served)
    b = await submit(served, depends_on=[a.job_no])
    await served.workers.ReportStage(
        worker_pb2.ReportStageRequest(job_no=a.job_no, worker_token=lease.worker_token, stage="PROCESSING")
    )
    await complete(served, lease)
    assert [e.kind for e in await events(served, b.job_no)] == ["SUBMITTED", "DEPENDENCY_READY"]
    assert [lease.job_no for lease in await claim(served)] == [b.job_no]


ACME = Token("deps-acme-client-4c2", tenant="acme")
GLOBEX = Token("deps-globex-client-4c2", tenant="globex")


async def test_another_tenants_job_is_refused_like_an_unknown_one(database_url: str, tmp_path: Path) -> None:
    served = await start_server(database_url, auth_file=write_auth_file(tmp_path / "auth.toml", [ACME, GLOBEX]))
    try:
        theirs = await served.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=ACME.metadata)
        request = job_pb2.SubmitRequest(job_type="frames", depends_on=[theirs.job.job_no])
        error = await rpc_failure(served.jobs.Submit(request, metadata=GLOBEX.metadata))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (error.details() or "").startswith("depends_on:")
    finally:
        await served.close()


async def test_concurrent_claimers_never_lease_a_job_before_its_dependency_completes(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(**SWEEP)
    heads = [await submit(served) for _ in range(6)]
    chains: list[tuple[str, str]] = []  # (dependency, dependent)
    for head in heads:
        prev = head.job_no
        for _ in range(3):
            job = await submit(served, depends_on=[prev])
            chains.append((prev, job.job_no))
            prev = job.job_no
    total = len(heads) + len(chains)
    done: set[str] = set()
    stubs = await open_stubs(served.target, 4)

    async def worker(n: int) -> None:
        s = stubs[n % len(stubs)]
        while len(done) < total:
            for lease in await claim(s, worker_id=f"w{n}", max_jobs=2, wait=0.2):
                await complete(s, lease)
                done.add(lease.job_no)

    try:
        await asyncio.wait_for(asyncio.gather(*(worker(n) for n in range(8))), 90)
    finally:
        for s in stubs:
            await s.close()
    for dependency, dependent in chains:
        (completed,) = [e for e in await events(served, dependency) if e.kind == "COMPLETED"]
        trail = await events(served, dependent)
        # Its own trail, in version order: made runnable (in its dependency's COMPLETED
        # transaction, at that event's time), and only then claimed.
        assert [e.kind for e in trail] == ["SUBMITTED", "DEPENDENCY_READY", "CLAIMED", "COMPLETED"], dependent
        claimed = trail[2]
        assert _at(claimed) >= _at(completed), f"{dependent} was claimed before {dependency} completed"


def _at(event: admin_pb2.JobEvent) -> tuple[int, int]:
    """When the event happened, by the database clock."""
    return event.created_at.seconds, event.created_at.nanos


async def test_the_client_submits_with_depends_on(served: Served) -> None:
    def chain() -> tuple[job_pb2.Job, job_pb2.Job]:
        with JobClient(ChannelConfig(target=served.target)) as client:
            first = client.submit("frames").job
            return first, client.submit("frames", depends_on=[first.job_no]).job

    first, second = await asyncio.to_thread(chain)
    assert list(second.depends_on) == [first.job_no] and second.display.detail == f"Queued · Waiting for {first.job_no}"
