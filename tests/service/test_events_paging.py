"""ListEvents pages: every event of a job exactly once, in order, on any page size; bad tokens are refused.

A job's trail is built from real calls (a claim, a hundred and more reports across stages, a
release, late calls refused as evidence, a second claim, completion), interleaved with a
second job's so the two trails' rows alternate in job_event. Pages are compared with the
rows of job_event themselves.
"""

from __future__ import annotations

import base64
import json
import math

import grpc
import pytest
import sqlalchemy as sa
from served import Served
from service_support import artifact, claim, db_query, rpc_failure, submit

from jobwire.client.status import error_reason, field_violations
from jobwire.db.tables import job_event
from jobwire.v1 import admin_pb2, worker_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(90)]  # paging by stored event ids

REPORTS = 60  # per job; each is one PROGRESS or STAGE_CHANGED event


def trail_key(e: admin_pb2.JobEvent) -> tuple[object, ...]:
    return (e.version, e.kind, e.stage, e.processed_units, e.worker_id, e.attempt, e.detail)


async def stored(s: Served, job_no: str) -> list[tuple[object, ...]]:
    """(version, kind, stage, processed_units, worker_id, attempt, detail) of job_event, in id order."""
    e = job_event.c
    query = sa.select(e.version, e.kind, e.stage, e.processed_units, e.worker_id, e.attempt, e.detail)
    rows = await db_query(s, query.where(e.job_no == job_no).order_by(e.id))
    return [
        (r["version"], r["kind"], r["stage"] or "", r["processed_units"] or 0, r["worker_id"] or "",
         r["attempt"] or 0, r["detail"] or "")
        for r in rows
    ]  # fmt: skip


async def pages(s: Served, job_no: str, page_size: int, token: str = "") -> list[list[admin_pb2.JobEvent]]:
    out: list[list[admin_pb2.JobEvent]] = []
    while True:
        reply = await s.admin.ListEvents(
            admin_pb2.ListEventsRequest(job_no=job_no, page_size=page_size, page_token=token)
        )
        out.append(list(reply.events))
        token = reply.next_page_token
        if not token:
            return out
        assert len(out) < 1000, "ListEvents never returned an empty next_page_token"


async def report(s: Served, lease: worker_pb2.Lease, stage: str, units: int) -> None:
    await s.workers.ReportStage(worker_pb2.ReportStageRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, stage=stage, processed_units=units, total_units=1000,
    ))  # fmt: skip


async def long_trails(s: Served) -> tuple[str, str]:
    """Two jobs whose trails interleave in job_event; the first also has evidence-only rows."""
    first, second = await submit(s), await submit(s)
    leases = await claim(s, max_jobs=2, lease=3600)
    assert sorted(lease.job_no for lease in leases) == sorted([first.job_no, second.job_no])
    by_no = {lease.job_no: lease for lease in leases}
    for i in range(1, REPORTS + 1):
        stage = "PREPARING" if i <= REPORTS // 3 else "PROCESSING"
        for lease in by_no.values():
            await report(s, lease, stage, i)
    old = by_no[first.job_no]
    await s.workers.Release(worker_pb2.ReleaseRequest(job_no=old.job_no, worker_token=old.worker_token))
    for units in (REPORTS + 1, REPORTS + 2):  # the released lease speaks again: refused, kept as evidence
        failure = await rpc_failure(report(s, old, "PROCESSING", units))
        assert error_reason(failure) == "WORKER_LEASE_LOST"
    (again,) = await claim(s, worker_id="w2", lease=3600)
    assert again.job_no == first.job_no
    await report(s, again, "PREPARING", 1)
    await s.workers.Complete(
        worker_pb2.CompleteRequest(job_no=again.job_no, worker_token=again.worker_token, result=artifact())
    )
    return first.job_no, second.job_no


async def test_every_page_size_gives_every_event_once_in_order(served) -> None:  # type: ignore[no-untyped-def]
    first, second = await long_trails(served)
    for job_no in (first, second):
        truth = await stored(served, job_no)
        n = len(truth)
        assert n > REPORTS, n
        versions = [t[0] for t in truth]
        assert versions == sorted(versions)
        # 0: the default (100); 500 is the most a page holds, and more is taken as 500
        for size in (1, 7, 50, n - 1, n, 0, 500, 10_000):
            got = await pages(served, job_no, size)
            flat = [trail_key(e) for page in got for e in page]
            assert flat == truth, (job_no, size)
            per_page = min(size or 100, 500)
            assert [len(page) for page in got[:-1]] == [per_page] * (len(got) - 1), (job_no, size)
            assert len(got) == max(1, math.ceil(n / per_page)), (job_no, size)  # no empty page at the end
    kinds = [t[1] for t in await stored(served, first)]
    assert kinds.count("LATE_CALL_REJECTED") == 2 and kinds[0] == "SUBMITTED" and kinds[-1] == "COMPLETED"


async def test_events_written_between_pages_come_once_at_the_end(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served)
    (lease,) = await claim(served, lease=3600)
    for i in range(1, 11):
        await report(served, lease, "PROCESSING", i)
    page = await served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job.job_no, page_size=4))
    assert [e.version for e in page.events] == [1, 2, 3, 4] and page.next_page_token
    for i in range(11, 16):
        await report(served, lease, "PROCESSING", i)
    rest = [e for p in await pages(served, job.job_no, 4, page.next_page_token) for e in p]
    seen = [trail_key(e) for e in [*page.events, *rest]]
    assert seen == await stored(served, job.job_no)
    assert [e.processed_units for e in rest][-5:] == [11, 12, 13, 14, 15]


def _token(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


BAD_TOKENS = [
    "not a token",
    "%%%%",
    base64.urlsafe_b64encode(b"not json").decode(),
    _token({"after": -1}),
    _token({"after": "5"}),
    _token({"after": True}),
    _token({"after": 2**63}),
    _token({"after": 1.5}),
    _token({}),
    _token([1]),
    _token({"after_worker": "w1"}),  # a ListWorkers token
    "A" * 65,
    _token({"after": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}),
]


async def test_a_bad_page_token_is_invalid_argument_naming_the_field(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served)
    before = await stored(served, job.job_no)
    for token in BAD_TOKENS:
        request = admin_pb2.ListEventsRequest(job_no=job.job_no, page_size=2, page_token=token)
        failure = await rpc_failure(served.admin.ListEvents(request))
        assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT, token
        assert error_reason(failure) == "INVALID_ARGUMENT", token
        assert [field for field, _ in field_violations(failure)] == ["page_token"], token
    negative = await rpc_failure(served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job.job_no, page_size=-1)))
    assert negative.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [field for field, _ in field_violations(negative)] == ["page_size"]
    unknown = await rpc_failure(served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no="PT-20990101-999")))
    assert (unknown.code(), error_reason(unknown)) == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")
    assert await stored(served, job.job_no) == before  # refused calls wrote nothing
    # a token past the end is a valid token: an empty last page
    past = admin_pb2.ListEventsRequest(job_no=job.job_no, page_token=_token({"after": 2**62}))
    reply = await served.admin.ListEvents(past)
    assert list(reply.events) == [] and reply.next_page_token == ""
