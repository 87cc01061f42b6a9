"""ListJobs pages where no index serves every filter (a label): one call looks at a bounded
number of rows, and the page tokens still lead to every match, however far down it is.

Security review, finding 5: a label that only an old job carries made every call read all the
tenant's jobs (83.5 ms at 100,000 jobs against 1.6 ms at 1,000 on SQLite, 518 against 11.3 ms
on MariaDB). A call now looks at `scan_rows` of them at most, and answers with what it found
there (possibly nothing) and a token that resumes below them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from store_support import SCOPE, TENANT, new_job

from jobwire.db.job_pages import list_jobs
from jobwire.db.reads import decode_page_token
from jobwire.db.store import JobStore, Submit
from jobwire.db.tables import job
from jobwire.domain.commands import JobFilter, Scope
from jobwire.domain.states import Status

SCAN_ROWS = 40  # small, so 400 jobs take ten calls
JOBS = 400
RED = {"team": "red"}


async def _made(store: JobStore, fields_of: Callable[[int], dict[str, Any]]) -> list[str]:
    """JOBS jobs of TENANT, oldest first (the n-th with `fields_of(n)`), each after one of
    another tenant with the label and in every queue: their job numbers."""
    news = []
    for n in range(JOBS):
        news += [new_job(tenant="other", labels=RED, queue=f"q{n % 3}"), new_job(**fields_of(n))]
    answers = (await store.apply([Submit(news)]))[0]
    return [answer[0].job_no for answer in answers[1::2]]


def _handler_reads(conn: Connection) -> int:
    """MariaDB's count of index entries this session has stepped through, either way."""
    rows = conn.exec_driver_sql("SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_next', 'Handler_read_prev')")
    return sum(int(value) for _, value in rows)


def _looked_at(conn: Connection, before: int | None, after: int | None) -> int:
    """TENANT's jobs between two tokens: those a call that answered `after` to `before` looked at."""
    query = sa.select(sa.func.count()).where(job.c.tenant == TENANT)
    if before is not None:
        query = query.where(job.c.id < before)
    if after is not None:
        query = query.where(job.c.id >= after)
    return int(conn.execute(query).scalar_one())


async def test_a_rare_label_is_found_through_the_tokens_each_call_looking_at_most_the_budget(
    store: JobStore,
) -> None:
    made = await _made(store, lambda n: {"labels": RED if n == 37 else {"team": "blue"}})
    where = JobFilter(scope=SCOPE, labels=RED)
    mysql = store.db.is_mysql

    def page(token: str) -> tuple[list[str], str, int, int]:
        def read(conn: Connection) -> tuple[list[str], str, int, int]:
            stepped = _handler_reads(conn) if mysql else 0
            rows, next_token = list_jobs(conn, where, 20, token, scan_rows=SCAN_ROWS)
            stepped = _handler_reads(conn) - stepped if mysql else 0
            looked = _looked_at(conn, decode_page_token(token), decode_page_token(next_token))
            return [r["job_no"] for r in rows], next_token, looked, stepped

        return store.db.read(read)

    found, token, calls = [], "", 0
    while True:
        job_nos, token, looked, stepped = page(token)
        calls += 1
        found += job_nos
        assert looked <= SCAN_ROWS, (calls, looked)
        # the bounding read steps through SCAN_ROWS entries of the index, the page's read as many
        assert stepped <= 2 * SCAN_ROWS + 2, (calls, stepped)
        if not token:
            break
    assert found == [made[37]]
    assert calls == JOBS // SCAN_ROWS + 1  # ten of 40 rows, the last of them empty-handed, and the end


async def test_pages_merged_from_ranges_that_stopped_at_their_budget_list_every_match_once_in_order(
    store: JobStore,
) -> None:
    """Two queues (two index ranges, each with half the budget) and a label: each range stops
    at its own line, and no page lists a job below the higher one before the jobs above it."""
    picks = random.Random(22)
    reds = {n for n in range(JOBS) if picks.random() < 0.08}
    queues = [picks.choice(["q1", "q2", "q3"]) for _ in range(JOBS)]
    made = await _made(store, lambda n: {"labels": RED if n in reds else {}, "queue": queues[n]})
    where = JobFilter(scope=Scope(tenant=TENANT, queues=frozenset({"q1", "q2"})), labels=RED)
    found, token, pages = [], "", 0
    while True:
        job_nos, token = _page(store, where, 3, token)
        found += job_nos
        pages += 1
        if not token:
            break
    assert found == [made[n] for n in sorted(reds, reverse=True) if queues[n] != "q3"]
    assert pages > len(found) // 3  # the budget, not the page size, ended some pages


async def test_a_filter_pair_with_an_index_of_its_own_fills_its_page_past_the_budget(store: JobStore) -> None:
    """Queue and status (what a token of one queue sends with a status) read their own index:
    nothing is left to check, so the 3 jobs of q1 under 400 of another queue come in one call."""
    made = await _made(store, lambda n: {"queue": "q1" if n < 3 else "default"})
    where = JobFilter(scope=Scope(tenant=TENANT, queues=frozenset({"q1"})), statuses=[Status.QUEUED])
    assert _page(store, where, 20, "", scan_rows=2) == (made[2::-1], "")


def _page(
    store: JobStore, where: JobFilter, size: int, token: str, scan_rows: int = SCAN_ROWS
) -> tuple[list[str], str]:
    """One page's job numbers and its token."""
    rows, next_token = store.db.read(lambda conn: list_jobs(conn, where, size, token, scan_rows=scan_rows))
    return [r["job_no"] for r in rows], next_token
