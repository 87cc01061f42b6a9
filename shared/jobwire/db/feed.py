"""The change feed's reads: tail `job_event` without losing rows that commit late.

Why not `WHERE id > last_seen`: InnoDB hands out an auto-increment id when a row is
INSERTed, but the row becomes visible when its transaction COMMITs. Transaction A inserts
event 10, transaction B inserts event 11 and commits first; a reader that sees 11 and moves
its cursor past it never sees 10. Watchers would miss a change for good.

The design here is a high-water mark plus a set of open gaps (`FeedCursor`):

* `high` is the highest id read so far. Every id at or below `high` that has not been
  read is a gap: a transaction still in flight, or an id that will never appear (a
  rollback, a failed insert, `auto_increment_increment > 1` on a cluster).
* Each poll is ONE statement, `WHERE id > :high OR id IN (:gaps) ORDER BY id LIMIT n`.
  One statement is one consistent read (READ COMMITTED takes a fresh snapshot per
  statement), so it never sees a job's later event without its earlier one: the guarded
  UPDATE on the job row makes a job's next change wait until its previous one committed,
  so a job's events commit, and get ids, in version order.
* A gap is re-read on every poll until it fills or is older than a grace period
  (`GAP_GRACE_S`). The grace must exceed the longest time between an event's INSERT and
  its COMMIT. Our write transactions are short and `innodb_lock_wait_timeout` is 5 s, so
  30 s is wide. Should a row ever commit later than that, the stream that misses the
  version notices the hole (versions are dense) and replays it from `job_event` (see
  jobwire.jobapi.watch): late, but not lost.
* Cost: one PRIMARY KEY range plus one point lookup per open gap, per poll, whatever the
  number of watchers. Gaps are rare (rollbacks), short-lived and capped (`MAX_GAPS`).
* Start-up: the cursor starts at MAX(id) (a new watcher reads the job itself; history is
  not the feed's job) and the recent ids missing below it become gaps, so a transaction
  in flight while the process starts is not lost either.

Rejected: reading only rows older than a delay (adds the delay to every update and is
still wrong for one slow commit); a commit-ordered sequence (every writer would lock one
counter row: a hot spot on every change); tailing the binlog (replication privileges and a
binlog client for every replica). SQLite serialises writers, so commits arrive in id order
and the same code simply never sees a gap.

Also here: what a watch reads when it starts (the job where it stands now, place in line
included (jobwire.db.standing), and the visible events it missed), in one read transaction.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from jobwire.db.engine import Database
from jobwire.db.reads import Row, job_rows, load, select_jobs
from jobwire.db.rows import record_from_row, row_from_snapshot
from jobwire.db.standing import records
from jobwire.db.tables import job, job_event
from jobwire.domain.errors import StoreUnavailable
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import JobRecord
from jobwire.domain.states import LEASED, TERMINAL

log = logging.getLogger(__name__)

GAP_GRACE_S = 30.0
MAX_GAPS = 10_000
START_WINDOW = 10_000
BATCH = 1_000
GAP_CHUNK = 500  # ids per IN list: keeps the statement small and the plan a PK lookup
OWNER_PAGE = 200  # an owner's unfinished jobs per read when a WatchJobs(owner) starts

_FEED_COLUMNS = (
    job_event.c.id, job_event.c.job_id, job_event.c.tenant, job_event.c.job_no,
    job_event.c.version, job_event.c.kind, job_event.c.visible, job_event.c.to_status,
)  # fmt: skip
_LEASED_NAMES = frozenset(s.value for s in LEASED)


@dataclass(frozen=True)
class FeedRow:
    """One visible event: the user-visible job (`snapshot`, JSON) after `version`."""

    id: int
    job_id: int
    tenant: str
    job_no: str
    version: int
    kind: str
    to_status: str  # the status after it: who needs only that reads no snapshot
    snapshot: str | None  # None: read by a lean poll (a version that leaves its job leased)

    @functools.cached_property
    def record(self) -> JobRecord:
        """The job at this version, decoded once for every subscriber of the tail that asks
        (watch streams, waiting claims): ValueError, KeyError or TypeError if it does not decode,
        or was not read (a lean poll's)."""
        if self.snapshot is None:
            raise ValueError(f"event {self.id} was read without its snapshot")
        return record_from_row(row_from_snapshot(self.snapshot))


class FeedCursor:
    """Which event ids have been read: a high-water mark and the open gaps below it.

    Pure bookkeeping (no SQL), so the rules can be tested without a database.
    """

    def __init__(
        self,
        high: int,
        *,
        grace_s: float = GAP_GRACE_S,
        max_gaps: int = MAX_GAPS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.high = high
        self.gaps: dict[int, float] = {}  # id -> when first missed (dicts keep insertion order)
        self._grace = grace_s
        self._max_gaps = max_gaps
        self._clock = clock

    def open_gaps(self, ids: Iterable[int]) -> None:
        """Register ids below `high` that may still commit (used at start-up)."""
        now = self._clock()
        for missing in ids:
            self.gaps.setdefault(missing, now)
        self._cap()

    def advance(self, ids: Sequence[int]) -> None:
        """Record the ids one poll returned, in ascending order."""
        now = self._clock()
        for seen in ids:
            if seen > self.high:
                for missing in range(self.high + 1, seen):
                    self.gaps[missing] = now
                self.high = seen
            else:
                self.gaps.pop(seen, None)
        self._expire(now)
        self._cap()

    def _expire(self, now: float) -> None:
        stale = [gap for gap, since in self.gaps.items() if now - since > self._grace]
        for gap in stale:
            del self.gaps[gap]
        if stale:
            # Usually a rolled-back transaction; a commit this late would be caught by the
            # streams' version check, so this is worth a line in the log, not an alarm.
            log.info("change feed: gave up waiting for %d event id(s), e.g. %d", len(stale), stale[0])

    def _cap(self) -> None:
        extra = len(self.gaps) - self._max_gaps
        if extra > 0:
            oldest = list(self.gaps)[:extra]
            for gap in oldest:
                del self.gaps[gap]
            log.warning("change feed: more than %d open gaps; dropped the %d oldest", self._max_gaps, extra)


# A poll's statement as text, its values whole numbers of our own: every process reads every
# event back, and through SQLAlchemy's select (built, compiled, each row a Row read by name) a
# row cost 9.7 us, as text 3.1 (SQLite, 1,000 rows a poll).
_POLL_SQL = (
    f"SELECT {', '.join(column.name for column in _FEED_COLUMNS)}, {{snapshot}}"
    " FROM job_event WHERE {where} ORDER BY id LIMIT {limit}"
)
_POLL_FULL = "snapshot"
# A lean poll (no watch stream open here) reads no snapshot of a version that leaves its job
# leased: a progress report's, most of them under load. Only watch streams decode those, and
# every process read each one back (13 % of a serving process's CPU at 3,800 reports/s, bench/fleet.py).
_POLL_LEAN = (
    f"CASE WHEN to_status IN ({', '.join(repr(name) for name in sorted(_LEASED_NAMES))}) THEN NULL ELSE snapshot END"
)


def _poll_sql(high: int, gaps: Sequence[int], batch: int, full: bool) -> str:
    chunks = (", ".join(str(int(i)) for i in gaps[at : at + GAP_CHUNK]) for at in range(0, len(gaps), GAP_CHUNK))
    where = " OR ".join([f"id > {int(high)}", *(f"id IN ({chunk})" for chunk in chunks)])
    return _POLL_SQL.format(snapshot=_POLL_FULL if full else _POLL_LEAN, where=where, limit=int(batch))


def _start_window(conn: Connection, window: int, grace_s: float, now: datetime) -> tuple[int, list[int]]:
    """MAX(id), and the ids missing below it that may still commit.

    A missing id X that may still commit is younger than every row above it, so a row
    above X written long ago (older than twice the grace, for margin) means X is older
    still: rolled back, or deleted by retention. Only ids above the newest such old row
    count, which keeps a quiet database with pruned history from opening thousands of gaps.
    """
    high = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(job_event.c.id), 0))).scalar_one())
    low = max(0, high - window)
    rows = conn.execute(sa.select(job_event.c.id, job_event.c.created_at).where(job_event.c.id > low)).all()
    cutoff = now - timedelta(seconds=2 * grace_s)  # events' times are the store's clock's (jobwire.db.clock)
    base = max((r.id for r in rows if r.created_at < cutoff), default=low)
    present = {r.id for r in rows}
    return high, [i for i in range(base + 1, high) if i not in present]


class FeedReader:
    """Tails job_event for one process, on one held connection, from one thread.

    Not thread-safe: the event tail calls it from one thread only (jobwire.runtime.tail).
    """

    def __init__(self, db: Database, *, grace_s: float = GAP_GRACE_S, batch: int = BATCH) -> None:
        self.db = db
        self.batch = batch
        self._grace = grace_s
        self._conn: Connection | None = None
        self.cursor: FeedCursor | None = None

    def start(self, window: int = START_WINDOW) -> None:
        now = self.db.clock.now()
        high, missing = self._run(lambda c: _start_window(c, window, self._grace, now))
        self.cursor = FeedCursor(high, grace_s=self._grace)
        self.cursor.open_gaps(missing)

    def poll(self, full: bool = True) -> list[FeedRow]:
        """Visible events committed since the last poll, in id order (one statement); not
        `full`: without the snapshot of a version that leaves its job leased."""
        cursor = self.cursor
        assert cursor is not None, "start() first"
        sql = _poll_sql(cursor.high, list(cursor.gaps), self.batch, full)
        rows = self._run(lambda c: c.exec_driver_sql(sql).all())
        cursor.advance([r[0] for r in rows])
        lean = () if full else _LEASED_NAMES
        return [
            FeedRow(event_id, job_id, tenant, job_no, version, kind, to_status, snapshot)
            for event_id, job_id, tenant, job_no, version, kind, visible, to_status, snapshot in rows
            if visible and (snapshot is not None or to_status in lean)
        ]

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(DBAPIError):  # it may be the broken connection
                conn.close()

    def _run(self, fn: Callable[[Connection], Any]) -> Any:
        # A held connection: no pool checkout and no pre-ping per poll, so a poll costs the
        # database one statement. Autocommit (MySQL) ends each read without a COMMIT trip;
        # SQLite's short read transaction is local and free.
        try:
            conn = self._connection()
            if self.db.is_mysql:
                result = fn(conn)
            else:
                with conn.begin():
                    result = fn(conn)
        except Exception as exc:
            self.close()  # whatever broke, the next poll starts on a fresh connection
            if isinstance(exc, DBAPIError):
                raise StoreUnavailable() from exc
            raise
        self.db.reached()
        return result

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = self.db.engine.connect()
            if self.db.is_mysql:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            self._conn = conn
        return self._conn


def _feed_row(r: Any) -> FeedRow:
    return FeedRow(
        id=r.id, job_id=r.job_id, tenant=r.tenant, job_no=r.job_no, version=r.version, kind=r.kind,
        to_status=r.to_status, snapshot=r.snapshot,
    )  # fmt: skip


# -- what a watch reads when it starts --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Located:
    """A job as a watch starts from it: its row id (the key of replays and pages) and its record."""

    job_id: int
    record: JobRecord


def _located(conn: Connection, rows: Sequence[Row], no_worker_after: timedelta) -> list[Located]:
    """`rows` where they stand now, as Get and ListJobs show them."""
    return [Located(row["id"], record) for row, record in zip(rows, records(conn, rows, no_worker_after), strict=True)]


@dataclass(frozen=True, kw_only=True)
class WatchStart:
    """A job as it is now (where it stands, place in line included) and the visible events after a version."""

    current: Located
    missed: list[FeedRow]


def watch_start(
    conn: Connection, tenant: str, job_no: str, after_version: int, no_worker_after: timedelta
) -> WatchStart | None:
    """The job and, when resuming (`after_version > 0`), what changed since; None if unknown."""
    row = load(conn, job.c.tenant == tenant, job.c.job_no == job_no)
    if row is None:
        return None
    missed: list[FeedRow] = []
    if 0 < after_version < row["version"] - 1:
        # The current version comes from the row itself (where it stands now).
        missed = replay(conn, row["id"], after_version, row["version"] - 1)
    return WatchStart(current=_located(conn, [row], no_worker_after)[0], missed=missed)


def events(conn: Connection, ids: Sequence[int]) -> list[FeedRow]:
    """The events of `ids`, with their snapshots (what a lean poll read without them), in id order."""
    return _in_chunks(conn, ids, job_event.c.id, job_event.c.id.in_)


def replay(conn: Connection, job_id: int, after: int, upto: int | None = None) -> list[FeedRow]:
    """Visible events of one job with `after < version <= upto`, progress coalesced.

    Consecutive PROGRESS events (same attempt, same stage, same status: a report that
    changes any of those is another kind) are coalesced to the newest, so a long stage
    replays as one message while every transition survives. Two steps keep the
    snapshots of the coalesced-away rows out of the transfer.
    """
    where = [job_event.c.job_id == job_id, job_event.c.version > after, job_event.c.visible]
    if upto is not None:
        where.append(job_event.c.version <= upto)
    marks = conn.execute(sa.select(job_event.c.version, job_event.c.kind).where(*where).order_by(job_event.c.version))
    keep = coalesced(list(marks))
    # visible again: an invisible row (a checkpoint saved, evidence) shares its version with the change
    return _in_chunks(
        conn, keep, job_event.c.version,
        lambda chunk: sa.and_(job_event.c.job_id == job_id, job_event.c.version.in_(chunk), job_event.c.visible),
    )  # fmt: skip


def _in_chunks(
    conn: Connection, keys: Sequence[int], order: Any, where: Callable[[Sequence[int]], sa.ColumnElement[bool]]
) -> list[FeedRow]:
    """The events `where` picks for `keys`, a chunk of keys per statement, with their snapshots."""
    rows: list[FeedRow] = []
    for i in range(0, len(keys), GAP_CHUNK):
        query = sa.select(*_FEED_COLUMNS, job_event.c.snapshot).where(where(keys[i : i + GAP_CHUNK]))
        rows += [_feed_row(r) for r in conn.execute(query.order_by(order))]
    return rows


def coalesced(marks: Sequence[Any]) -> list[int]:
    """Versions to keep: all but a PROGRESS event directly followed by another PROGRESS."""
    keep = []
    for i, (version, kind) in enumerate(marks):
        following = marks[i + 1][1] if i + 1 < len(marks) else None
        if not (kind == EventKind.PROGRESS and following == EventKind.PROGRESS):
            keep.append(version)
    return keep


def owner_jobs(
    conn: Connection, tenant: str, owner: str, no_worker_after: timedelta, *, after_id: int = 0, limit: int = OWNER_PAGE
) -> list[Located]:
    """A page of an owner's unfinished jobs after `after_id`, oldest first, where they stand.

    Statements per page and per queue, whatever the page's size (a count per job made an
    owner with 4,000 queued jobs wait 6.8 s for the first message).
    """
    query = (
        select_jobs(
            job.c.tenant == tenant,
            job.c.owner == owner,
            job.c.status.not_in([s.value for s in TERMINAL]),
            job.c.id > after_id,
        )
        .order_by(job.c.id)
        .limit(limit)
    )
    return _located(conn, job_rows(conn, query), no_worker_after)


def jobs_by_number(conn: Connection, tenant: str, job_nos: Sequence[str], no_worker_after: timedelta) -> list[Located]:
    """The named jobs of `tenant` that exist, in the order asked, each where it stands."""
    found: dict[str, Row] = {}
    for i in range(0, len(job_nos), GAP_CHUNK):
        query = select_jobs(job.c.tenant == tenant, job.c.job_no.in_(job_nos[i : i + GAP_CHUNK]))
        found.update((r["job_no"], r) for r in job_rows(conn, query))
    return _located(conn, [found[no] for no in job_nos if no in found], no_worker_after)
