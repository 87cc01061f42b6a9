"""Every ListJobs statement the server issues reads down its index in order, on both databases.

Security review, finding 5: a page of ListJobs cost a covering scan of the claim index and a
temp B-tree for ORDER BY id, so 281 ms at 107,893 jobs of a tenant against 7 ms at 1,087.
Each filter combination the server can send (jobwire.db.reads.list_queries, with and without
a page token, a token of every queue or of some) is EXPLAINed here: the job table must be read
through the index of its leading filter, with no sort and no temporary table.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import sqlalchemy as sa
from served import Served

from jobwire.db.reads import list_queries
from jobwire.domain.commands import JobFilter, Scope
from jobwire.domain.states import Status
from jobwire.v1 import job_pb2

pytestmark = pytest.mark.both_databases  # each database's query plans

SCOPES = {
    "every queue": Scope(tenant="default"),
    "one queue": Scope(tenant="default", queues=frozenset({"q1"})),
    "two queues": Scope(tenant="default", queues=frozenset({"q1", "q2"})),
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
    "assignee and owner": {"assignee": "bob", "owner": "alice"},
}


def _intended(where: JobFilter) -> str:
    """The index a page of `where` must be read through: that of its leading filter."""
    if where.assignee:
        return "ix_job_assignee"
    if where.owner:
        return "ix_job_owner"
    if where.job_type:
        return "ix_job_type"
    if where.statuses:
        return "ix_job_status"
    return "ix_job_tenant" if where.scope.queues is None else "ix_job_queue"


def _plan(conn: sa.Connection, query: sa.Select[Any]) -> list[str]:
    sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
    if conn.dialect.name == "sqlite":
        return [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)]
    rows = conn.exec_driver_sql("EXPLAIN " + sql).mappings()
    return [f"table={r['table']} key={r['key']} extra={r['Extra'] or ''}" for r in rows]


def _reads_in_order(plan: list[str], index: str, sqlite: bool) -> bool:
    if sqlite:
        through = any(f"SEARCH job USING INDEX {index} " in step for step in plan)
        return through and not any("TEMP B-TREE" in step for step in plan)
    through = any(step.startswith(f"table=job key={index} ") for step in plan)
    return through and not any("filesort" in step or "temporary" in step for step in plan)


async def test_every_list_jobs_statement_reads_its_index_in_order(served: Served) -> None:
    for n, (queue, owner) in enumerate(itertools.product(("q1", "q2", "default"), ("alice", "carol"))):
        request = job_pb2.SubmitRequest(job_type="frames" if n % 2 else "reports", queue=queue, owner=owner)
        await served.jobs.Submit(request)
    engine = served.runtime.store.db.engine
    sqlite = engine.dialect.name == "sqlite"
    wrong = []
    with engine.connect() as conn:
        for (scope_name, scope), (filter_name, fields), before in itertools.product(
            SCOPES.items(), FILTERS.items(), (None, 1_000)
        ):
            where = JobFilter(scope=scope, **fields)
            index = _intended(where)
            for query in list_queries(where, before, 21):
                plan = _plan(conn, query)
                if not _reads_in_order(plan, index, sqlite):
                    wrong.append(f"{scope_name}, {filter_name}, before={before}: wanted {index}, got {plan}")
    assert wrong == []


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
            for query in list_queries(JobFilter(scope=scope, batch_id="b-1", statuses=statuses), None, 21):
                plan = _plan(conn, query)
                if sqlite:
                    assert any("USING INDEX ix_job_batch " in step for step in plan), plan
                else:
                    assert any(step.startswith("table=job key=ix_job_batch ") for step in plan), plan
