"""A worker's Claim in the store: the candidates per queue, what fits one reply, and the op
that leases each (QUEUED -> RUNNING, a new epoch and token); and the worker's own rows it
writes on the way (ListWorkers' last seen, NO_WORKER's claimed kinds, a heartbeat's touch).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobwire.db.changes import Change, JobOp, Row
from jobwire.db.lease_tokens import new_token
from jobwire.db.queue_limits import Budgets
from jobwire.db.rows import (
    plan_of,
    progress_moved,
    review_of,
)
from jobwire.db.wire import Many, Statement, Wire
from jobwire.domain import stages as stage_plans
from jobwire.domain.commands import Claimant
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import Name
from jobwire.domain.lease import Lease
from jobwire.domain.limits import MAX_GRPC_MESSAGE_BYTES
from jobwire.domain.stages import StageDef
from jobwire.domain.states import Action, Status
from jobwire.domain.timeouts import deadline
from jobwire.process_state.turns import Turns

# Besides payload and checkpoint a lease carries its token, names and the stage plan (at
# most 8,000 characters, 4 bytes each in UTF-8): this bounds all of it with room to spare.
LEASE_OVERHEAD_BYTES = 40 << 10
CLAIM_REPLY_BUDGET = MAX_GRPC_MESSAGE_BYTES - (64 << 10)


def fitting_reply(rows: Sequence[Row], budget: int = CLAIM_REPLY_BUDGET) -> list[Row]:
    """The first of `rows` whose leases fit one Claim reply; always the first (one job always fits).

    A reply over the transport's limit fails after its leases committed, stranding them
    until they stall; the jobs left out stay queued.
    """
    taken: list[Row] = []
    used = 0
    for row in rows:
        size = len(row["payload"]) + len(row["checkpoint"] or b"") + LEASE_OVERHEAD_BYTES
        if taken and used + size > budget:
            break
        taken.append(row)
        used += size
    return taken


Lane = tuple[str, str]  # (tenant, queue): what one index-ordered claim scan reads


async def candidates(
    wire: Wire, who: Claimant, max_jobs: int, taken: Collection[Name], budgets: Budgets, turns: Turns
) -> list[Row]:
    """Up to `max_jobs` runnable jobs for `who`, best priority first, oldest first, locked.

    `taken`: the jobs (tenant, job_no) another claim of this transaction has (locked by us, so SKIP
    LOCKED does not skip them): read past them. `budgets`: a limited queue gives no more
    than it has left (jobwire.db.queue_limits); a paused one or one at its limit, nothing.
    A shared fleet's worker takes turns between tenants (`turns`, jobwire.process_state.turns).
    """
    if who.shared:
        return await _shared_candidates(wire, who, max_jobs, taken, budgets, turns)
    # One index-ordered scan per queue: `queue IN (...) ORDER BY priority DESC, id` cannot
    # use the claim index for more than one queue, and MySQL would then sort (and, with FOR
    # UPDATE, lock) every queued row. The best of each queue's candidates win; the others'
    # locks end with this short transaction.
    types = sorted(who.plans)
    await budgets.lock(wire, who.tenant, budgets.limited.of(who.tenant, who.queues))
    by_lane: dict[Lane, list[Row]] = {}
    for queue in who.queues:
        left = budgets.left(who.tenant, queue)
        wanted = max_jobs if left is None else min(max_jobs, left)
        if wanted > 0:
            by_lane[who.tenant, queue] = _past(
                await _scan(wire, (who.tenant, queue), types, wanted, taken), taken, wanted
            )
    found = [row for rows in (await _within_limits(wire, budgets, by_lane)).values() for row in rows]
    return sorted(found, key=_best)[:max_jobs]


async def _shared_candidates(
    wire: Wire, who: Claimant, max_jobs: int, taken: Collection[Name], budgets: Budgets, turns: Turns
) -> list[Row]:
    """A shared fleet's claim: round-robin across the tenants with runnable jobs, queue by
    queue, from the tenant after the one served last; the best jobs of each tenant first."""
    types = sorted(who.plans)
    orders = {queue: turns.order(queue, types) for queue in who.queues}
    # Known limits first, in (tenant, queue) order like every claim: no deadlock between them.
    known = sorted((t, q) for q, order in orders.items() for t, _ in order if budgets.limited.known(t, q))
    for tenant, queue in known:
        await budgets.lock(wire, tenant, [queue])
    by_lane: dict[Lane, list[Row]] = {}
    for queue, order in orders.items():
        served = 0
        for tenant, seen in order:
            if served >= max_jobs:
                break
            left = budgets.left(tenant, queue)
            if left == 0:
                continue  # paused or at its limit: it keeps its place
            wanted = max_jobs if left is None else min(max_jobs, left)
            rows = await _scan(wire, (tenant, queue), types, wanted, taken)
            if not rows:  # none runnable (rows this transaction took still count as some)
                turns.forget(queue, tenant, seen)
                continue
            by_lane[tenant, queue] = _past(rows, taken, wanted)
            served += 1 if by_lane[tenant, queue] else 0
    per_tenant: dict[str, list[Row]] = {}
    for (tenant, _), rows in (await _within_limits(wire, budgets, by_lane)).items():
        per_tenant.setdefault(tenant, []).extend(rows)
    rounds = [sorted(rows, key=_best) for rows in per_tenant.values()]
    found = [rows[i] for i in range(max_jobs) for rows in rounds if i < len(rows)][:max_jobs]
    for row in found:
        turns.served(row["queue"], row["tenant"])  # the last one of each queue stays
    return found


async def _scan(wire: Wire, lane: Lane, types: Sequence[str], wanted: int, taken: Collection[Name]) -> list[Row]:
    """The best runnable jobs of one lane, locked: enough for `wanted` past those in `taken`."""
    tenant, queue = lane
    params: dict[str, Any] = {"tenant": tenant, "queue": queue, "limit": wanted + len(taken), "now": wire.now}
    params.update({f"t{i}": name for i, name in enumerate(types)})
    return await wire.fetch(wire.sql.claim(len(types)), params, wire.sql.claim_shape)


def _past(rows: Sequence[Row], taken: Collection[Name], wanted: int) -> list[Row]:
    return [r for r in rows if (r["tenant"], r["job_no"]) not in taken][:wanted]


async def _within_limits(wire: Wire, budgets: Budgets, by_lane: dict[Lane, list[Row]]) -> dict[Lane, list[Row]]:
    """Limits this process did not know of (set since, or through another process): lock them
    now, and take no more than they allow."""
    late = sorted(
        lane for lane, rows in by_lane.items() if any(r["limited"] for r in rows) and not budgets.locked(*lane)
    )
    for tenant, queue in late:
        await budgets.lock(wire, tenant, [queue])
    out = {}
    for (tenant, queue), rows in by_lane.items():
        left = budgets.left(tenant, queue)
        out[tenant, queue] = rows if left is None else rows[:left]
        for row in out[tenant, queue]:
            del row["limited"]
    return out


def _best(row: Row) -> tuple[int, int]:
    return -row["priority"], row["id"]


def claim_ops(who: Claimant, rows: Sequence[Row]) -> list[JobOp[Lease]]:
    """The operations that lease `rows` (read and locked by `candidates`) to `who`: each names
    its row's job (a shared fleet claims every tenant's)."""
    return [_Claim(tenant=row["tenant"], job_no=row["job_no"], who=who) for row in rows]


@dataclass(frozen=True, kw_only=True)
class _Claim(JobOp[Lease]):
    tenant: str
    job_no: str
    who: Claimant

    def decide(self, row: Row | None, now: datetime) -> Change:
        assert row is not None
        plan = self.who.plans[row["job_type"]]
        epoch = row["lease_epoch"] + 1
        values = {
            "status": Status.RUNNING.value,
            "worker_id": self.who.worker_id,
            "worker_token": new_token(epoch, row["lease_key"]),
            "lease_epoch": epoch,
            "lease_seconds": self.who.lease_seconds,
            "stalled": False,
            "attempt": row["attempt"] + 1,
            "stage": plan[0].code,
            "stage_index": 1,
            "stage_count": len(plan),
            "stages": _plan_text(plan),
            "processed_units": 0,
            "total_units": None,
            "started_at": row["started_at"] or now,
            "attempt_deadline": deadline(now, row["attempt_timeout_s"]),
            **progress_moved(row, now),
        }
        return Change(action=Action.CLAIM, kind=EventKind.CLAIMED, values=values, renew=True)

    def outcome(self, row: Row | None, change: Change | None) -> Lease:
        assert row is not None
        return Lease(
            job_no=row["job_no"],
            tenant=row["tenant"],
            worker_token=row["worker_token"],
            job_type=row["job_type"],
            payload=bytes(row["payload"]),
            attempt=row["attempt"],
            checkpoint=bytes(row["checkpoint"]) if row["checkpoint"] is not None else None,
            stages=plan_of(row["stages"]),
            lease_expires_at=row["lease_expires_at"],
            lease_seconds=float(row["lease_seconds"]),
            attempt_deadline=row["attempt_deadline"],
            review=review_of(row),
            trace_context=row["trace_context"],
            version=row["version"],
        )


def _plan_text(plan: Sequence[StageDef]) -> str:
    return json.dumps(stage_plans.to_json(plan), ensure_ascii=False)


def seen(wire: Wire, who: Claimant, now: datetime) -> Statement:
    """Remember the worker for ListWorkers."""
    values = {
        "tenant": who.tenant,
        "worker_id": who.worker_id,
        "queues": json.dumps(sorted(who.queues)),
        "job_types": json.dumps(sorted(who.plans)),
        "last_seen_at": now,
    }
    return wire.sql.upsert_worker, values


def claimed_kinds(wire: Wire, tenant: str, kinds: Collection[tuple[str, str]], now: datetime) -> Statement:
    """Remember that a worker claimed for each (queue, job type) of `kinds` (NO_WORKER), in
    key order, so concurrent claims lock these rows in one order and never deadlock."""
    rows = [
        {"tenant": tenant, "queue": queue, "job_type": job_type, "claimed_at": now} for queue, job_type in sorted(kinds)
    ]
    return Many(wire.sql.insert_worker_claim, rows, wire.sql.worker_claim_tail)


def touch_worker(wire: Wire, tenant: str, worker_id: str, now: datetime) -> Statement:
    return wire.sql.touch_worker, {"tenant": tenant, "worker_id": worker_id, "last_seen_at": now}
