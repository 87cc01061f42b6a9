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
- When a job ends (`follow_up`, run by `changes.apply_ops` in the ending's transaction):
  its waiting dependents are locked, their dependencies counted again, and each is
  `Settle`d: one fewer to wait for (DEPENDENCY_READY, still QUEUED; runnable at zero), or
  CANCELLED naming the dependency that ended FAILED or CANCELLED (DEPENDENCY_FAILED),
  which ends it in turn, so its own dependents follow in the next round.
- A count left behind (a chain deeper than one transaction's rounds) is found by the
  housekeeping sweep (`due`) and settled the same way within one reaper interval.

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
from jobwire.db.sql import Lock, Name, name_params
from jobwire.db.tables import job, job_dependency
from jobwire.db.wire import Statement, Wire
from jobwire.domain.commands import NewJob
from jobwire.domain.errors import DependencyEnded, InvalidArgument, JobwireError
from jobwire.domain.evidence import EventKind
from jobwire.domain.states import Action, Status

ENDED = frozenset({Status.FAILED.value, Status.CANCELLED.value})


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
    rows = []
    for job_no in new.depends_on:
        row = found.get((new.tenant, job_no))
        if row is None:  # another tenant's job of that number is not this one's to name
            return InvalidArgument("depends_on", f"{job_no} is not a job of yours")
        if row["status"] in ENDED:
            return DependencyEnded(job_no, row["status"])
        rows.append(row)
    return Waits(ids=tuple(r["id"] for r in rows), waiting_on=sum(r["status"] != Status.READY.value for r in rows))


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


async def follow_up(wire: Wire, ended: Sequence[Row]) -> list[JobOp[Any]]:
    """The `Settle` ops for the waiting dependents of the jobs that just `ended`, locked.

    Only jobs marked `has_dependents` are looked up: the ending's UPDATE guarded on the
    flag (jobwire.db.changes), so it is as fresh as the row the ending was decided on.
    """
    ended = [row for row in ended if row["has_dependents"]]
    if not ended:
        return []
    params = {f"e{i}": row["id"] for i, row in enumerate(ended)}
    found = await wire.fetch(wire.sql.waiting_dependents(len(ended)), params, wire.sql.dependent_shape)
    # A job that depends on two of them is found twice: settled once.
    return await settle_ops(wire, list(dict.fromkeys((r["tenant"], r["job_no"]) for r in found)))


async def settle_ops(wire: Wire, jobs: Sequence[Name]) -> list[JobOp[Any]]:
    """One `Settle` per (tenant, job_no), from its dependencies as they are now (the caller holds its lock)."""
    if not jobs:
        return []
    rows = await wire.fetch(wire.sql.dependency_counts(len(jobs)), name_params(jobs), wire.sql.count_shape)
    counts = {(r["tenant"], r["job_no"]): r for r in rows}
    return [
        Settle(
            tenant=tenant,
            job_no=job_no,
            unfinished=int(counts[tenant, job_no]["unfinished"]),
            ended_by=_ended_by(counts[tenant, job_no]),
        )
        for tenant, job_no in jobs
        if (tenant, job_no) in counts
    ]


def _ended_by(count: Row) -> tuple[str, str] | None:
    if count["failed_by"]:
        return count["failed_by"], Status.FAILED.value
    if count["cancelled_by"]:
        return count["cancelled_by"], Status.CANCELLED.value
    return None


@dataclass(frozen=True, kw_only=True)
class Settle(JobOp[str | None]):
    """A waiting job after a dependency ended: one fewer to wait for, or CANCELLED with it.

    `unfinished` and `ended_by` were counted after the job's row was locked, so they are
    no older than the row it is decided on.
    """

    tenant: str
    job_no: str
    unfinished: int
    ended_by: tuple[str, str] | None  # (job number, FAILED or CANCELLED)
    fresh = True

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if row is None or row["status"] != Status.QUEUED.value or not row["waiting_on"]:
            return None
        if self.ended_by is not None:
            job_no, status = self.ended_by
            why = f"dependency {job_no} ended {status}; cancelled with it"
            values = {"status": Status.CANCELLED.value, "finished_at": now, "waiting_on": 0}
            return Change(action=Action.DEPENDENCY_FAILED, kind=EventKind.DEPENDENCY_FAILED, values=values, detail=why)
        if self.unfinished >= row["waiting_on"]:
            return None
        why = f"{row['waiting_on'] - self.unfinished} more READY; waiting for {self.unfinished}"
        return Change(
            action=Action.DEPENDENCY_READY, kind=EventKind.DEPENDENCY_READY, values={"waiting_on": self.unfinished},
            detail=why if self.unfinished else "every dependency is READY; runnable",
        )  # fmt: skip

    def outcome(self, row: Row | None, change: Change | None) -> str | None:
        return change.kind if change is not None else None


def due(conn: Connection, limit: int) -> list[Name]:
    """(tenant, job_no) of waiting jobs with a dependency ended since they were counted (the sweep)."""
    dependency = job.alias("dependency")
    unfinished = sa.func.sum(sa.case((dependency.c.status != Status.READY.value, 1), else_=0))
    ended = sa.func.sum(sa.case((dependency.c.status.in_(sorted(ENDED)), 1), else_=0))
    query = (
        sa.select(job.c.tenant, job.c.job_no)
        .select_from(
            job.join(job_dependency, job_dependency.c.job_id == job.c.id).join(
                dependency, dependency.c.id == job_dependency.c.depends_on_id
            )
        )
        .where(job.c.status == Status.QUEUED.value, job.c.waiting_on > 0)
        .group_by(job.c.id, job.c.tenant, job.c.job_no, job.c.waiting_on)
        .having(sa.or_(unfinished < job.c.waiting_on, ended > 0))
        .order_by(job.c.id)
        .limit(limit)
    )
    return [(r.tenant, r.job_no) for r in conn.execute(query)]


async def settle_due(wire: Wire, jobs: Sequence[Name]) -> list[JobOp[Any]]:
    """The sweep's `Settle` ops for `jobs`, their rows locked first (a sibling's ending may hold one)."""
    await wire.fetch(wire.sql.rows_by_name(len(jobs), Lock.UPDATE), name_params(jobs), wire.sql.row_shape)
    return await settle_ops(wire, jobs)
