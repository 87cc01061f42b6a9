"""JobStore: every read and conditional write of jobwire, each in one short transaction.

Use cases call these methods; nothing else touches SQL. Methods are synchronous (the
servers run them on threads). Every write is a call (`Submit`, `Claim`, or `Call`: state
changes as `JobOp`s, see jobwire.db.changes); `apply` runs any number of calls from any
number of callers in one transaction, which is how the servers commit concurrent calls
together. The other methods are one call each, or reads.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

from jobwire.db import (
    batches,
    commit_markers,
    dependencies,
    feed,
    leases,
    queue_limits,
    reads,
    reaper,
    retention,
    schedules,
    submit,
    timeouts,
)
from jobwire.db import inspect as inspect_queries
from jobwire.db.cache import RowCache
from jobwire.db.changes import JobOp, Outcome, apply_ops
from jobwire.db.engine import Database
from jobwire.db.evidence_limit import EvidenceLimit
from jobwire.db.job_numbers import JobNumbers
from jobwire.db.migrate import check_current, upgrade
from jobwire.db.reads import Row
from jobwire.db.rows import record_from_row
from jobwire.db.turns import Turns, runnable_tenants
from jobwire.db.wire import Statement, Wire
from jobwire.domain.batches import BatchRecord, NewBatch
from jobwire.domain.census import Census
from jobwire.domain.commands import Claimant, JobFilter, NewJob
from jobwire.domain.errors import (
    BatchNotFound,
    JobNotFound,
    JobwireError,
    ResultNotAvailable,
    ScheduleNotFound,
    WorkerLeaseLost,
)
from jobwire.domain.evidence import Finding, FindingKind, JobEvent, WorkerInfo
from jobwire.domain.flow import Held, QueueLimits
from jobwire.domain.job import JobRecord
from jobwire.domain.lease import LeaseState, LeaseStatus
from jobwire.domain.results import KeptResult
from jobwire.domain.schedules import Advance, Backlog, Run, ScheduleRecord
from jobwire.domain.serving import unserved
from jobwire.domain.states import Status
from jobwire.domain.transitions import Move, Transition

T = TypeVar("T")
Extra = Callable[[Wire, datetime], Statement]  # a statement that rides with the COMMIT


@dataclass(frozen=True)
class Call:
    """Changes to existing jobs: each op's outcome or refusal, in order."""

    ops: Sequence[JobOp[Any]]
    extra: Sequence[Extra] = field(default=())


@dataclass(frozen=True)
class Submit:
    """New jobs: each one's (job, created) or refusal."""

    news: Sequence[NewJob]


@dataclass(frozen=True)
class SubmitBatch:
    """A batch: all its jobs or none (jobwire.db.batches); its BatchAnswer."""

    batch: NewBatch


@dataclass(frozen=True)
class Claim:
    """Leases for a worker: the leases granted (possibly none)."""

    who: Claimant
    max_jobs: int
    seen: bool = True  # remember the worker for ListWorkers
    kinds: Sequence[tuple[str, str]] = ()  # (queue, job type) to record as claimed for now (NO_WORKER)
    # Filled by the claim: its queues that could lease no more (paused, at a limit), so the
    # caller waits to be woken, or for the next token, instead of asking again at once.
    held: dict[str, queue_limits.Budget] = field(default_factory=dict, compare=False)


Work = Call | Submit | SubmitBatch | Claim


Observer = Callable[[Sequence[Transition]], None]


def _unobserved(moved: Sequence[Transition]) -> None:
    """No observer: the moves go uncounted (a store used without a server)."""


class JobStore:
    def __init__(self, db: Database, *, job_prefix: str = "PT") -> None:
        self.db = db
        self.job_numbers = JobNumbers(db, job_prefix)
        self.cache = RowCache()
        self.evidence = EvidenceLimit()
        # Told the counted moves of every transaction that committed (the server's metrics).
        # Here and not in a servicer or the change feed: only the store knows which run of a
        # transaction committed (a deadlock reruns it, a lost COMMIT reply is settled by the
        # commit marker before `transact` returns), it sees every writer (servicers, the
        # sweeps, the dependents settled with an ending), and the feed is read by every
        # process of a family, so counting there would count each move once per process.
        # A COMMIT nobody can confirm (COMMIT_UNKNOWN) counts nothing. The moves come from
        # rows already in memory: no statement is added.
        self.observe: Observer = _unobserved
        self.limited = queue_limits.LimitedQueues()
        self.turns = Turns()  # a shared fleet's claims take turns between tenants

    # -- every write --------------------------------------------------------------------
    async def apply(self, work: Sequence[Work]) -> list[Any]:
        """Run every call in one transaction: batches and new jobs first, then claims, then changes.

        Per call: a Call's list of outcomes, a Submit's list of answers, a SubmitBatch's
        answer, a Claim's leases.
        """
        # Numbers are reserved outside the transaction (see job_numbers): a rerun keeps them.
        numbered = {i: [(new, await self.job_numbers.next()) for new in _news(w)] for i, w in enumerate(work)
                    if isinstance(w, Submit | SubmitBatch)}  # fmt: skip
        moved: list[Transition] = []
        results = await self.db.transact(lambda wire: self._apply(wire, work, numbered, moved))
        self.observe(moved)  # the run that committed: `transact` returns nothing else
        return results

    async def _apply(
        self,
        wire: Wire,
        work: Sequence[Work],
        numbered: dict[int, list[tuple[NewJob, str]]],
        moved: list[Transition],
    ) -> list[Any]:
        moved.clear()  # a rerun of the transaction: the run before committed nothing
        now = self.db.clock.now()
        results: list[Any] = [None] * len(work)
        submits = [(i, jobs) for i, jobs in numbered.items() if isinstance(work[i], Submit)]
        claims = [(i, w) for i, w in enumerate(work) if isinstance(w, Claim)]
        calls = [(i, w) for i, w in enumerate(work) if isinstance(w, Call)]
        made = [(i, w) for i, w in enumerate(work) if isinstance(w, SubmitBatch)]
        if submits:
            # First: a taken idempotency key restarts the transaction, which nothing before may have written.
            answers = await submit.submit(
                wire, [job for _, jobs in submits for job in jobs], now=now,
                duplicate=self.db.integrity_error, commit=not (made or claims or calls),
            )  # fmt: skip
            sizes = [len(jobs) for _, jobs in submits]
            for (i, _), part in zip(submits, _split(answers, sizes), strict=True):
                results[i] = [a if isinstance(a, JobwireError) else (record_from_row(a[0]), a[1]) for a in part]
            moved.extend(
                Transition(Move.SUBMITTED, a[0]["queue"], a[0]["job_type"])
                for a in answers
                if not isinstance(a, JobwireError) and a[1]
            )  # a replayed key made nothing
            if not (made or claims or calls):
                return results
        for i, w in made:
            results[i] = answer = await batches.submit_batch(
                wire, w.batch, numbered[i], now=now, duplicate=self.db.integrity_error
            )
            if not isinstance(answer, JobwireError) and answer[2]:
                moved.extend(Transition(Move.SUBMITTED, job.queue, job.job_type) for job in answer[1])
        if not (claims or calls):
            await wire.commit()
            return results
        rows: dict[str, Row] = {}
        parts: list[tuple[int, Sequence[JobOp[Any]]]] = []  # each call's ops, in order
        extra: list[Statement] = []
        budgets = queue_limits.Budgets(self.limited, now)
        for i, claim in claims:
            found = leases.fitting_reply(
                await leases.candidates(wire, claim.who, claim.max_jobs, rows, budgets, self.turns)
            )
            budgets.take(found)
            claim.held.clear()  # a transaction run again decides again
            claim.held.update(budgets.held(claim.who.tenant, claim.who.queues))
            rows.update((r["job_no"], r) for r in found)
            parts.append((i, leases.claim_ops(claim.who, found)))
            if claim.seen:
                extra.append(leases.seen(wire, claim.who, now))
            if claim.kinds:
                extra.append(leases.claimed_kinds(wire, claim.who.tenant, claim.kinds, now))
        parts += [(i, call.ops) for i, call in calls]
        extra += budgets.spent(wire)
        extra += [make(wire, now) for _, call in calls for make in call.extra]
        ops = [op for _, part in parts for op in part]
        outcomes = await apply_ops(
            wire, ops, now=now, cache=self.cache, evidence=self.evidence, rows=rows, extra=extra,
            follow=dependencies.follow_up, moved=moved,
        )  # fmt: skip
        for (i, _), part in zip(parts, _split(outcomes, [len(p) for _, p in parts]), strict=True):
            results[i] = list(part)
        return results

    # -- reads ----------------------------------------------------------------------------
    def get(self, tenant: str, job_no: str, *, no_worker_after: timedelta) -> JobRecord:
        def read(conn: Connection) -> tuple[tuple[Row, int | None, list[str]], dict[str, Held]] | None:
            found = reads.get(conn, tenant, job_no)
            if found is None:
                return None
            row, position, _ = found
            return found, queue_limits.holds(conn, tenant, [row["queue"]] if position is not None else [])

        read_back = self.db.read(read)
        if read_back is None:
            raise JobNotFound()
        (row, position, waiting), held = read_back
        no_worker = row["status"] == Status.QUEUED.value and unserved(row["claimed_at"], row["db_now"], no_worker_after)
        return record_from_row(
            row, queue_position=position, waiting_for=waiting, no_worker=no_worker, held=held.get(row["queue"])
        )

    def kept_result(self, tenant: str, job_no: str) -> tuple[str, KeptResult]:
        """A READY job's content type and the result the server keeps (GetResult)."""
        found = self.db.read(lambda c: reads.kept_result(c, tenant, job_no))
        if found is None:
            raise JobNotFound()
        if found.status != Status.READY.value:
            raise ResultNotAvailable(f"the job is {found.status}, not READY: it has no result yet")
        if found.inline is None and found.stored_key is None:
            raise ResultNotAvailable("the worker published this result itself: fetch it from the job's result.uri")
        return found.content_type, KeptResult(inline=found.inline, stored_key=found.stored_key)

    def lease_held(self, tenant: str, job_no: str, token: str) -> bool:
        return self.db.read(lambda c: reads.lease_held(c, tenant, job_no, token))

    def stored_keys(self, keys: Sequence[str]) -> set[str]:
        return self.db.read(lambda c: reads.stored_keys(c, keys))

    def list_jobs(
        self, where: JobFilter, page_size: int, page_token: str, *, no_worker_after: timedelta
    ) -> tuple[list[JobRecord], str]:
        def read(conn: Connection) -> tuple[list[Row], str, set[tuple[str, str]], dict[str, Held]]:
            rows, token = reads.list_jobs(conn, where, page_size, page_token)
            waiting = [r["queue"] for r in rows if r["status"] == Status.QUEUED.value and not r["waiting_on"]]
            held = queue_limits.holds(conn, where.tenant, waiting)
            return rows, token, reads.unserved_kinds(conn, where.tenant, rows, no_worker_after), held

        rows, token, unserved_kinds, held = self.db.read(read)
        return [
            record_from_row(
                r,
                no_worker=(r["queue"], r["job_type"]) in unserved_kinds,
                held=None if r["waiting_on"] else held.get(r["queue"]),
            )
            for r in rows
        ], token

    def list_events(self, tenant: str, job_no: str, page_size: int, page_token: str) -> tuple[list[JobEvent], str]:
        found = self.db.read(lambda c: reads.list_events(c, tenant, job_no, page_size, page_token))
        if found is None:
            raise JobNotFound()
        return found

    def inspect(
        self,
        tenant: str,
        *,
        stalled_after: timedelta,
        queue: str,
        kinds: Collection[FindingKind],
        no_worker_after: timedelta,
    ) -> list[Finding]:
        return self.db.read(
            lambda c: inspect_queries.findings(
                c, tenant, stalled_after=stalled_after, queue=queue, kinds=kinds, no_worker_after=no_worker_after
            )
        )

    def list_workers(
        self, tenant: str, queue: str, page_size: int, page_token: str, gone_after: timedelta
    ) -> tuple[list[WorkerInfo], str]:
        return self.db.read(lambda c: reads.list_workers(c, tenant, queue, page_size, page_token, gone_after))

    def turns_due(self, queues: Sequence[str]) -> bool:
        """Whether a shared fleet's claim of `queues` must first list whose turn it is (`list_turns`)."""
        return any(self.turns.due(queue) for queue in queues)

    def list_turns(self, queues: Sequence[str], job_types: Sequence[str]) -> None:
        """List again which tenants have runnable jobs in those of `queues` due for it (a shared
        fleet's turns, jobwire.db.turns): a read of its own, before the claim."""
        for queue in queues:
            if self.turns.due(queue):
                found = self.db.read(partial(runnable_tenants, queue=queue, job_types=job_types))
                self.turns.listed(queue, job_types, found)

    def queue_limits(self, tenant: str, queue: str) -> QueueLimits:
        return self.db.read(lambda c: queue_limits.get(c, tenant, queue))

    def change_queue_limits(self, tenant: str, queue: str, change: Callable[[QueueLimits], QueueLimits]) -> QueueLimits:
        """Set, pause or resume a queue's limits (`change` maps the old to the new); the new limits."""
        after = self.db.write(lambda c: queue_limits.put(c, tenant, queue, reads.clock(c), change))
        self.limited.learn(tenant, queue, not after.none)
        return after

    def get_batch(self, tenant: str, batch_id: str) -> BatchRecord:
        found = self.db.read(lambda c: batches.get(c, tenant, batch_id))
        if found is None:
            raise BatchNotFound()
        return found

    def batch_job_nos(self, tenant: str, batch_id: str, *, unfinished: bool = False) -> list[str]:
        """The batch's job numbers (NOT_FOUND for an unknown batch or another tenant's)."""
        self.get_batch(tenant, batch_id)
        return self.db.read(lambda c: batches.job_nos(c, tenant, batch_id, unfinished=unfinished))

    # -- what watching reads (jobwire.jobapi.watch): the store is the only door to SQL --------
    def watch_start(self, tenant: str, job_no: str, after_version: int) -> feed.WatchStart | None:
        return self.db.read(lambda c: feed.watch_start(c, tenant, job_no, after_version))

    def owner_jobs(self, tenant: str, owner: str, after_id: int) -> list[feed.Located]:
        return self.db.read(lambda c: feed.owner_jobs(c, tenant, owner, after_id=after_id))

    def jobs_by_number(self, tenant: str, job_nos: Sequence[str]) -> list[feed.Located]:
        return self.db.read(lambda c: feed.jobs_by_number(c, tenant, job_nos))

    def replay(self, job_id: int, after: int, upto: int | None) -> list[feed.FeedRow]:
        return self.db.read(lambda c: feed.replay(c, job_id, after, upto))

    def census(self, live_after: timedelta) -> Census:
        """What the gauges show: jobs by tenant, queue and status, runnable ones, workers seen since `live_after`."""
        return self.db.read(lambda c: reads.census(c, self.db.clock.now(), live_after))

    def now(self) -> datetime:
        """The database clock, as this process keeps it (jobwire.db.clock)."""
        return self.db.clock.now()

    def purge_commit_markers(self) -> int:
        """Forget old commit markers (MySQL only: SQLite writes none, jobwire.db.commit_markers)."""
        return self.db.write(commit_markers.purge) if self.db.is_mysql else 0

    def purge_workers(self, older_than: timedelta) -> int:
        return self.db.write(lambda c: reads.purge_workers(c, older_than))

    # -- schedules (jobwire.db.schedules; their firings submit through apply) --------------------
    def create_schedule(self, new: ScheduleRecord, limit: int) -> ScheduleRecord:
        """Keep a new schedule (ALREADY_EXISTS for a taken id in its tenant, RESOURCE_EXHAUSTED past `limit`)."""
        self.db.write(lambda c: schedules.create(c, new, limit))
        return new

    def get_schedule(self, tenant: str, schedule_id: str) -> ScheduleRecord:
        found = self.db.read(lambda c: schedules.get(c, tenant, schedule_id))
        if found is None:
            raise ScheduleNotFound()
        return found

    def list_schedules(self, tenant: str, page_size: int, page_token: str) -> tuple[list[ScheduleRecord], str]:
        return self.db.read(lambda c: schedules.list_page(c, tenant, page_size, page_token))

    def set_schedule_paused(self, tenant: str, schedule_id: str, next_fire_at: datetime | None) -> ScheduleRecord:
        """Pause the schedule (`next_fire_at` None) or resume it to fire next at `next_fire_at`."""
        if not self.db.write(lambda c: schedules.set_paused(c, tenant, schedule_id, next_fire_at)):
            raise ScheduleNotFound()
        return self.get_schedule(tenant, schedule_id)

    def delete_schedule(self, tenant: str, schedule_id: str) -> None:
        if not self.db.write(lambda c: schedules.delete(c, tenant, schedule_id)):
            raise ScheduleNotFound()

    def due_schedules(self, now: datetime, limit: int) -> Backlog:
        """Schedules due at `now`, every tenant's oldest first (jobwire.db.schedules.due)."""
        return self.db.read(lambda c: schedules.due(c, now, limit))

    async def advance_schedules(self, moves: Sequence[Advance]) -> list[bool]:
        """Move due schedules on in one transaction, each guarded by the fire time it was read at
        (jobwire.db.schedules.advance)."""
        return await self.db.transact(lambda wire: schedules.advance(wire, moves))

    def mark_schedule_round(self, now: datetime, gap: timedelta) -> None:
        """A schedule loop ran at `now` (jobwire.db.schedules.mark)."""
        self.db.write(lambda c: schedules.mark(c, now, gap))

    def schedule_runs(self, since: datetime) -> list[Run]:
        return self.db.read(lambda c: schedules.runs(c, since))

    # -- housekeeping (every server process runs it; see jobwire.runtime.housekeeping) -------------------
    async def reap_leases(self, grace: timedelta, *, by: str, read: reaper.Read) -> reaper.Reaped:
        """Mark expired leases stalled; past `grace`, apply each job's lease-lost policy.

        `read` runs the reaper's queries (on a thread: they are SQLAlchemy's).
        """

        return await reaper.reap(self.db, read, self._run, grace, by=by)

    async def sweep_timeouts(self, *, by: str, read: reaper.Read) -> timeouts.Swept:
        """End jobs and attempts past their time limits; mark (or fail) jobs without progress."""
        return await timeouts.sweep(read, self._run, by=by)

    async def settle_dependencies(self, *, read: reaper.Read, batch: int = timeouts.BATCH) -> int:
        """Settle waiting jobs whose dependencies ended without settling them (a chain deeper
        than one transaction follows); how many changed."""
        due = await read(lambda conn: dependencies.due(conn, batch))
        if not due:
            return 0

        moved: list[Transition] = []

        async def settle(wire: Wire) -> list[Any]:
            moved.clear()  # a rerun: the run before committed nothing
            ops = await dependencies.settle_due(wire, due)
            return await apply_ops(
                wire, ops, now=self.db.clock.now(), cache=self.cache, evidence=self.evidence,
                follow=dependencies.follow_up, moved=moved,
            )  # fmt: skip

        settled = await self.db.transact(settle)
        self.observe(moved)
        return sum(kind is not None for kind in settled)

    async def _run(self, ops: Sequence[JobOp[Any]]) -> list[Any]:
        """Housekeeping's operations, as one call."""
        return list((await self.apply([Call(ops)]))[0])

    def purge_expired(
        self,
        keep: retention.Retention,
        deleter: retention.ArtifactDeleter = retention.keep_files,
        *,
        batch: int = retention.BATCH,
    ) -> retention.Purged:
        """Delete terminal jobs past their retention with their events and artifacts, in batches."""
        return retention.purge_expired(self.db, keep, deleter, batch=batch)

    def delete_finished(
        self, tenant: str, job_no: str, deleter: retention.ArtifactDeleter = retention.keep_files
    ) -> None:
        """Delete one terminal job with its events and artifact now (DeleteOperation)."""
        retention.delete_finished(self.db, tenant, job_no, deleter)


def heartbeat_call(tenant: str, worker_id: str, held: Sequence[tuple[str, str]], *, touch: bool) -> Call:
    """A worker's heartbeat as one call: a renewal per lease, and its last-seen time."""
    ops = [leases.Renew(tenant=tenant, job_no=job_no, token=token) for job_no, token in held]
    extra: list[Extra] = [lambda wire, now: leases.touch_worker(wire, tenant, worker_id, now)] if touch else []
    return Call(ops, extra)


def lease_states(held: Sequence[tuple[str, str]], outcomes: Sequence[Outcome]) -> list[LeaseStatus]:
    """A heartbeat's answers: a refused renewal is a lost lease, or one revoked when its time ran out."""
    return [LeaseStatus(job_no=job_no, state=_refused(o)) if isinstance(o, JobwireError) else o
            for (job_no, _), o in zip(held, outcomes, strict=True)]  # fmt: skip


def _refused(error: JobwireError) -> LeaseState:
    return LeaseState.TIMED_OUT if isinstance(error, WorkerLeaseLost) and error.timed_out else LeaseState.LOST


def open_store(url: str, *, pool_size: int = 8, job_prefix: str = "PT", migrate: bool = True) -> JobStore:
    """The store for `url`, its schema created or upgraded first when `migrate`, else checked current."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    db = Database(url, pool_size=pool_size)
    if migrate:
        upgrade(db)
    else:
        check_current(db)
    return JobStore(db, job_prefix=job_prefix)


def _news(work: Submit | SubmitBatch) -> Sequence[NewJob]:
    return work.news if isinstance(work, Submit) else work.batch.jobs


def _split(items: Sequence[Any], sizes: Sequence[int]) -> list[Sequence[Any]]:
    out, start = [], 0
    for size in sizes:
        out.append(items[start : start + size])
        start += size
    return out
