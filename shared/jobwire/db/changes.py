"""The one shape every state change takes: decide on the row, guarded UPDATE, event (one algorithm, kept whole).

An operation (`JobOp`: a report, a Complete, a user's Cancel, a reaper's mark) looks at
the job's row and decides a `Change`, or refuses. `apply_ops` runs any number of them in
one transaction, so concurrent calls share their round trips and their COMMIT:

1. Rows. A job is named by its tenant and number (numbers are per tenant); a shared fleet's
   call names only the number, and its token tells which tenant's job it means (`_names`).
   A worker's lease is usually written by this process just before (its claim, its last
   report), so the row it left in the `RowCache` is taken as a guess. Other rows are read
   in one SELECT, locked (`FOR UPDATE`).
2. Decisions, in call order per job, in memory; the transition table checks each one.
3. One guarded UPDATE per job, from the row it read or guessed to where its calls took it:
   the UPDATE matches only if id, version and status (and for worker calls the token and
   epoch) are still as read. All UPDATEs go in one round trip. A row this transaction read
   locked (a claim's candidates) cannot have changed, so its UPDATE, guarded on that row's own
   values only (no change's extra guard, which an earlier step may have moved), cannot miss:
   it waits for the COMMIT's round trip (a claim makes two, not three), unless a follow-up (5)
   reads first.
4. A job whose UPDATE matched nothing (the guess was stale: a user cancelled, another
   replica reported), or whose guess led to a refusal, is read again, locked, and decided
   again: the read that explains a refusal is only made when there is one.
5. Jobs that ended in 1-4 may settle the jobs waiting for them (jobwire.db.dependencies):
   `follow` names those ops, which go through 1-4 themselves, round after round down a
   chain, as many as `follow` allows one transaction, before anything commits.
6. The events (with each version's user-visible snapshot), artifact rows and late-call
   evidence, with the COMMIT, in one round trip.

A guess can only cost a second read, never a wrong write: every write is guarded, and a
refusal or a "nothing to do" decided on a guess is decided again on a locked row.
A database error anywhere fails the transaction as a whole; `Database.transact` reruns
it or fails every call in it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from jobwire.db.event_rows import artifact_values, event_values
from jobwire.db.sql import Lock, name_params
from jobwire.db.wire import Many, Statement, Wire
from jobwire.db.writer import RetryTransaction
from jobwire.domain.commands import EVERY_TENANT, may_act_for
from jobwire.domain.errors import InvalidTransition, JobwireError, WorkerLeaseLost
from jobwire.domain.evidence import EventKind
from jobwire.domain.handler_evidence import Entry
from jobwire.domain.job import Artifact, Digest, Name
from jobwire.domain.kept_results import EndedLease, KeptResult
from jobwire.domain.states import LEASED, Action, Status, allowed
from jobwire.domain.transitions import Move, Transition, move_of
from jobwire.process_state.evidence_limit import EvidenceLimit
from jobwire.process_state.row_cache import RowCache

Row = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """What one operation writes to one job.

    Args:
        action: Checked against the transition table (jobwire.domain.states).
        kind: The event recorded with it; None for a change nobody sees (a renewal).
        values: Columns to set; `version` and `updated_at` follow by themselves.
        fenced: A worker call: the UPDATE also names the holder's token and epoch.
        renew: The lease runs again from the transaction's time (lease_expires_at, heartbeat_at).
        versioned: False for a heartbeat's renewal: no version, no event, nothing anyone sees.
        artifact: The result row a Complete adds.
        kept: The bytes (or their place in the result store) kept with that row.
        guards: Extra conditions `(sql, params)` on columns that change without a version.
        entries: Evidence the lease's holder recorded: one HANDLER_EVIDENCE event each.
    """

    action: Action
    kind: EventKind | None
    values: Mapping[str, Any] = field(default_factory=dict)
    detail: str | None = None
    fenced: bool = False
    renew: bool = False
    versioned: bool = True
    artifact: Artifact | None = None
    kept: KeptResult | None = None
    guards: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    entries: tuple[Entry, ...] = ()


class LateCall(WorkerLeaseLost):
    """A once-real lease of this job called after losing it: refused, and kept as evidence."""

    def __init__(self, detail: str, *, timed_out: bool = False) -> None:
        super().__init__(timed_out=timed_out)
        self.detail = detail


class JobOp(ABC, Generic[T]):
    """One call's decision about one job, and its reply."""

    tenant: str
    job_no: str
    token: str | None = None  # a worker's lease: a cached row is a guess only for its holder
    fresh = False  # decide on a locked row read now, never on a guess (decisions by the row's `db_now`)
    lock = Lock.UPDATE

    def sees(self, row: Row) -> bool:
        """Whether this caller may act on `row`; a row it may not is decided as absent (no oracle)."""
        return may_act_for(self.tenant, row["tenant"])

    def names(self, row: Row) -> bool:
        """Whether `row`, a job with this call's number, is the job this call means: its
        tenant's (a shared fleet's call, tenant "*", is told by its token: jobwire.db.leases)."""
        tenant: str = row["tenant"]
        return tenant == self.tenant

    @abstractmethod
    def decide(self, row: Row | None, now: datetime) -> Change | None:
        """The change to make, None for nothing; raise a JobwireError to refuse."""

    @abstractmethod
    def outcome(self, row: Row | None, change: Change | None) -> T:
        """The reply, from the row after this operation (as it is when nothing changed)."""


Outcome = Any  # an op's outcome(), or the JobwireError that refused it


@dataclass(slots=True)
class _Step:
    op: int
    change: Change | None = None
    before: Row | None = None
    after: Row | None = None
    error: JobwireError | None = None


@dataclass(slots=True, eq=False)  # one job's state in one round: told apart by identity
class _Job:
    name: Name
    ops: list[int]
    base: Row | None = None
    guessed: bool = False
    locked: bool = False  # its base was read locked in this transaction: it cannot have changed
    steps: list[_Step] = field(default_factory=list)

    @property
    def changes(self) -> list[Change]:
        return [s.change for s in self.steps if s.change is not None]


# A job that ends may end the jobs that depend on it, which may end theirs: rounds of
# follow-up ops in one transaction, until `follow` names none (it bounds them itself:
# jobwire.db.dependencies.FollowUps), each with the rows it read and locked for them.
FollowUp = Callable[[Wire, Sequence[Row]], Awaitable[tuple[Sequence["JobOp[Any]"], Mapping[Name, Row]]]]


async def apply_ops(
    wire: Wire,
    ops: Sequence[JobOp[Any]],
    *,
    now: datetime,
    cache: RowCache,
    evidence: EvidenceLimit,
    rows: Mapping[Name, Row] | None = None,
    extra: Sequence[Statement] = (),
    follow: FollowUp | None = None,
    moved: list[Transition] | None = None,
    leases_ended: list[EndedLease] | None = None,
) -> list[Outcome]:
    """Run `ops` in this transaction and commit; one outcome per op, in order.

    `rows` are rows the caller has just read and locked (a claim's candidates), by name; `extra`
    statements ride with the COMMIT (a worker's last-seen time). `follow` names the ops
    that the jobs ended here cause (their dependents), run in the same transaction.
    `moved` gets the counted moves (jobwire.domain.transitions), and `leases_ended` the leases this
    transaction ended, once the COMMIT stands.
    """
    jobs, deferred = await _round(wire, ops, now, cache, rows or {})
    every = list(jobs.values())
    ended = _ended(every)
    while follow is not None and ended:
        await _run_sure(wire, deferred)  # what follows up reads the rows as they now are
        more, locked = await follow(wire, ended)
        if not more:
            deferred = []
            break
        followed_jobs, deferred = await _round(wire, more, now, cache, locked)
        followed = list(followed_jobs.values())
        every += followed
        ended = _ended(followed)
    await wire.commit(deferred + _records(wire, every, now, evidence) + list(extra))
    _remember(cache, every)
    if moved is not None:
        moved.extend(_moves(every))
    if leases_ended is not None:
        leases_ended.extend(_ended_leases(every))
    return _outcomes(ops, jobs.values())


async def _round(
    wire: Wire, ops: Sequence[JobOp[Any]], now: datetime, cache: RowCache, rows: Mapping[Name, Row]
) -> tuple[dict[Name, _Job], list[Statement]]:
    """Decide `ops` and write their guarded UPDATEs; the events wait for the COMMIT, and so do
    the UPDATEs of rows read locked here (returned: they cannot miss)."""
    names, found = await _names(wire, ops, cache)
    jobs: dict[Name, _Job] = {}
    for i, name in enumerate(names):
        jobs.setdefault(name, _Job(name, [])).ops.append(i)
    await _bases(wire, ops, jobs.values(), cache, {**rows, **found})
    recheck = [job for job in jobs.values() if not _decide(job, ops, now)]
    rechecked = set(recheck)
    deferred: list[_Job] = []
    checked: list[_Job] = []
    for job in jobs.values():
        if job not in rechecked and job.changes:
            (deferred if _cannot_miss(job) else checked).append(job)
    counts = await wire.run([_update(wire, job) for job in checked])
    recheck += [job for job, matched in zip(checked, counts, strict=True) if matched != 1]
    if recheck:
        await _read(wire, recheck, Lock.UPDATE)
        for job in recheck:
            _decide(job, ops, now)
        await _run_sure(wire, [_update(wire, job) for job in recheck if job.changes])
    return jobs, [_update(wire, job) for job in deferred]


def _cannot_miss(job: _Job) -> bool:
    """Its base was read locked in this transaction and its UPDATE is guarded on that row's
    own values only (no change's extra guard, which an earlier step may have moved)."""
    return job.locked and not any(c.guards for c in job.changes)


async def _run_sure(wire: Wire, updates: list[Statement]) -> None:
    """UPDATEs of rows read locked here, which cannot miss: one that does reruns the transaction."""
    if any(matched != 1 for matched in await wire.run(updates)):
        raise RetryTransaction()  # a locked row changed under us: only SQLite's rowid reuse could


def _ended(jobs: Iterable[_Job]) -> list[Row]:
    """The rows of jobs that reached an end (READY, FAILED, CANCELLED) in their last steps."""
    out = []
    for job in jobs:
        if job.changes and job.base is not None:
            after = job.steps[-1].after
            if after is not None and Status(after["status"]).terminal and not Status(job.base["status"]).terminal:
                out.append(after)
    return out


async def _names(wire: Wire, ops: Sequence[JobOp[Any]], cache: RowCache) -> tuple[list[Name], dict[Name, Row | None]]:
    """Each op's job as (tenant, job_no), and the rows read, locked, to tell some of them.

    A shared fleet's call (tenant "*") names only a number, which several tenants' jobs may
    have: it means the job its token is a lease of. The row this process last left for
    that token says which (`RowCache.holder`); else every job of the number is read and
    the op picks its own (`JobOp.names`). A token none of them issued names no job: the
    op is decided on no row (WORKER_LEASE_LOST, as for any token nobody holds).
    """
    names: list[Name] = []
    unknown: list[int] = []
    for i, op in enumerate(ops):
        held = cache.holder(op.job_no, op.token) if op.tenant == EVERY_TENANT else (op.tenant, op.job_no)
        names.append(held or (EVERY_TENANT, op.job_no))
        if held is None:
            unknown.append(i)
    found: dict[Name, Row | None] = {}
    if unknown:
        numbers = sorted({ops[i].job_no for i in unknown})
        params = {f"n{i}": number for i, number in enumerate(numbers)}
        # Locked as a worker's call reads its row (JobOp.lock): they are the bases of its ops.
        rows = await wire.fetch(wire.sql.rows_by_job_no(len(numbers), Lock.UPDATE), params, wire.sql.row_shape)
        found.update(((r["tenant"], r["job_no"]), r) for r in rows)
        for i in unknown:
            mine = next((r for r in rows if r["job_no"] == ops[i].job_no and ops[i].names(r)), None)
            if mine is not None:
                names[i] = (mine["tenant"], mine["job_no"])
            found[names[i]] = mine
    return names, found


async def _bases(
    wire: Wire, ops: Sequence[JobOp[Any]], jobs: Iterable[_Job], cache: RowCache, rows: Mapping[Name, Row | None]
) -> None:
    """Each job's starting row: given, guessed from the cache, or read."""
    unread = []
    for job in jobs:
        if job.name in rows:
            job.base, job.locked = rows[job.name], True  # read locked by the caller, or by `_names`
            continue
        tokens = {ops[i].token for i in job.ops}
        guess = None if any(ops[i].fresh for i in job.ops) else cache.guess(job.name, tokens)
        if guess is not None:
            job.base, job.guessed = guess, True
        else:
            unread.append(job)
    by_lock: dict[str, list[_Job]] = {}
    for job in unread:
        by_lock.setdefault(ops[job.ops[0]].lock, []).append(job)
    for lock, group in by_lock.items():
        await _read(wire, group, lock)


async def _read(wire: Wire, jobs: Sequence[_Job], lock: str) -> None:
    """Read (and lock) the rows of `jobs` by name in one statement (what each op may do is its own to check)."""
    params = name_params([job.name for job in jobs])
    rows = await wire.fetch(wire.sql.rows_by_name(len(jobs), lock), params, wire.sql.row_shape)
    found = {(r["tenant"], r["job_no"]): r for r in rows}
    for job in jobs:
        job.base = found.get(job.name)
        job.guessed = False
        job.locked = lock != Lock.NONE


def _decide(job: _Job, ops: Sequence[JobOp[Any]], now: datetime) -> bool:
    """Decide the job's operations in order; False when a guess must be checked first.

    Each op sees the row only if it may (`JobOp.sees`): calls of several callers on one job
    share a transaction, and one caller's right to the job is never another's.
    """
    job.steps = []
    row = job.base
    if row is not None:
        now = max(now, row["updated_at"])  # a job's times never go back across replicas' clocks
    for i in job.ops:
        step = _Step(i, before=row)
        try:
            step.change = ops[i].decide(row if row is not None and ops[i].sees(row) else None, now)
            if step.change is not None:
                assert row is not None, "a change needs a row"
                row = _changed(row, step.change, now)
        except JobwireError as refused:
            step.error = refused
        if job.guessed and step.change is None:
            return False  # a refusal, or "nothing to do", is a verdict a guess cannot give
        step.after = row
        job.steps.append(step)
    return True


def _changed(row: Row, change: Change, now: datetime) -> Row:
    before, after = Status(row["status"]), Status(change.values.get("status", row["status"]))
    if not allowed(change.action, before, after):
        # The transition table (jobwire.domain.states) is the authority for every write.
        raise InvalidTransition(f"{change.action.value} cannot take a {before.value} job to {after.value}")
    new = {**row, **change.values}
    if change.versioned:
        new["version"] = row["version"] + 1
        new["updated_at"] = now
    if change.renew:
        new["lease_expires_at"] = now + timedelta(seconds=new["lease_seconds"])
        new["heartbeat_at"] = now
    if change.artifact is not None:
        new.update(artifact_values(change.artifact))
    return new


def _update(wire: Wire, job: _Job) -> Statement:
    """The job's one guarded UPDATE, from its base row to its last step's row."""
    base, changes = job.base, job.changes
    assert base is not None
    final = job.steps[-1].after
    assert final is not None
    names: set[str] = set()
    extra: dict[str, Any] = {}
    guards = ["id", "status"]
    for change in changes:
        names.update(change.values)
        for condition, params in change.guards:
            guards.append(condition)
            extra.update(params)
    if any(c.versioned for c in changes):
        names.update(("version", "updated_at"))
        guards.append("version")
    else:
        guards.append("stalled")  # a renewal does not bump the version: a reaper's mark must stop it
    if any(c.fenced for c in changes):
        guards += ["worker_token", "lease_epoch"]
    if Status(final["status"]).terminal:
        guards.append("has_dependents")  # an ending follows up dependents only if it knows of them
    if any(c.renew for c in changes):
        # As the last step left them: an ending after a renewal in the same batch has ended the lease.
        names.update(("lease_expires_at", "heartbeat_at"))
    columns = tuple(sorted(names))
    params = {f"v_{c}": final[c] for c in columns}
    params.update({f"g_{g}": base[g] for g in guards if " " not in g})
    params.update(extra)
    return wire.sql.update(columns, tuple(guards)), params


def _records(wire: Wire, jobs: Iterable[_Job], now: datetime, evidence: EvidenceLimit) -> list[Statement]:
    """The event rows (visible changes and late-call evidence, within its limit) and artifact rows, in order."""
    events: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    for job in jobs:
        for step in job.steps:
            change = step.change
            if change is not None and change.versioned:
                assert step.before is not None and step.after is not None and change.kind is not None
                events.append(event_values(
                    step.after, change.kind, step.after["updated_at"], step.before["status"], detail=change.detail
                ))  # fmt: skip
                if change.artifact is not None:
                    kept = change.kept or KeptResult()
                    artifacts.append({
                        "job_id": step.after["id"], "created_at": now, **artifact_values(change.artifact),
                        "inline_data": kept.inline, "stored_key": kept.stored_key,
                    })  # fmt: skip
            elif isinstance(step.error, LateCall) and step.before is not None and evidence.allow(step.before["id"]):
                events.append(event_values(
                    step.before, EventKind.LATE_CALL_REJECTED, now, step.before["status"], visible=False,
                    detail=step.error.detail, worker_id="",
                ))  # fmt: skip
            if change is not None and change.values.get("checkpoint") is not None:
                assert step.after is not None
                saved = Digest.of(change.values["checkpoint"])  # size and sha256: never the bytes
                events.append(event_values(
                    step.after, EventKind.CHECKPOINT_SAVED, step.after["updated_at"], step.after["status"],
                    visible=False, size_bytes=saved.size_bytes, sha256=saved.sha256,
                ))  # fmt: skip
            if change is not None and change.entries:
                assert step.after is not None
                events += [
                    event_values(step.after, EventKind.HANDLER_EVIDENCE, now, step.after["status"], visible=False,
                                 detail=entry.value, entry_key=entry.key)
                    for entry in change.entries
                ]  # fmt: skip
    out: list[Statement] = []
    if events:
        out.append(Many(wire.sql.insert_event, events))
    if artifacts:
        out.append(Many(wire.sql.insert_artifact, artifacts))
    return out


def _moves(jobs: Iterable[_Job]) -> Iterator[Transition]:
    """The counted moves of these jobs' steps, from the rows before and after each (no statement)."""
    for job in jobs:
        for step in job.steps:
            change, before, after = step.change, step.before, step.after
            if change is None or change.kind is None or before is None or after is None:
                continue
            if before["status"] == after["status"] and change.kind is not EventKind.LEASE_EXPIRED:
                continue  # a report, a renewal, a stage: the hot path skips here on a string compare
            move = move_of(change.kind, Status(before["status"]), Status(after["status"]))
            if move is not None:
                yield _transition(move, before, after)


def _ended_leases(jobs: Iterable[_Job]) -> Iterator[EndedLease]:
    """The leases these jobs' steps took from their holders: ended by the holder, revoked,
    expired, or taken over (no statement: the rows before and after each step)."""
    for job in jobs:
        for step in job.steps:
            before, after = step.before, step.after
            if step.change is None or before is None or after is None or before["worker_token"] is None:
                continue
            if after["worker_token"] != before["worker_token"]:
                kept = step.change.kept.stored_key if step.change.kept is not None else None
                yield EndedLease(before["tenant"], before["job_no"], before["worker_token"], kept)


def _transition(move: Move, before: Row, after: Row) -> Transition:
    waited = ran = None
    if move is Move.CLAIMED and before["started_at"] is None:
        waited = _seconds(before["created_at"], after["started_at"])
    elif Status(after["status"]).terminal and Status(before["status"]) in LEASED and after["started_at"] is not None:
        ran = _seconds(after["started_at"], after["updated_at"])
    category = (after["error_category"] or "") if move is Move.FAILED else ""
    return Transition(move, after["queue"], after["job_type"], category, waited_s=waited, ran_s=ran)


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())  # replicas' clocks may differ a little


def _remember(cache: RowCache, jobs: Iterable[_Job]) -> None:
    """Keep each job's row as this transaction left it: the next call of its holder starts there."""
    for job in jobs:
        row = job.steps[-1].after if job.steps else job.base
        if row is None:
            cache.drop(job.name)
        else:
            cache.put(row)


def _outcomes(ops: Sequence[JobOp[Any]], jobs: Iterable[_Job]) -> list[Outcome]:
    out: list[Outcome] = [None] * len(ops)
    for job in jobs:
        for step in job.steps:
            op = ops[step.op]
            out[step.op] = step.error if step.error is not None else op.outcome(step.after, step.change)
    return out
