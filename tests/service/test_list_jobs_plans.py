"""Every ListJobs statement the server issues reads down its index in order, on both databases.

Security review, finding 5: a page of ListJobs cost a covering scan of the claim index and a
temp B-tree for ORDER BY id, so 281 ms at 107,893 jobs of a tenant against 7 ms at 1,087; and
later, with one index per leading filter, combined or rare filters (owner + status, queue +
status, a label) still read the tenant's rows one by one. Each filter combination the server
can send (jobwire.db.job_pages.list_ranges, with and without a page token, a token of every
queue, of one, of two, of many) is EXPLAINed here: the job table must be read through the
index that serves the most of its filters (the pairs with a status among them), with no sort
and no temporary table; where filters are left to check, the statement that bounds the scan
reads that index alone (covering), in order.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import sqlalchemy as sa
from served import Served

from jobwire.db.job_pages import MAX_RANGES, list_ranges
from jobwire.domain.commands import JobFilter, Scope
from jobwire.domain.states import Status
from jobwire.v1 import job_pb2

pytestmark = pytest.mark.both_databases  # each database's query plans

SCOPES = {
    "every queue": Scope(tenant="default"),
    "one queue": Scope(tenant="default", queues=frozenset({"q1"})),
    "two queues": Scope(tenant="default", queues=frozenset({"q1", "q2"})),
    "nine queues": Scope(tenant="default", queues=frozenset(f"q{n}" for n in range(1, 10))),
}
FILTERS: dict[str, dict[str, Any]] = {
    "none": {},
    "owner": {"owner": "alice"},
    "job_type": {"job_type": "frames"},
    "assignee": {"assignee": "bob"},
    "a status": {"statuses": [Status.QUEUED]},
    "two statuses": {"statuses": [Status.QUEUED, Status.RUNNING]},
    "owner and status": {"owner": "alice", "statuses": [Status.READY]},
    "job_type and statuses": {"job_type": "frames", "statuses": [Status.QUEUED, Status.FAILED]},
    "assignee and status": {"assignee": "bob", "statuses": [Status.WAITING]},
    "queue and status": {"queue": "q1", "statuses": [Status.QUEUED]},
    "assignee and owner": {"assignee": "bob", "owner": "alice"},
    "owner and job_type": {"owner": "alice", "job_type": "frames"},
    "owner, job_type and status": {"owner": "alice", "job_type": "frames", "statuses": [Status.READY]},
    "a label": {"labels": {"team": "red"}},
    "a label and a status": {"labels": {"team": "red"}, "statuses": [Status.FAILED]},
    "labels, queue and owner": {"labels": {"team": "red", "env": "prod"}, "queue": "q1", "owner": "alice"},
}
# What each index serves, after the tenant (jobwire.db.job_pages._PATHS)
SERVES = {
    "ix_job_assignee_status": {"assignee", "statuses"},
    "ix_job_assignee": {"assignee"},
    "ix_job_owner_status": {"owner", "statuses"},
    "ix_job_owner": {"owner"},
    "ix_job_type_status": {"job_type", "statuses"},
    "ix_job_type": {"job_type"},
    "ix_job_queue_status": {"queues", "statuses"},
    "ix_job_status": {"statuses"},
    "ix_job_queue": {"queues"},
    "ix_job_tenant": set(),
}


def _named(where: JobFilter) -> set[str]:
    """The filters `where` has (the token's queues count as a queue filter)."""
    named = {name for name in ("assignee", "owner", "job_type", "statuses", "labels") if getattr(where, name)}
    return named | ({"queues"} if where.queue or where.scope.queues else set())


def _intended(where: JobFilter) -> str:
    """The index a page of `where` must be read through: the first in SERVES whose filters it
    has, a pair of filters only while its ranges (one per pair of values) are at most MAX_RANGES."""
    named = _named(where)
    queues = 1 if where.queue else len(where.scope.queues or ())
    for index, serves in SERVES.items():
        pairs = len(where.statuses) * (queues if "queues" in serves else 1)
        if serves <= named and (len(serves) < 2 or pairs <= MAX_RANGES):
            return index
    raise AssertionError("ix_job_tenant serves every filter set")


def _plan(conn: sa.Connection, query: sa.Select[Any]) -> list[str]:
    sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
    if conn.dialect.name == "sqlite":
        return [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)]
    rows = conn.exec_driver_sql("EXPLAIN " + sql).mappings()
    return [f"table={r['table']} key={r['key']} extra={r['Extra'] or ''}" for r in rows]


def _reads_in_order(plan: list[str], index: str, sqlite: bool, covering: bool = False) -> bool:
    if sqlite:
        read = "COVERING INDEX" if covering else "INDEX"
        through = any(f"SEARCH job USING {read} {index} " in step for step in plan)
        return through and not any("TEMP B-TREE" in step for step in plan)
    through = any(step.startswith(f"table=job key={index} ") for step in plan)
    index_only = not covering or any(step.startswith("table=job ") and "Using index" in step for step in plan)
    return through and index_only and not any("filesort" in step or "temporary" in step for step in plan)


async def test_every_list_jobs_statement_reads_its_index_in_order(served: Served) -> None:
    for n, (queue, owner) in enumerate(itertools.product(("q1", "q2", "default"), ("alice", "carol"))):
        request = job_pb2.SubmitRequest(job_type="frames" if n % 2 else "reports", queue=queue, owner=owner)
        await served.jobs.Submit(request)
    engine = served.runtime.store.db.engine
    sqlite = engine.dialect.name == "sqlite"
    wrong, bounded = [], 0
    with engine.connect() as conn:
        for (scope_name, scope), (filter_name, fields), before in itertools.product(
            SCOPES.items(), FILTERS.items(), (None, 1_000)
        ):
            where = JobFilter(scope=scope, **fields)
            index = _intended(where)
            ranges = list_ranges(where, before)
            statements = [(r.rows(21, floor), False) for r in ranges for floor in (None, 500)]
            if _named(where) - SERVES[index]:  # filters left to check: each range bounds its scan first
                statements += [(r.floor(1_000), True) for r in ranges]
                bounded += 1
            assert all(r.scans for r in ranges) == bool(_named(where) - SERVES[index]), filter_name
            for query, covering in statements:
                plan = _plan(conn, query)
                if not _reads_in_order(plan, index, sqlite, covering):
                    wrong.append(f"{scope_name}, {filter_name}, before={before}: wanted {index}, got {plan}")
    assert wrong == []
    assert bounded > 20  # the label, and the pairs no index holds, are among the shapes


async def test_a_page_merged_from_several_ranges_is_newest_first_and_continues(served: Served) -> None:
    made = []
    for n in range(7):
        status_of = job_pb2.SubmitRequest(job_type="frames", queue="q1" if n % 2 else "q2")
        made.append((await served.jobs.Submit(status_of)).job.job_no)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=made[3]))
    statuses = [job_pb2.Job.QUEUED, job_pb2.Job.CANCELLED]
    seen, token = [], ""
    while True:
        page = await served.jobs.ListJobs(job_pb2.ListJobsRequest(statuses=statuses, page_size=2, page_token=token))
        seen += [job.job_no for job in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == made[::-1]


async def test_a_batchs_jobs_are_read_through_the_batch_index(served: Served) -> None:
    """A batch holds at most 1000 jobs: its page reads ix_job_batch (a sort of those, bounded),
    never the tenant's jobs walked for the batch's rows."""
    engine = served.runtime.store.db.engine
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        for scope, statuses in itertools.product(SCOPES.values(), ([], [Status.QUEUED])):
            for r in list_ranges(JobFilter(scope=scope, batch_id="b-1", statuses=statuses), None):
                assert not r.scans  # bounded by the batch's size, not by a scan budget
                plan = _plan(conn, r.rows(21))
                if sqlite:
                    assert any("USING INDEX ix_job_batch " in step for step in plan), plan
                else:
                    assert any(step.startswith("table=job key=ix_job_batch ") for step in plan), plan
