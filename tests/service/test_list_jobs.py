"""ListJobs over real gRPC: filters return exactly their set, pages cover everything once, tenants never mix.

Jobs are listed newest first (by creation); a page token resumes after the last job seen,
and the last page carries an empty token. Another tenant's jobs are never listed, with or
without filters, on any page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pytest
from auth_files import Token, write_auth_file
from served import start_server
from service_support import artifact, claim, get, stop_server, submit

from jobwire.v1 import job_pb2, worker_pb2

S = job_pb2.Job
PARKED = "parked"  # jobs meant to stay QUEUED wait here, so claims on "default" never take them
ALL_STATUSES = [S.QUEUED, S.RUNNING, S.CANCEL_REQUESTED, S.READY, S.FAILED, S.CANCELLED]


@dataclass(frozen=True)
class Made:
    job_no: str
    owner: str
    job_type: str
    status: int


async def list_all(served, metadata=(), **fields) -> list[job_pb2.Job]:  # type: ignore[no-untyped-def]
    """Every page of one ListJobs query, in order; fails on a page loop."""
    out: list[job_pb2.Job] = []
    token = ""
    for _ in range(1000):
        reply = await served.jobs.ListJobs(job_pb2.ListJobsRequest(page_token=token, **fields), metadata=metadata)
        out.extend(reply.jobs)
        token = reply.next_page_token
        if not token:
            return out
    raise AssertionError("ListJobs never returned an empty next_page_token")


async def make(served, owner: str, job_type: str, status: int) -> Made:  # type: ignore[no-untyped-def]
    """A job of `owner` and `job_type` driven to `status` before the next one is submitted."""
    queue = PARKED if status == S.QUEUED else "default"
    job = await submit(served, job_type, owner=owner, queue=queue)
    if status == S.CANCELLED:
        reached = await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
    elif status != S.QUEUED:
        (lease,) = await claim(served, job_type)
        assert lease.job_no == job.job_no
        ref = {"job_no": lease.job_no, "worker_token": lease.worker_token}
        if status == S.READY:
            reached = await served.workers.Complete(worker_pb2.CompleteRequest(**ref, result=artifact()))
        elif status == S.FAILED:
            reached = await served.workers.Fail(
                worker_pb2.FailRequest(
                    **ref, category=job_pb2.JobError.PROCESSING_ERROR, message="broken", retryable=False
                )
            )
        elif status == S.CANCEL_REQUESTED:
            reached = await served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
        else:
            reached = await get(served, job.job_no)
    else:
        reached = await get(served, job.job_no)
    assert reached.status == status, (job.job_no, S.Status.Name(reached.status))
    return Made(job.job_no, owner, job_type, status)


PLAN = [
    ("ann", "frames", S.QUEUED),
    ("ann", "frames", S.RUNNING),
    ("ann", "report", S.READY),
    ("ann", "report", S.FAILED),
    ("bob", "frames", S.CANCELLED),
    ("bob", "report", S.QUEUED),
    ("bob", "frames", S.CANCEL_REQUESTED),
    ("bob", "report", S.READY),
    ("", "frames", S.RUNNING),
    ("cy", "scan", S.QUEUED),
]


async def test_each_filter_returns_exactly_its_jobs_newest_first(served) -> None:  # type: ignore[no-untyped-def]
    made = [await make(served, owner, job_type, status) for owner, job_type, status in PLAN]
    newest_first = list(reversed(made))

    async def check(owner: str = "", statuses: tuple[int, ...] = (), job_type: str = "") -> None:
        listed = await list_all(served, owner=owner, statuses=list(statuses), job_type=job_type, page_size=100)
        expected = [
            m.job_no
            for m in newest_first
            if (not owner or m.owner == owner)
            and (not statuses or m.status in statuses)
            and (not job_type or m.job_type == job_type)
        ]
        where = f"owner={owner!r} statuses={[S.Status.Name(s) for s in statuses]} job_type={job_type!r}"
        assert [j.job_no for j in listed] == expected, where
        by_no = {m.job_no: m for m in made}
        for j in listed:  # each listed job is the job as it is, not a stale or foreign copy
            m = by_no[j.job_no]
            assert (j.owner, j.job_type, j.status) == (m.owner, m.job_type, m.status), where

    await check()  # no filter: every job
    for owner in ("ann", "bob", "cy", "nobody"):
        await check(owner=owner)
    for status in ALL_STATUSES:
        await check(statuses=(status,))
    for pair in combinations(ALL_STATUSES, 2):
        await check(statuses=pair)
    await check(statuses=tuple(ALL_STATUSES))
    for job_type in ("frames", "report", "scan", "nope"):
        await check(job_type=job_type)
    # filters combine with AND
    await check(owner="ann", job_type="report")
    await check(owner="ann", job_type="report", statuses=(S.READY,))
    await check(owner="bob", statuses=(S.QUEUED, S.CANCELLED))
    await check(owner="bob", job_type="frames", statuses=(S.READY,))  # matches nothing


async def test_pages_of_two_cover_every_job_once_newest_first(served) -> None:  # type: ignore[no-untyped-def]
    submitted = [(await submit(served, "frames", owner="ann" if i % 2 else "bob")).job_no for i in range(7)]
    newest_first = list(reversed(submitted))

    async def pages(**fields) -> list[list[str]]:  # type: ignore[no-untyped-def]
        out: list[list[str]] = []
        token = ""
        while True:
            reply = await served.jobs.ListJobs(job_pb2.ListJobsRequest(page_size=2, page_token=token, **fields))
            out.append([j.job_no for j in reply.jobs])
            token = reply.next_page_token
            if not token:
                return out
            assert len(out) < 20, "page loop"

    seen = await pages()
    assert seen == [newest_first[0:2], newest_first[2:4], newest_first[4:6], newest_first[6:7]]
    flat = [n for page in seen for n in page]
    assert sorted(flat) == sorted(submitted) and len(set(flat)) == len(flat)

    # an exact multiple of the page size: the second page is the last one, no empty third page
    bobs = [n for i, n in enumerate(submitted) if i % 2 == 0]  # 4 jobs
    bob_pages = await pages(owner="bob")
    assert bob_pages == [list(reversed(bobs))[0:2], list(reversed(bobs))[2:4]]


async def test_paging_is_stable_when_jobs_arrive_between_pages(served) -> None:  # type: ignore[no-untyped-def]
    submitted = [(await submit(served, "frames")).job_no for _ in range(5)]
    first = await served.jobs.ListJobs(job_pb2.ListJobsRequest(page_size=2))
    assert [j.job_no for j in first.jobs] == submitted[::-1][:2] and first.next_page_token
    late = (await submit(served, "frames")).job_no  # newer than everything: not on a later page
    rest: list[str] = []
    token = first.next_page_token
    while token:
        reply = await served.jobs.ListJobs(job_pb2.ListJobsRequest(page_size=2, page_token=token))
        rest.extend(j.job_no for j in reply.jobs)
        token = reply.next_page_token
    assert rest == submitted[::-1][2:]
    assert late not in rest
    assert [j.job_no for j in await list_all(served, page_size=2)] == [late, *submitted[::-1]]


# -- tenants -------------------------------------------------------------------------------------

TOKENS = {
    "acme-client": Token("list-jobs-acme-client-51c2", tenant="acme"),
    "globex-client": Token("list-jobs-globex-client-51c2", tenant="globex"),
}


def _auth(name: str) -> tuple[tuple[str, str], ...]:
    return TOKENS[name].metadata


@pytest.fixture
async def tenants(database_url: str, tmp_path: Path) -> AsyncIterator[object]:
    auth_file = write_auth_file(tmp_path / "auth.toml", TOKENS.values())
    served = await start_server(database_url, auth_file=auth_file)
    try:
        yield served
    finally:
        await stop_server(served)


async def test_another_tenants_jobs_never_appear(tenants) -> None:  # type: ignore[no-untyped-def]
    acme, globex = _auth("acme-client"), _auth("globex-client")
    mine: dict[str, list[str]] = {"acme": [], "globex": []}
    # interleaved, same owners and job types in both tenants: only the tenant tells them apart
    # (and the numbers, each tenant's own sequence, repeat: a label says whose a job is)
    for i in range(5):
        for tenant, md in (("acme", acme), ("globex", globex)):
            request = job_pb2.SubmitRequest(job_type="frames", owner="ann" if i % 2 else "bob", labels={"of": tenant})
            mine[tenant].append((await tenants.jobs.Submit(request, metadata=md)).job.job_no)
    extra = await tenants.jobs.Submit(
        job_pb2.SubmitRequest(job_type="report", owner="ann", labels={"of": "acme"}), metadata=acme
    )
    mine["acme"].append(extra.job.job_no)

    queries: list[dict[str, object]] = [
        {},
        {"owner": "ann"},
        {"owner": "bob"},
        {"job_type": "frames"},
        {"statuses": [S.QUEUED]},
        {"owner": "ann", "job_type": "frames", "statuses": [S.QUEUED]},
    ]
    for tenant, md in (("acme", acme), ("globex", globex)):
        for page_size in (2, 100):
            for query in queries:
                jobs = await list_all(tenants, metadata=md, page_size=page_size, **query)
                assert {j.labels["of"] for j in jobs} <= {tenant}, (tenant, query)
                listed = [j.job_no for j in jobs]
                assert len(listed) == len(set(listed)), (tenant, query)
            everything = [j.job_no for j in await list_all(tenants, metadata=md, page_size=page_size)]
            assert everything == list(reversed(mine[tenant])), (tenant, page_size)
    # globex has no "report" jobs; acme's is not listed to globex
    assert await list_all(tenants, metadata=globex, job_type="report") == []


async def test_pages_of_jobs_with_the_largest_labels_stay_under_the_message_limit(served) -> None:  # type: ignore[no-untyped-def]
    """Security review, finding 5: ListJobs at page_size 120 with 32 labels of the largest
    size per job answered RESOURCE_EXHAUSTED; a page is now bounded by size too."""
    from jobwire.domain.limits import MAX_GRPC_MESSAGE_BYTES, MAX_LABEL_KEY_CHARS, MAX_LABEL_VALUE_CHARS, MAX_LABELS

    labels = {
        f"{i:02d}" + "k" * (MAX_LABEL_KEY_CHARS - 2): "\U0001f600" * MAX_LABEL_VALUE_CHARS for i in range(MAX_LABELS)
    }
    made = [
        (await served.jobs.Submit(job_pb2.SubmitRequest(job_type="big", labels=labels))).job.job_no for _ in range(130)
    ]
    request = job_pb2.ListJobsRequest(page_size=120)
    listed, sizes, counts = [], [], []
    while True:
        page = await served.jobs.ListJobs(request)
        listed += [j.job_no for j in page.jobs]
        sizes.append(page.ByteSize())
        counts.append(len(page.jobs))
        if not page.next_page_token:
            break
        request.page_token = page.next_page_token
    assert listed == made[::-1]
    assert counts[0] < 120 and max(sizes) < MAX_GRPC_MESSAGE_BYTES  # 120 of them: 4.2 MB
