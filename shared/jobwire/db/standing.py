"""Where QUEUED jobs stand, read from the database: the one place every view of a job reads it.

Get, ListJobs and a watch's first messages turn their rows into records here (`records`).
A page of rows costs, per tenant: one statement for the job types served in its queues
(worker_claim: a claim, or a busy worker's heartbeat after its claim, within
JOBWIRE_NO_WORKER_AFTER by the tenant's workers or a shared fleet's, tenant "*"), one for
the queues that hold their jobs back (jobwire.db.queue_limits.holds), one for the
dependencies still awaited; and per queue one statement for the places in line.

A place in line counts the jobs ahead that a worker could claim now: runnable (no
dependency left, run_after passed) and of a served job type. So a job no worker serves is
never ahead of one a worker does. The count is a range on the claim index (tenant, queue,
status, waiting_on, priority, id); run_after and job_type are read from the rows of that
range, as run_after always was.

A stream message after the first is a version from the change feed (`restand`): its QUEUED
versions get the same facts bar the place in line, which is not versioned, so streams send
none. Each queue's facts are kept for QUEUE_FACTS_TTL_S (`RecentQueues`): a burst of events
in one queue costs one read, however many streams watch it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db import queue_limits
from jobwire.db.engine import Database
from jobwire.db.reads import Row, clock
from jobwire.db.rows import record_from_row
from jobwire.db.tables import job, job_dependency, worker_claim
from jobwire.domain.commands import EVERY_TENANT
from jobwire.domain.job import JobRecord
from jobwire.domain.standing import QueueStanding, Standing, stand
from jobwire.domain.states import Status

QueueKey = tuple[str, str]  # tenant, queue
QUEUE_FACTS_TTL_S = 1.0
_CHUNK = 500  # ids per IN list
_QUEUED = Status.QUEUED.value


def records(conn: Connection, rows: Sequence[Row], no_worker_after: timedelta) -> list[JobRecord]:
    """`rows` (read with `db_now`) as records, each QUEUED one standing as of now, in place in line too."""
    queued = [r for r in rows if r["status"] == _QUEUED]
    if not queued:
        return [record_from_row(r) for r in rows]
    facts = queues(conn, {(r["tenant"], r["queue"]) for r in queued}, queued[0]["db_now"], no_worker_after)
    awaited = dependencies_left(conn, [r["id"] for r in queued if r["waiting_on"]])
    places = _places(conn, [r for r in queued if not r["waiting_on"]], facts)

    def record(row: Row) -> JobRecord:
        found = record_from_row(row)
        if row["status"] != _QUEUED:
            return found
        facts_now = facts[row["tenant"], row["queue"]]
        waiting, place = awaited.get(row["id"], ()), places.get(row["id"])
        return stand(found, Standing(queue=facts_now, waiting_for=waiting, queue_position=place))

    return [record(r) for r in rows]


def queues(
    conn: Connection, keys: Collection[QueueKey], now: datetime, no_worker_after: timedelta
) -> dict[QueueKey, QueueStanding]:
    """What each (tenant, queue) of `keys` tells its QUEUED jobs at `now` (the database clock)."""
    by_tenant: dict[str, set[str]] = {}
    for tenant, queue in keys:
        by_tenant.setdefault(tenant, set()).add(queue)
    out: dict[QueueKey, QueueStanding] = {}
    for tenant, names in by_tenant.items():
        served = _served(conn, tenant, names, now - no_worker_after)
        held = queue_limits.holds(conn, tenant, names)
        for queue in names:
            out[tenant, queue] = QueueStanding(served=frozenset(served.get(queue, ())), held=held.get(queue))
    return out


def _served(conn: Connection, tenant: str, names: Collection[str], since: datetime) -> dict[str, set[str]]:
    """The job types of each queue a worker claimed for after `since` (primary-key ranges of worker_claim)."""
    cutoff = sa.literal(since, type_=worker_claim.c.claimed_at.type)
    query = sa.select(worker_claim.c.queue, worker_claim.c.job_type).where(
        worker_claim.c.tenant.in_(sorted({tenant, EVERY_TENANT})),
        worker_claim.c.queue.in_(sorted(names)),
        worker_claim.c.claimed_at > cutoff,
    )
    served: dict[str, set[str]] = {}
    for queue, job_type in conn.execute(query):
        served.setdefault(queue, set()).add(job_type)
    return served


def dependencies_left(conn: Connection, job_ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
    """The job numbers of each job's dependencies not READY yet, in job number order (absent: none left)."""
    dependency = job.alias("dependency")
    found: dict[int, list[str]] = {}
    for i in range(0, len(job_ids), _CHUNK):
        query = (
            sa.select(job_dependency.c.job_id, dependency.c.job_no)
            .select_from(job_dependency.join(dependency, dependency.c.id == job_dependency.c.depends_on_id))
            .where(job_dependency.c.job_id.in_(job_ids[i : i + _CHUNK]), dependency.c.status != Status.READY.value)
            .order_by(job_dependency.c.job_id, dependency.c.job_no)
        )
        for job_id, job_no in conn.execute(query):
            found.setdefault(int(job_id), []).append(job_no)
    return {job_id: tuple(names) for job_id, names in found.items()}


def _places(conn: Connection, rows: Sequence[Row], facts: Mapping[QueueKey, QueueStanding]) -> dict[int, int]:
    """The place in line of each runnable QUEUED row: a statement per queue, not per job.

    A queue's claimable jobs up to the last of its rows in claim order are numbered by a
    window function on the claim index; each row takes its number. A row a worker could not
    claim now itself (run_after later, a job type nobody serves) is not numbered there and is
    counted alone, as is the one row of a Get.
    """
    places: dict[int, int] = {}
    groups: dict[QueueKey, list[Row]] = {}
    for row in rows:
        groups.setdefault((row["tenant"], row["queue"]), []).append(row)
    for key, members in groups.items():
        served = facts[key].served
        if not served:
            places.update((m["id"], 0) for m in members)  # nothing a worker could claim is ahead
            continue
        if len(members) > 1:
            places.update(_numbered(conn, key, members, served))
        for member in members:
            if member["id"] not in places:
                places[member["id"]] = _ahead(conn, member, served)
    return places


def _claimable(tenant: str, queue: str, served: frozenset[str], now: datetime) -> list[sa.ColumnElement[bool]]:
    return [
        job.c.tenant == tenant,
        job.c.queue == queue,
        job.c.status == _QUEUED,
        job.c.waiting_on == 0,
        job.c.run_after <= now,
        job.c.job_type.in_(sorted(served)),
    ]


def _before(row: Row, *, inclusive: bool = False) -> sa.ColumnElement[bool]:
    """Jobs a claim takes before `row` (ORDER BY priority DESC, id), and `row` itself if `inclusive`."""
    same = job.c.id <= row["id"] if inclusive else job.c.id < row["id"]
    return sa.or_(job.c.priority > row["priority"], sa.and_(job.c.priority == row["priority"], same))


def _ahead(conn: Connection, row: Row, served: frozenset[str]) -> int:
    claimable = _claimable(row["tenant"], row["queue"], served, row["db_now"])
    query = sa.select(sa.func.count()).select_from(job).where(*claimable, _before(row))
    return int(conn.execute(query).scalar_one())


def _numbered(conn: Connection, key: QueueKey, members: Sequence[Row], served: frozenset[str]) -> dict[int, int]:
    last = max(members, key=lambda m: (-m["priority"], m["id"]))
    number = sa.func.row_number().over(order_by=(job.c.priority.desc(), job.c.id)) - 1
    ranked = (
        sa.select(job.c.id, number.label("position"))
        .where(*_claimable(*key, served, last["db_now"]), _before(last, inclusive=True))
        .subquery()
    )
    wanted = [m["id"] for m in members]
    found = conn.execute(sa.select(ranked.c.id, ranked.c.position).where(ranked.c.id.in_(wanted)))
    return {int(i): int(p) for i, p in found}


# -- the versions a stream sends after its first messages ---------------------------------


class RecentQueues:
    """Queue facts read for stream messages, each kept QUEUE_FACTS_TTL_S.

    A change made through this process (a queue's limits, a claim recorded for a kind)
    forgets its queue at once; one made through another process shows within the TTL.
    """

    def __init__(self, ttl_s: float = QUEUE_FACTS_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_s
        self._clock = clock
        self._kept: dict[QueueKey, tuple[float, QueueStanding]] = {}
        self._forgets = 0  # a read that overlapped a forget is not kept: it may predate the change

    def known(self, keys: Collection[QueueKey]) -> tuple[dict[QueueKey, QueueStanding], list[QueueKey], int]:
        """The facts kept for `keys`, the keys to read, and the mark to `keep` what is read with."""
        now = self._clock()
        kept: dict[QueueKey, QueueStanding] = {}
        for key in keys:
            found = self._kept.get(key)
            if found is not None and now - found[0] < self._ttl:
                kept[key] = found[1]
        return kept, sorted(set(keys) - kept.keys()), self._forgets

    def keep(self, found: Mapping[QueueKey, QueueStanding], mark: int) -> None:
        if mark != self._forgets:
            return
        now = self._clock()
        if len(self._kept) > 4 * len(found) + 1024:  # queues nobody watches any more
            self._kept = {k: v for k, v in self._kept.items() if now - v[0] < self._ttl}
        self._kept.update((key, (now, facts)) for key, facts in found.items())

    def forget(self, tenant: str, queue: str) -> None:
        """The queue's facts changed (a shared fleet's claim, tenant "*": every tenant's queue of that name)."""
        self._forgets += 1
        for key in [k for k in self._kept if k[1] == queue and tenant in (k[0], EVERY_TENANT)]:
            self._kept.pop(key, None)


def restand(
    db: Database, recent: RecentQueues, versions: Sequence[tuple[int, JobRecord]], no_worker_after: timedelta
) -> list[JobRecord]:
    """Versions from the change feed (row id, record), each QUEUED one standing as a read shows it
    now, bar its place in line; no statement when every queue's facts are kept and none waits."""
    queued = [(job_id, r) for job_id, r in versions if r.status is Status.QUEUED]
    if not queued:
        return [r for _, r in versions]
    facts, missing, mark = recent.known({(r.tenant, r.queue) for _, r in queued})
    depending = [job_id for job_id, r in queued if r.depends_on]
    awaited: dict[int, tuple[str, ...]] = {}
    if missing or depending:

        def read(conn: Connection) -> tuple[dict[QueueKey, QueueStanding], dict[int, tuple[str, ...]]]:
            found = queues(conn, missing, clock(conn), no_worker_after) if missing else {}
            return found, dependencies_left(conn, depending)

        found, awaited = db.read(read)
        recent.keep(found, mark)
        facts.update(found)

    def record(job_id: int, r: JobRecord) -> JobRecord:
        if r.status is not Status.QUEUED:
            return r
        return stand(r, Standing(queue=facts[r.tenant, r.queue], waiting_for=awaited.get(job_id, ())))

    return [record(job_id, r) for job_id, r in versions]
