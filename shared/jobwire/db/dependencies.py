"""Jobs that wait for other jobs: the edges a submit writes, and what a dependency's end does.

A job submitted with `depends_on` is QUEUED with `waiting_on` = how many of them are not
READY yet; the claim takes only jobs with `waiting_on = 0` (jobwire.db.sql `claim`, on the
claim index), so a job is never leased while a dependency is unfinished.

- At submit (`resolve`): each dependency must exist in the tenant (numbers are per tenant:
  a number names the submitting tenant's job of that number) and must not have ended
  FAILED or CANCELLED. The dependencies are read locked, so one still running cannot end
  between that read and the commit of the new job and its `job_dependency` rows, and each is
  marked `has_dependents`: its ending, guarded on that flag, then reads the new edges and
  counts the new job. An ending of a job never depended on reads no edges at all.
- When a job ends (`FollowUps`, run by `changes.apply_ops` in the ending's transaction):
  its waiting dependents are locked, their dependencies counted again, and each is
  `Settle`d: one fewer to wait for (DEPENDENCY_READY, still QUEUED; runnable at zero), or
  CANCELLED naming the dependency that ended FAILED or CANCELLED (DEPENDENCY_FAILED),
  which ends it in turn, so its own dependents follow in the next round.
- One transaction settles at most a chunk of dependents (`JobStore.chunk`, CHUNK) in at
  most MAX_ROUNDS rounds: a transaction holds SQLite, and its rows on MySQL, for every
  tenant, so a root with 50,000 dependents must not settle them all at once. What is left
  is `Pending`: the ended jobs, and the last dependent settled (they are read in id order,
  ix_job_dependency_on). The process that committed the ending settles it at once, a chunk
  per transaction (jobwire.runtime.settling). Until then a dependent of a FAILED job is
  still QUEUED with `waiting_on > 0`: never claimable, like any waiting job.
- Pending work lives in memory only. After a crash the housekeeping sweep (`due`) finds the
  ended dependencies of waiting jobs whose count is stale, and none of whose dependents
  anyone settled for a while, and settles them the same way.

A dependency's Retry from FAILED does not bring back the jobs its failure cancelled.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.changes import Change, JobOp, Row
from jobwire.db.sql import Lock, name_params
from jobwire.db.tables import job, job_dependency
from jobwire.db.wire import Statement, Wire
from jobwire.domain.commands import NewJob
from jobwire.domain.dependencies import ENDED, on_dependency_ended, waiting_on
from jobwire.domain.errors import JobwireError
from jobwire.domain.job import Name
from jobwire.domain.states import Action, Status


@dataclass(frozen=True, slots=True)
class Waits:
    """A new job's dependencies as found: their ids, and how many are not READY yet."""

    ids: tuple[int, ...]
    waiting_on: int


async def resolve(wire: Wire, news: Sequence[NewJob]) -> list[Waits | JobwireError]:
    """Each new job's `Waits`, or why it is refused; read (share-locked) in one statement."""
    names = sorted({(new.tenant, n) for new in news for n in new.depends_on})
    found: dict[Name, Row] = {}
    if names:
        rows = await wire.fetch(wire.sql.dependencies(len(names)), name_params(names), wire.sql.dependency_shape)
        found = {(r["tenant"], r["job_no"]): r for r in rows}
    return [_waits(new, found) for new in news]


def _waits(new: NewJob, found: dict[Name, Row]) -> Waits | JobwireError:
    rows = [found.get((new.tenant, job_no)) for job_no in new.depends_on]
    statuses = [None if r is None else Status(r["status"]) for r in rows]
    named = list(zip(new.depends_on, statuses, strict=True))
    try:
        count = waiting_on(named)
    except JobwireError as refused:
        return refused
    return Waits(ids=tuple(r["id"] for r in rows if r is not None), waiting_on=count)


def row_values(new: NewJob, waits: Waits | None) -> dict[str, Any]:
    """The job columns that record its dependencies."""
    if waits is None or not new.depends_on:
        return {"depends_on": None, "waiting_on": 0}
    return {"depends_on": json.dumps(list(new.depends_on)), "waiting_on": waits.waiting_on}


def edges(wire: Wire, name: Name, waits: Waits) -> list[Statement]:
    """The new job's edges, and the mark on each dependency that its ending has dependents."""
    tenant, job_no = name
    out: list[Statement] = [
        (wire.sql.insert_dependency, {"tenant": tenant, "job_no": job_no, "depends_on_id": i}) for i in waits.ids
    ]
    return out + [(wire.sql.mark_depended_on, {"id": i}) for i in waits.ids]


# A transaction settles at most CHUNK dependents, in at most MAX_ROUNDS rounds of follow-ups
# (a chain's levels). Measured on a busy two-core machine (tests/fault/test_cancel_storm.py):
# a chunk of 50 holds SQLite 15-50 ms, and another tenant's Submit p99 stays under 100 ms on
# either database (at 100, 123 ms on MariaDB: a chunk's rows and events hold the event loop).
CHUNK = 50
MAX_ROUNDS = 8


Settling = tuple[list[JobOp[Any]], dict[Name, Row]]  # Settle ops, and the rows they decide on (locked)


@dataclass(frozen=True, slots=True)
class Pending:
    """Waiting dependents of `sources` (jobs that ended) still to settle: those after job id `after`."""

    sources: tuple[int, ...]
    after: int = 0


class FollowUps:
    """The dependents one transaction settles (`changes.FollowUp`): at most `budget` jobs in at
    most MAX_ROUNDS rounds; what did not fit is `left`, for the settler. One per transaction run."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.rounds = MAX_ROUNDS
        self.left: list[Pending] = []

    async def __call__(self, wire: Wire, ended: Sequence[Row]) -> Settling:
        """The `Settle` ops for the waiting dependents of the jobs that just `ended`, as many as fit.

        Only jobs marked `has_dependents` are looked up: the ending's UPDATE guarded on the
        flag (jobwire.db.changes), so it is as fresh as the row the ending was decided on.
        """
        sources = tuple(row["id"] for row in ended if row["has_dependents"])
        if not sources:
            return [], {}
        if not self.rounds:
            self.left.append(Pending(sources))
            return [], {}
        self.rounds -= 1
        return await self.settle(wire, Pending(sources))

    async def settle(self, wire: Wire, pending: Pending) -> Settling:
        """The `Settle` ops for the next of `pending`'s waiting dependents that fit, and their rows, locked."""
        if self.budget <= 0:
            self.left.append(pending)
            return [], {}
        params: dict[str, Any] = {f"e{i}": source for i, source in enumerate(pending.sources)}
        params.update(after=pending.after, limit=self.budget)
        found = await wire.fetch(wire.sql.waiting_dependents(len(pending.sources)), params, wire.sql.dependent_shape)
        self.budget -= len(found)
        if not self.budget:  # perhaps more after the last one found
            self.left.append(Pending(pending.sources, found[-1]["id"]))
        # A job that depends on two of them is found twice: settled once.
        return await _settle_locked(wire, list(dict.fromkeys((r["tenant"], r["job_no"]) for r in found)))


def _ended_by(count: Row) -> tuple[str, Status] | None:
    if count["failed_by"]:
        return count["failed_by"], Status.FAILED
    if count["cancelled_by"]:
        return count["cancelled_by"], Status.CANCELLED
    return None


@dataclass(frozen=True, kw_only=True)
class Settle(JobOp[str | None]):
    """A waiting job after a dependency ended: one fewer to wait for, or CANCELLED with it
    (jobwire.domain.dependencies.on_dependency_ended).

    `unfinished` and `ended_by` were counted after the job's row was locked, so they are
    no older than the row it is decided on.
    """

    tenant: str
    job_no: str
    unfinished: int
    ended_by: tuple[str, Status] | None  # (job number, FAILED or CANCELLED)
    fresh = True

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if row is None:
            return None
        settled = on_dependency_ended(Status(row["status"]), row["waiting_on"], self.unfinished, self.ended_by)
        if settled is None:
            return None
        values: dict[str, object] = {"waiting_on": settled.waiting_on}
        if settled.status is Status.CANCELLED:
            values.update(status=settled.status.value, finished_at=now)
            action = Action.DEPENDENCY_FAILED
        else:
            action = Action.DEPENDENCY_READY
        return Change(action=action, kind=settled.kind, values=values, detail=settled.detail)

    def outcome(self, row: Row | None, change: Change | None) -> str | None:
        return change.kind if change is not None else None


def due(conn: Connection, limit: int, quiet_since: datetime) -> list[Pending]:
    """The sweep's work: the ended dependencies of the first `limit` waiting jobs whose count
    is stale (a dependency ended and they were not settled for it), in groups of `limit`.

    A dependency none of whose dependents changed after `quiet_since` only: one with a
    dependent settled since is being settled now (its settler lives, maybe in another process).
    """
    dependency = job.alias("dependency")
    unfinished = sa.func.sum(sa.case((dependency.c.status != Status.READY.value, 1), else_=0))
    ended = sa.func.sum(sa.case((dependency.c.status.in_(sorted(s.value for s in ENDED)), 1), else_=0))
    edges = job_dependency.join(dependency, dependency.c.id == job_dependency.c.depends_on_id)
    stale = (
        sa.select(job.c.id)
        .select_from(job.join(edges, job_dependency.c.job_id == job.c.id))
        .where(job.c.status == Status.QUEUED.value, job.c.waiting_on > 0)
        .group_by(job.c.id, job.c.waiting_on)
        .having(sa.or_(unfinished < job.c.waiting_on, ended > 0))
        .order_by(job.c.id)
        .limit(limit)
        .subquery()
    )
    # Which of a stale job's ended dependencies it missed cannot be told from a count: each is
    # settled again, and a dependent already counted for it is left as it is.
    sources = (
        sa.select(job_dependency.c.depends_on_id)
        .select_from(edges.join(stale, stale.c.id == job_dependency.c.job_id))
        .where(dependency.c.status.in_(sorted(s.value for s in ENDED | {Status.READY})))
        .distinct()
    )
    ids = set(conn.execute(sources).scalars())
    if ids:
        ids -= set(conn.execute(_settled_since(ids, quiet_since)).scalars())
    ordered = sorted(ids)
    return [Pending(tuple(ordered[i : i + limit])) for i in range(0, len(ordered), limit)]


def _settled_since(ids: set[int], since: datetime) -> sa.Select[tuple[int]]:
    """Which of `ids` have a dependent that changed after `since` (a change that is not its submit)."""
    return (
        sa.select(job_dependency.c.depends_on_id)
        .select_from(job_dependency.join(job, job.c.id == job_dependency.c.job_id))
        .where(
            job_dependency.c.depends_on_id.in_(sorted(ids)),
            job.c.updated_at > since,
            job.c.updated_at > job.c.created_at,
        )
        .distinct()
    )


async def _settle_locked(wire: Wire, jobs: Sequence[Name]) -> Settling:
    """One `Settle` per (tenant, job_no), and its row, read and locked first: counted after the
    lock, the counts are no older than the row (two dependencies ending at once see each other's end)."""
    if not jobs:
        return [], {}
    params = name_params(jobs)
    rows = await wire.fetch(wire.sql.rows_by_name(len(jobs), Lock.UPDATE), params, wire.sql.row_shape)
    counted = await wire.fetch(wire.sql.dependency_counts(len(jobs)), params, wire.sql.count_shape)
    counts = {(r["tenant"], r["job_no"]): r for r in counted}
    ops: list[JobOp[Any]] = [
        Settle(
            tenant=tenant,
            job_no=job_no,
            unfinished=int(counts[tenant, job_no]["unfinished"]),
            ended_by=_ended_by(counts[tenant, job_no]),
        )
        for tenant, job_no in jobs
        if (tenant, job_no) in counts
    ]
    return ops, {(r["tenant"], r["job_no"]): r for r in rows}
