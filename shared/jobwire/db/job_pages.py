"""ListJobs pages: newest first, one index range per value of the filters that lead.

A page costs the same however many jobs the tenant has, whatever filters it names:

- Owner, job type, assignee, status and queue each have an index (tenant, <filter>, id), and
  all but status one with the status too (tenant, <filter>, status, id): each serves its
  WHERE and its ORDER BY id DESC. The page reads the first of `_PATHS` whose filters it has.
  Several values (statuses, a token's queues) read one range each, at most a page, merged.
  The index is named to both databases (tests/service/test_list_jobs_plans.py EXPLAINs every
  shape), so neither planner can choose another and sort.
- What the chosen index does not serve (a label, which no index holds, or a second of owner,
  job type, assignee and queue) is checked on the rows its ranges yield, and one call looks
  at no more than `scan_rows` of them, shared among its ranges (at least one each): a range
  first finds how far down its share reaches (an index-only read), then reads its rows above
  that line. Where a range stopped there, the page holds what was found above the line,
  possibly nothing, and its token resumes below the line.
- A batch holds at most 1,000 jobs (MAX_BATCH_JOBS): its index (batch_id, status) is read
  whole and sorted, a bounded sort, with every other filter checked on its rows.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.reads import Row, decode_page_token, encode_page_token, job_rows, page_of, select_jobs
from jobwire.db.tables import job
from jobwire.domain.commands import JobFilter
from jobwire.domain.limits import LIST_SCAN_ROWS

# A path of two filters reads one range per pair of values; past this many (a token of many
# queues with several statuses) the single filter's index leads and the other is checked.
MAX_RANGES = 16

_COLUMNS = {
    "batch_id": job.c.batch_id,
    "assignee": job.c.review_assignee,
    "owner": job.c.owner,
    "job_type": job.c.job_type,
    "statuses": job.c.status,
    "queues": job.c.queue,
}


@dataclass(frozen=True)
class _Path:
    filters: tuple[str, ...]  # what the index serves, in its column order after tenant
    index: str
    bounded: bool = False  # read whole and sorted: it holds a bounded number of rows


_PATHS = (
    _Path(("batch_id",), "ix_job_batch", bounded=True),
    _Path(("assignee", "statuses"), "ix_job_assignee_status"),
    _Path(("assignee",), "ix_job_assignee"),
    _Path(("owner", "statuses"), "ix_job_owner_status"),
    _Path(("owner",), "ix_job_owner"),
    _Path(("job_type", "statuses"), "ix_job_type_status"),
    _Path(("job_type",), "ix_job_type"),
    _Path(("queues", "statuses"), "ix_job_queue_status"),
    _Path(("statuses",), "ix_job_status"),
    _Path(("queues",), "ix_job_queue"),
    _Path((), "ix_job_tenant"),
)


@dataclass(frozen=True)
class ListRange:
    """One index range of a ListJobs page, read newest first.

    Attributes:
        served: its WHERE that the index serves (tenant, its filters, below the page token).
        checked: the page's other filters, checked on the rows the range yields.
        index: the index, named to the database.
        bounded: read whole and sorted (a batch's); no rows are left unread for the checks.
    """

    served: tuple[sa.ColumnElement[bool], ...]
    checked: tuple[sa.ColumnElement[bool], ...]
    index: str
    bounded: bool = False

    @property
    def scans(self) -> bool:
        """Whether rows of the range may fail the checks, so a call must bound how many it reads."""
        return bool(self.checked) and not self.bounded

    def floor(self, scan_rows: int) -> sa.Select[Any]:
        """The id of the range's `scan_rows`-th entry: the lowest a call may look at (an index-only read)."""
        query = sa.select(job.c.id).where(*self.served).offset(scan_rows - 1)
        return _in_order(query, self.index, 1)

    def rows(self, limit: int, floor: int | None = None) -> sa.Select[Any]:
        """The first `limit` rows of the range that pass the checks, none below `floor`."""
        above = () if floor is None else (job.c.id >= floor,)
        return _in_order(select_jobs(*self.served, *above, *self.checked), self.index, limit)


def list_ranges(where: JobFilter, before: int | None) -> list[ListRange]:
    """The ranges of one ListJobs page: one per value of its leading filters."""
    filters = _filters(where)
    path = next(p for p in _PATHS if _fits(p, filters))
    checked: list[sa.ColumnElement[bool]] = [
        _COLUMNS[name].in_(values) for name, values in filters.items() if name not in path.filters
    ]
    checked += [_has_label(key, value) for key, value in sorted(where.labels.items())]
    below = () if before is None else (job.c.id < before,)
    ranges = []
    for values in _pairs(path, filters):
        served = (_COLUMNS[f] == v for f, v in zip(path.filters, values, strict=True))
        where_range = (job.c.tenant == where.tenant, *served, *below)
        ranges.append(ListRange(where_range, tuple(checked), path.index, path.bounded))
    return ranges


def _filters(where: JobFilter) -> dict[str, list[str]]:
    """Each filter `where` has, as the values its column may take."""
    filters = {
        "batch_id": [where.batch_id] if where.batch_id else [],
        "assignee": [where.assignee] if where.assignee else [],
        "owner": [where.owner] if where.owner else [],
        "job_type": [where.job_type] if where.job_type else [],
        "statuses": sorted({s.value for s in where.statuses}),
        "queues": [where.queue] if where.queue else sorted(where.scope.queues or ()),
    }
    return {name: values for name, values in filters.items() if values}


def _fits(path: _Path, filters: dict[str, list[str]]) -> bool:
    if not all(name in filters for name in path.filters):
        return False
    return len(path.filters) < 2 or len(_pairs(path, filters)) <= MAX_RANGES


def _pairs(path: _Path, filters: dict[str, list[str]]) -> list[tuple[str, ...]]:
    """One tuple of values per range: every combination of the path's filters' values."""
    ranges: list[tuple[str, ...]] = [()]
    for name in path.filters:
        ranges = [(*r, value) for r in ranges for value in filters[name]]
    return ranges


def _has_label(key: str, value: str) -> sa.ColumnElement[bool]:
    # labels is the JSON object as submit wrote it (sorted keys, ", " and ": "): the pair's own
    # text, quotes included, is found only as that pair (a quote inside a key or value is escaped)
    pair = f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"
    return job.c.labels.contains(pair, autoescape=True)


def _in_order(query: sa.Select[Any], index: str, limit: int) -> sa.Select[Any]:
    return (
        query.order_by(job.c.id.desc())
        .limit(limit)
        .with_hint(job, f"FORCE INDEX ({index})", "mysql")
        .with_hint(job, f"FORCE INDEX ({index})", "mariadb")
        .with_hint(job, f"INDEXED BY {index}", "sqlite")
    )


def list_jobs(
    conn: Connection, where: JobFilter, page_size: int, page_token: str, scan_rows: int = LIST_SCAN_ROWS
) -> tuple[list[Row], str]:
    """Newest first; the token is the id to continue below, so pages stay stable under inserts.

    The page may hold fewer than `page_size` jobs, even none, with a token: where the filters
    leave rows to check, its ranges look at `scan_rows` of them in all (at least one each).
    """
    ranges = list_ranges(where, decode_page_token(page_token))
    share = max(1, scan_rows // len(ranges))
    reads = [_read(conn, r, page_size + 1, share) for r in ranges]
    # Below the highest line a range stopped at, another range may hold rows not read yet.
    line = max((stop for _, stop in reads if stop is not None), default=None)
    merged = heapq.merge(*(rows for rows, _ in reads), key=lambda r: -r["id"])
    known = [r for r in merged if line is None or r["id"] >= line][: page_size + 1]
    rows, last = page_of(known, page_size)
    resume = last if last is not None else line
    return rows, "" if resume is None else encode_page_token(resume)


def _read(conn: Connection, r: ListRange, limit: int, scan_rows: int) -> tuple[list[Row], int | None]:
    """The range's rows (at most `limit`), and the id it was read down to (None: to its end)."""
    floor = conn.execute(r.floor(scan_rows)).scalar_one_or_none() if r.scans else None
    rows = job_rows(conn, r.rows(limit, floor))
    return rows, (rows[-1]["id"] if len(rows) == limit else floor)
