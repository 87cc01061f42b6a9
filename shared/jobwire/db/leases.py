"""What workers do to a job they lease: claim, heartbeat, report, and the four endings.

Every call after Claim names a token `<epoch>.<secret>`; the UPDATE checks job, token and
epoch, so a worker whose lease was revoked can never write again. A token that does not
match is answered WORKER_LEASE_LOST whatever the reason (no oracle), and recorded as
evidence when it was once a real lease of this job. Each call is a `JobOp` (see
jobwire.db.changes), so concurrent calls share one transaction.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from jobwire.db.changes import Change, JobOp, LateCall, Row
from jobwire.db.queue_limits import Budgets
from jobwire.db.rows import (
    attempts_of,
    ending_values,
    holding_of,
    holding_values,
    plan_of,
    policy_of,
    record_from_row,
    review_of,
    review_values,
)
from jobwire.db.wire import Many, Statement, Wire
from jobwire.domain import stages as stage_plans
from jobwire.domain.commands import EVERY_TENANT, Claimant, Failure, ProgressReport
from jobwire.domain.endings import on_await_review, on_confirm_cancel, on_fail, on_release
from jobwire.domain.errors import WorkerLeaseLost
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import Artifact, JobFailure, JobRecord, Name, plain_message
from jobwire.domain.kept_results import KeptResult
from jobwire.domain.lease import Lease, LeaseState, LeaseStatus, end, revoke
from jobwire.domain.limits import MAX_GRPC_MESSAGE_BYTES
from jobwire.domain.progress import Progress, apply_report, moved
from jobwire.domain.review import ReviewRequest
from jobwire.domain.stages import StageDef
from jobwire.domain.states import Action, Status
from jobwire.domain.timeouts import deadline
from jobwire.process_state.turns import Turns

T = TypeVar("T")


def new_token(epoch: int, key: str | None) -> str:
    """The token of a lease: its epoch, and the job's key's signature of it (random without a key)."""
    return f"{epoch}.{_signature(key, epoch) if key else secrets.token_urlsafe(18)}"


def new_lease_key() -> str:
    return secrets.token_hex(16)


def _signature(key: str, epoch: int) -> str:
    digest = hmac.new(bytes.fromhex(key), str(epoch).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:18]).decode()


def was_issued(row: Row, token: str, epoch: int) -> bool:
    """True when `token` is the token this job's lease of `epoch` had (jobs made before keys: never)."""
    key = row.get("lease_key")
    if not key or not 0 < epoch <= row["lease_epoch"]:
        return False
    return hmac.compare_digest(token.partition(".")[2], _signature(key, epoch))


def issued(row: Row, token: str) -> bool:
    """True when `token` is or was a lease of this job: the one held, the one that ended it, or one it signed."""
    if token in (row["worker_token"], row["ended_token"]):
        return True
    epoch = token_epoch(token)
    return epoch is not None and was_issued(row, token, epoch)


def token_epoch(token: str) -> int | None:
    head, _, secret = token.partition(".")
    # ASCII digits only: str.isdigit() also accepts "²" or "١", which int() refuses or reads as 1.
    return int(head) if head.isascii() and head.isdigit() and len(head) < 19 and secret else None


# -- claim ------------------------------------------------------------------------------

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
            **_progress_moved(row, now),
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
        )


def _progress_moved(row: Row, now: datetime) -> dict[str, object]:
    """Progress moved now (a claim, a report with new units or a new stage): the stage_timeout starts again."""
    return {"progress_at": now, "progress_deadline": deadline(now, row["stage_timeout_s"]), "no_progress": False}


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


# -- calls on a held lease ----------------------------------------------------------------


def replayed(row: Row | None, token: str, ending: str | None = None) -> bool:
    """Whether this call replays `ending`, already done with this token (True: nothing to write),
    or goes on because the token holds the lease (False).

    Anything else is WORKER_LEASE_LOST: as LateCall (kept as evidence) when the token was
    once a real lease of this job.
    """
    epoch = token_epoch(token)
    if row is not None and epoch is not None:
        if row["worker_token"] == token and row["lease_epoch"] == epoch:
            return False
        if ending is not None and row["ended_token"] == token and row["ended_kind"] == ending:
            return True
        if timed_out(row, token):
            raise LateCall(f"{ending or 'REPORT'} with the lease of epoch {epoch}, which timed out", timed_out=True)
        if was_issued(row, token, epoch):
            raise LateCall(f"{ending or 'REPORT'} with the lease of epoch {epoch}")
    raise WorkerLeaseLost()  # a token this job never issued: refused, and nothing written


def timed_out(row: Row | None, token: str) -> bool:
    """True when `token`'s lease was revoked because its attempt ran out of time (see `revoked_for_time`)."""
    return row is not None and row["ended_token"] == token and row["ended_kind"] == LeaseState.TIMED_OUT.value


def revoked_for_time(row: Row) -> dict[str, object]:
    """The lease is taken back because time ran out: a new epoch, and its token remembered, so
    its holder is told TIMED_OUT rather than LOST."""
    return {
        **holding_values(revoke(holding_of(row))),
        "ended_token": row["worker_token"],
        "ended_kind": LeaseState.TIMED_OUT.value,
    }


@dataclass(frozen=True, kw_only=True)
class _OnLease(JobOp[T]):
    """A call made with a lease's token."""

    tenant: str
    job_no: str
    token: str

    def names(self, row: Row) -> bool:
        # A shared fleet's call names a number several tenants' jobs may have: its job is the
        # one its token is a lease of (tokens are signed per job, so no other job's matches).
        return issued(row, self.token) if self.tenant == EVERY_TENANT else super().names(row)


def _status(row: Row | None) -> LeaseStatus:
    assert row is not None
    state = LeaseState.CANCEL_REQUESTED if row["status"] == Status.CANCEL_REQUESTED.value else LeaseState.OK
    return LeaseStatus(job_no=row["job_no"], state=state, lease_expires_at=row["lease_expires_at"])


@dataclass(frozen=True, kw_only=True)
class Renew(_OnLease[LeaseStatus]):
    """One lease of a heartbeat: renewed with no version and no event, unless it must revive."""

    def decide(self, row: Row | None, now: datetime) -> Change:
        if row is None or row["worker_token"] != self.token or row["lease_epoch"] != token_epoch(self.token):
            # No evidence for heartbeats: a worker beats until its handler stops, however late.
            raise WorkerLeaseLost(timed_out=timed_out(row, self.token))
        if row["stalled"]:
            # A stalled lease revives: a version and an event, so watchers see it running again.
            return Change(
                action=Action.HEARTBEAT,
                kind=EventKind.LEASE_REVIVED,
                values={"stalled": False},
                fenced=True,
                renew=True,
            )
        return Change(action=Action.HEARTBEAT, kind=None, fenced=True, renew=True, versioned=False)

    def outcome(self, row: Row | None, change: Change | None) -> LeaseStatus:
        return _status(row)


@dataclass(frozen=True, kw_only=True)
class Report(_OnLease[LeaseStatus]):
    stage: str
    processed: int
    total: int | None = None
    checkpoint: bytes | None = None
    note: str = ""

    @classmethod
    def of(cls, report: ProgressReport) -> Report:
        return cls(
            tenant=report.tenant, job_no=report.job_no, token=report.token, stage=report.stage,
            processed=report.processed, total=report.total, checkpoint=report.checkpoint, note=report.note,
        )  # fmt: skip

    def decide(self, row: Row | None, now: datetime) -> Change:
        replayed(row, self.token)  # a report is never a replay: refused unless the lease is held
        assert row is not None
        current = Progress(
            stage_index=row["stage_index"], stage_count=row["stage_count"],
            processed_units=row["processed_units"], total_units=row["total_units"],
        )  # fmt: skip
        after = apply_report(plan_of(row["stages"]), current, self.stage, self.processed, self.total)
        values: dict[str, object] = {
            "stage": self.stage,
            "stage_index": after.stage_index,
            "processed_units": after.processed_units,
            "total_units": after.total_units,
            "stalled": False,
        }
        if self.checkpoint is not None:
            values["checkpoint"] = self.checkpoint
        if moved(current, after):
            values.update(_progress_moved(row, now))
        kind = EventKind.STAGE_CHANGED if after.stage_index != current.stage_index else EventKind.PROGRESS
        return Change(action=Action.REPORT, kind=kind, values=values, detail=self.note or None, fenced=True, renew=True)

    def outcome(self, row: Row | None, change: Change | None) -> LeaseStatus:
        return _status(row)


def _ended(row: Row, kind: str, status: Status) -> dict[str, object]:
    """The holder ends its lease in `status`; a replay of this ending (same token, same kind) is recognised."""
    return {
        **holding_values(end(holding_of(row))),
        "status": status.value,
        "ended_token": row["worker_token"],
        "ended_kind": kind,
    }


class _Ending(_OnLease[JobRecord]):
    def outcome(self, row: Row | None, change: Change | None) -> JobRecord:
        assert row is not None
        return record_from_row(row)


@dataclass(frozen=True, kw_only=True)
class Complete(_Ending):
    """RUNNING or CANCEL_REQUESTED -> READY with its artifact, in one transaction."""

    result: Artifact
    kept: KeptResult | None = None

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "COMPLETE"):
            return None
        assert row is not None
        values = {**_ended(row, "COMPLETE", Status.READY), "finished_at": now}
        return Change(
            action=Action.COMPLETE, kind=EventKind.COMPLETED, values=values, fenced=True, artifact=self.result,
            kept=self.kept,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Fail(_Ending):
    """Back to QUEUED after a backoff while attempts remain, else FAILED; CANCELLED if asked to stop."""

    failure: Failure

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "FAIL"):
            return None
        assert row is not None
        failure = self.failure
        told = JobFailure(
            category=failure.category, stage=row["stage"], message=plain_message(failure.message),
            retryable=failure.retryable,
        )  # fmt: skip
        ending = on_fail(Status(row["status"]), told, attempts_of(row), policy_of(row), now)
        values = {**_ended(row, "FAIL", ending.status), **ending_values(ending, now)}
        if ending.error is not None:
            values["error_detail"] = failure.detail or None
        evidence = f"{failure.category.value}: {failure.message}\n{failure.detail}".strip()
        return Change(action=Action.FAIL, kind=ending.kind, values=values, fenced=True, detail=evidence)


@dataclass(frozen=True, kw_only=True)
class ConfirmCancel(_Ending):
    """CANCEL_REQUESTED -> CANCELLED (jobwire.domain.endings.on_confirm_cancel)."""

    note: str = ""

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "CONFIRM_CANCEL"):
            return None
        assert row is not None
        ending = on_confirm_cancel(Status(row["status"]))
        values = {**_ended(row, "CONFIRM_CANCEL", ending.status), **ending_values(ending, now)}
        return Change(
            action=Action.CONFIRM_CANCEL, kind=ending.kind, values=values, fenced=True, detail=self.note or None
        )


@dataclass(frozen=True, kw_only=True)
class Release(_Ending):
    """A graceful stop: back to QUEUED with the checkpoint, the attempt not charged; a pending
    cancel wins (jobwire.domain.endings.on_release)."""

    checkpoint: bytes | None = None
    note: str = ""

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "RELEASE"):
            return None
        assert row is not None
        ending = on_release(Status(row["status"]), attempts_of(row), now)
        values = {**_ended(row, "RELEASE", ending.status), **ending_values(ending, now)}
        if ending.status is Status.QUEUED and self.checkpoint is not None:
            values["checkpoint"] = self.checkpoint
        return Change(action=Action.RELEASE, kind=ending.kind, values=values, fenced=True, detail=self.note or None)


@dataclass(frozen=True, kw_only=True)
class AwaitReview(_Ending):
    """RUNNING -> WAITING for a person: the lease ends as on Release, and no time runs for the
    attempt; a pending cancel wins (jobwire.domain.endings.on_await_review)."""

    request: ReviewRequest
    checkpoint: bytes | None = None

    def decide(self, row: Row | None, now: datetime) -> Change | None:
        if replayed(row, self.token, "AWAIT_REVIEW"):
            return None
        assert row is not None
        ending = on_await_review(Status(row["status"]))
        values = {**_ended(row, "AWAIT_REVIEW", ending.status), **ending_values(ending, now)}
        if ending.status is not Status.WAITING:
            return Change(action=Action.AWAIT_REVIEW, kind=ending.kind, values=values, fenced=True)
        values.update(
            review_values(self.request),
            # No attempt runs while a person decides: the attempt and progress clocks stop.
            attempt_deadline=None,
            progress_deadline=None,
            no_progress=False,
        )
        if self.checkpoint is not None:
            values["checkpoint"] = self.checkpoint
        items = f"; items: {len(self.request.items)}" if self.request.items else ""
        return Change(
            action=Action.AWAIT_REVIEW, kind=ending.kind, values=values, fenced=True,
            detail=f"waiting for review by {self.request.assignee}{items}",
        )  # fmt: skip
