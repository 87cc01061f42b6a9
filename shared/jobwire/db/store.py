"""JobStore, the one door to SQL: long only because it lists every call, each a few lines handing it on.

Every read and conditional write of jobwire, each in one short transaction.

Use cases call these methods; nothing else touches SQL. `apply` and the other `async`
methods (state changes, schedules' moves, housekeeping's) run on the event loop (asyncmy,
jobwire.db.wire); every other method is synchronous, a read or a small write that the
servers run on the database thread pool (jobwire.runtime.blocking). Every write is a call
(`Submit`, `Claim`, or `Call`: state changes as `JobOp`s, see jobwire.db.changes); `apply`
runs any number of calls from any number of callers in one transaction, which is how the
servers commit concurrent calls together. The other methods are one call each, or reads.
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
    chore_leases,
    claims,
    commit_markers,
    dependencies,
    feed,
    inspection,
    job_pages,
    leases,
    number_counters,
    queue_limits,
    queue_reads,
    reads,
    reaper,
    retention,
    schedule_jobs,
    schedules,
    standing,
    submit,
    timeouts,
    workers,
)
from jobwire.db.changes import JobOp, Outcome, apply_ops
from jobwire.db.engine import Database
from jobwire.db.migrate import check_current, upgrade
from jobwire.db.reads import Row
from jobwire.db.rows import record_from_row
from jobwire.db.runnable_tenants import runnable_tenants
from jobwire.db.sql import BLOBS
from jobwire.db.wire import Statement, Wire
from jobwire.domain.batches import BatchRecord, NewBatch
from jobwire.domain.census import Census
from jobwire.domain.commands import Claimant, JobFilter, NewJob, Scope
from jobwire.domain.errors import (
    BatchNotFound,
    CheckpointNotFound,
    JobNotFound,
    JobwireError,
    ResultNotAvailable,
    ScheduleNotFound,
    WorkerLeaseLost,
)
from jobwire.domain.evidence import Finding, FindingKind, JobEvent, WorkerInfo
from jobwire.domain.flow import QueueLimits
from jobwire.domain.job import JobRecord, Name
from jobwire.domain.kept_results import EndedLease, KeptResult
from jobwire.domain.lease import LeaseState, LeaseStatus
from jobwire.domain.queues import QueueOverview
from jobwire.domain.schedules import Advance, Backlog, Run, ScheduleRecord
from jobwire.domain.states import Status
from jobwire.domain.transitions import Move, Transition
from jobwire.process_state.evidence_limit import EvidenceLimit
from jobwire.process_state.job_numbers import JobNumbers
from jobwire.process_state.limited_queues import LimitedQueues
from jobwire.process_state.row_cache import RowCache
from jobwire.process_state.turns import Turns

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
Unsettled = Callable[[Sequence[dependencies.Pending]], None]
LeasesEnded = Callable[[Sequence[EndedLease]], None]


def _unobserved(moved: Sequence[Transition]) -> None:
    """No observer: the moves go uncounted (a store used without a server)."""


def _left_to_sweep(left: Sequence[dependencies.Pending]) -> None:
    """No settler: what an ending left of its dependents waits for the housekeeping sweep."""


def _uploads_left(ended: Sequence[EndedLease]) -> None:
    """No result store: the ended leases' uploads wait for the abandoned-upload sweep."""


class JobStore:
    def __init__(self, db: Database, *, job_prefix: str = "PT") -> None:
        self.db = db
        self.job_numbers = JobNumbers(partial(number_counters.reserve, db), job_prefix)
        self.cache = RowCache(blobs=BLOBS)
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
        # Dependents one transaction settles at most; told, after the COMMIT, what an ending
        # left of them (the runtime's settler: jobwire.runtime.settling).
        self.chunk = dependencies.CHUNK
        self.unsettled: Unsettled = _left_to_sweep
        # Told, after the COMMIT, the leases a transaction ended, whoever ended them (a
        # worker, a user, the reaper, a session's expiry): their uploads go (the runtime's
        # jobwire.runtime.lease_uploads). Known from rows in memory, as the moves are.
        self.leases_ended: LeasesEnded = _uploads_left
        self.limited = LimitedQueues()
        self.turns = Turns()  # a shared fleet's claims take turns between tenants
        self.recent_queues = standing.RecentQueues()  # queue facts for stream messages (restand)

    # -- every write --------------------------------------------------------------------
    async def apply(self, work: Sequence[Work]) -> list[Any]:
        """Run every call in one transaction: batches and new jobs first, then claims, then changes.

        Per call: a Call's list of outcomes, a Submit's list of answers, a SubmitBatch's
        answer, a Claim's leases.
        """
        # Numbers are reserved outside the transaction (see job_numbers): a rerun keeps them.
        numbered = {i: [(new, await self.job_numbers.next(new.tenant)) for new in _news(w)] for i, w in enumerate(work)
                    if isinstance(w, Submit | SubmitBatch)}  # fmt: skip
        moved: list[Transition] = []
        left: list[dependencies.Pending] = []
        ended: list[EndedLease] = []
        results = await self.db.transact(lambda wire: self._apply(wire, work, numbered, moved, left, ended))
        self.observe(moved)  # the run that committed: `transact` returns nothing else
        if ended:
            self.leases_ended(ended)
        for claim in work:
            if isinstance(claim, Claim):
                for queue, _ in claim.kinds:  # served now: a stream's next message of that queue reads it again
                    self.recent_queues.forget(claim.who.tenant, queue)
        if left:
            self.unsettled(left)
        return results

    async def _apply(
        self,
        wire: Wire,
        work: Sequence[Work],
        numbered: dict[int, list[tuple[NewJob, str]]],
        moved: list[Transition],
        left: list[dependencies.Pending],
        ended: list[EndedLease],
    ) -> list[Any]:
        moved.clear()  # a rerun of the transaction: the run before committed nothing
        left.clear()
        ended.clear()
        now = wire.now
        results: list[Any] = [None] * len(work)
        submits = [(i, jobs) for i, jobs in numbered.items() if isinstance(work[i], Submit)]
        asked = [(i, w) for i, w in enumerate(work) if isinstance(w, Claim)]
        calls = [(i, w) for i, w in enumerate(work) if isinstance(w, Call)]
        made = [(i, w) for i, w in enumerate(work) if isinstance(w, SubmitBatch)]
        if submits:
            # First: a taken idempotency key restarts the transaction, which nothing before may have written.
            answers = await submit.submit(
                wire, [job for _, jobs in submits for job in jobs], now=now,
                duplicate=self.db.integrity_error, commit=not (made or asked or calls),
            )  # fmt: skip
            sizes = [len(jobs) for _, jobs in submits]
            for (i, _), part in zip(submits, _split(answers, sizes), strict=True):
                results[i] = [a if isinstance(a, JobwireError) else (record_from_row(a[0]), a[1]) for a in part]
            moved.extend(
                Transition(Move.SUBMITTED, a[0]["queue"], a[0]["job_type"])
                for a in answers
                if not isinstance(a, JobwireError) and a[1]
            )  # a replayed key made nothing
            if not (made or asked or calls):
                return results
        for i, w in made:
            results[i] = answer = await batches.submit_batch(
                wire, w.batch, numbered[i], now=now, duplicate=self.db.integrity_error
            )
            if not isinstance(answer, JobwireError) and answer[2]:
                moved.extend(Transition(Move.SUBMITTED, job.queue, job.job_type) for job in answer[1])
        if not (asked or calls):
            await wire.commit()
            return results
        rows: dict[Name, Row] = {}
        parts: list[tuple[int, Sequence[JobOp[Any]]]] = []  # each call's ops, in order
        extra: list[Statement] = []
        budgets = queue_limits.Budgets(self.limited, now)
        for i, claim in asked:
            found = claims.fitting_reply(
                await claims.candidates(wire, claim.who, claim.max_jobs, rows, budgets, self.turns)
            )
            budgets.take(found)
            claim.held.clear()  # a transaction run again decides again
            claim.held.update(budgets.held(claim.who.tenant, claim.who.queues))
            rows.update(((r["tenant"], r["job_no"]), r) for r in found)
            parts.append((i, claims.claim_ops(claim.who, found)))
            if claim.seen:
                extra.append(claims.seen(wire, claim.who, now))
            if claim.kinds:
                extra.append(claims.claimed_kinds(wire, claim.who.tenant, claim.kinds, now))
        parts += [(i, call.ops) for i, call in calls]
        extra += budgets.spent(wire)
        extra += [make(wire, now) for _, call in calls for make in call.extra]
        ops = [op for _, part in parts for op in part]
        follow = dependencies.FollowUps(self.chunk)
        outcomes = await apply_ops(
            wire, ops, now=now, cache=self.cache, evidence=self.evidence, rows=rows, extra=extra,
            follow=follow, moved=moved, leases_ended=ended,
        )  # fmt: skip
        left += follow.left
        for (i, _), part in zip(parts, _split(outcomes, [len(p) for _, p in parts]), strict=True):
            results[i] = list(part)
        return results

    # -- reads ----------------------------------------------------------------------------
    def get(self, scope: Scope, job_no: str, *, no_worker_after: timedelta) -> JobRecord:
        def read(conn: Connection) -> JobRecord | None:
            row = reads.load_job(conn, scope, job_no)
            return None if row is None else standing.records(conn, [row], no_worker_after)[0]

        found = self.db.read(read)
        if found is None:
            raise JobNotFound()
        return found

    def kept_result(self, scope: Scope, job_no: str) -> tuple[str, KeptResult]:
        """A READY job's content type and the result the server keeps (GetResult)."""
        found = self.db.read(lambda c: reads.kept_result(c, scope, job_no))
        if found is None:
            raise JobNotFound()
        if found.status != Status.READY.value:
            raise ResultNotAvailable(f"the job is {found.status}, not READY: it has no result yet")
        if found.inline is None and found.stored_key is None:
            raise ResultNotAvailable("the worker published this result itself: fetch it from the job's result.uri")
        return found.content_type, KeptResult(inline=found.inline, stored_key=found.stored_key)

    def payload(self, scope: Scope, job_no: str, max_bytes: int) -> tuple[bytes, int]:
        """The first `max_bytes` of the job's payload, and its whole size."""
        found = self.db.read(lambda c: reads.payload(c, scope, job_no, max_bytes))
        if found is None:
            raise JobNotFound()
        return found

    def lease_held(self, tenant: str, job_no: str, token: str) -> bool:
        return self.db.read(lambda c: reads.lease_held(c, tenant, job_no, token))

    def lease_state(self, tenant: str, job_no: str, token: str) -> LeaseState:
        """Where the lease of `token` stands, as a heartbeat would be told, renewing nothing."""
        return self.db.read(lambda c: reads.lease_state(c, tenant, job_no, token))

    def stored_keys(self, keys: Sequence[str]) -> set[str]:
        return self.db.read(lambda c: reads.stored_keys(c, keys))

    def list_jobs(
        self,
        where: JobFilter,
        page_size: int,
        page_token: str,
        *,
        no_worker_after: timedelta,
        scan_rows: int,
    ) -> tuple[list[JobRecord], str]:
        """A page of jobs newest first and the next page's token ("": the last page); where no
        index serves every filter, at most `scan_rows` rows are looked at (jobwire.db.job_pages),
        so the page may hold fewer than `page_size` jobs, or none, with a token."""

        def read(conn: Connection) -> tuple[list[JobRecord], str]:
            rows, token = job_pages.list_jobs(conn, where, page_size, page_token, scan_rows)
            return standing.records(conn, rows, no_worker_after), token

        return self.db.read(read)

    def visible_jobs(self, scope: Scope, job_nos: Sequence[str]) -> set[str]:
        """Those of `job_nos` that `scope` sees."""
        return self.db.read(lambda c: reads.visible_jobs(c, scope, job_nos))

    def list_events(
        self, scope: Scope, job_no: str, page_size: int, page_token: str
    ) -> tuple[list[JobEvent], str, str]:
        found = self.db.read(lambda c: reads.list_events(c, scope, job_no, page_size, page_token))
        if found is None:
            raise JobNotFound()
        return found

    def checkpoint(self, scope: Scope, job_no: str) -> bytes:
        """The latest checkpoint of a job `scope` sees (AdminService.GetCheckpoint)."""
        found = self.db.read(lambda c: reads.checkpoint(c, scope, job_no))
        if found is None:
            raise JobNotFound()
        if found["checkpoint"] is None:
            raise CheckpointNotFound()
        return bytes(found["checkpoint"])

    def inspect(
        self,
        scope: Scope,
        *,
        stalled_after: timedelta,
        queue: str,
        kinds: Collection[FindingKind],
        no_worker_after: timedelta,
    ) -> list[Finding]:
        return self.db.read(
            lambda c: inspection.findings(
                c, scope, stalled_after=stalled_after, queue=queue, kinds=kinds, no_worker_after=no_worker_after
            )
        )

    def list_workers(
        self, scope: Scope, queue: str, page_size: int, page_token: str, gone_after: timedelta
    ) -> tuple[list[WorkerInfo], str]:
        return self.db.read(lambda c: workers.list_workers(c, scope, queue, page_size, page_token, gone_after))

    def worker_serves(self, tenant: str, worker_id: str) -> tuple[list[str], list[str]]:
        """The queues and job types of a worker's last claim, as any serving process recorded
        them (its ListWorkers row); none for a worker never seen."""
        return self.db.read(lambda c: workers.last_claim(c, tenant, worker_id))

    def turns_due(self, queues: Sequence[str]) -> bool:
        """Whether a shared fleet's claim of `queues` must first list whose turn it is (`list_turns`)."""
        return any(self.turns.due(queue) for queue in queues)

    def list_turns(self, queues: Sequence[str], job_types: Sequence[str]) -> None:
        """List again which tenants have runnable jobs in those of `queues` due for it (a shared
        fleet's turns, jobwire.process_state.turns): a read of its own, before the claim."""
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
        self.recent_queues.forget(tenant, queue)
        return after

    def queue_overview(self, scope: Scope, queue: str, minutes: int) -> QueueOverview:
        return self.db.read(lambda c: queue_reads.overview(c, scope, queue, minutes))

    def get_batch(self, scope: Scope, batch_id: str) -> BatchRecord:
        found = self.db.read(lambda c: batches.get(c, scope, batch_id))
        if found is None:
            raise BatchNotFound()
        return found

    def batch_job_nos(self, scope: Scope, batch_id: str, *, unfinished: bool = False) -> list[str]:
        """The numbers of the batch's jobs `scope` sees (NOT_FOUND for an unknown batch, another
        tenant's, or one with none of its jobs in the token's queues)."""
        self.get_batch(scope, batch_id)
        return self.db.read(lambda c: batches.job_nos(c, scope, batch_id, unfinished=unfinished))

    # -- what watching reads (jobwire.jobapi.watch): the store is the only door to SQL --------
    def watch_start(
        self, tenant: str, job_no: str, after_version: int, *, no_worker_after: timedelta
    ) -> feed.WatchStart | None:
        return self.db.read(lambda c: feed.watch_start(c, tenant, job_no, after_version, no_worker_after))

    def owner_jobs(self, tenant: str, owner: str, after_id: int, *, no_worker_after: timedelta) -> list[feed.Located]:
        return self.db.read(lambda c: feed.owner_jobs(c, tenant, owner, no_worker_after, after_id=after_id))

    def jobs_by_number(self, tenant: str, job_nos: Sequence[str], *, no_worker_after: timedelta) -> list[feed.Located]:
        return self.db.read(lambda c: feed.jobs_by_number(c, tenant, job_nos, no_worker_after))

    def restand(self, versions: Sequence[tuple[int, JobRecord]], *, no_worker_after: timedelta) -> list[JobRecord]:
        """Versions from the change feed (row id, record), QUEUED ones standing as a read shows
        them now, bar the place in line (jobwire.db.standing: each queue's facts kept a second)."""
        return standing.restand(self.db, self.recent_queues, versions, no_worker_after)

    def events(self, ids: Sequence[int]) -> list[feed.FeedRow]:
        return self.db.read(lambda c: feed.events(c, ids))

    def replay(self, job_id: int, after: int, upto: int | None) -> list[feed.FeedRow]:
        return self.db.read(lambda c: feed.replay(c, job_id, after, upto))

    def census(self, live_after: timedelta) -> Census:
        """What the gauges show: jobs by tenant, queue and status, runnable ones, workers seen since `live_after`."""
        return self.db.read(lambda c: reads.census(c, reads.clock(c), live_after))

    def now(self) -> datetime:
        """The store's time: the database clock, as this process keeps it (jobwire.db.clock)."""
        return self.db.clock.now()

    def purge_commit_markers(self) -> int:
        """Forget old commit markers (MySQL only: SQLite writes none, jobwire.db.commit_markers)."""
        return self.db.write(commit_markers.purge) if self.db.is_mysql else 0

    def purge_workers(self, older_than: timedelta) -> int:
        """Forget workers not seen, and queues and job types not claimed for, for `older_than`."""
        return self.db.write(lambda c: workers.purge_workers(c, older_than))

    # -- schedules (jobwire.db.schedules; their firings submit through apply) --------------------
    def create_schedule(self, new: ScheduleRecord, limit: int) -> ScheduleRecord:
        """Keep a new schedule (ALREADY_EXISTS for a taken id in its tenant, RESOURCE_EXHAUSTED past `limit`)."""
        self.db.write(lambda c: schedules.create(c, new, limit))
        return new

    def get_schedule(self, scope: Scope, schedule_id: str) -> ScheduleRecord:
        found = self.db.read(lambda c: schedules.get(c, scope, schedule_id))
        if found is None:
            raise ScheduleNotFound()
        return found

    def schedule_jobs(
        self, scope: Scope, schedule_id: str, page_size: int, page_token: str, *, no_worker_after: timedelta
    ) -> tuple[list[JobRecord], str]:
        """A page of the jobs the schedule's firings made, the latest first (NOT_FOUND: an unknown schedule)."""

        def read(conn: Connection) -> tuple[list[JobRecord], str]:
            if schedules.get(conn, scope, schedule_id) is None:
                raise ScheduleNotFound()
            rows, token = schedule_jobs.page(conn, scope, schedule_id, page_size, page_token)
            return standing.records(conn, rows, no_worker_after), token

        return self.db.read(read)

    def list_schedules(self, scope: Scope, page_size: int, page_token: str) -> tuple[list[ScheduleRecord], str]:
        return self.db.read(lambda c: schedules.list_page(c, scope, page_size, page_token))

    def set_schedule_paused(self, scope: Scope, schedule_id: str, next_fire_at: datetime | None) -> ScheduleRecord:
        """Pause the schedule (`next_fire_at` None) or resume it to fire next at `next_fire_at`."""
        if not self.db.write(lambda c: schedules.set_paused(c, scope, schedule_id, next_fire_at)):
            raise ScheduleNotFound()
        return self.get_schedule(scope, schedule_id)

    def delete_schedule(self, scope: Scope, schedule_id: str) -> None:
        if not self.db.write(lambda c: schedules.delete(c, scope, schedule_id)):
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

    # -- chore leader (jobwire.db.chore_leases; the loop: jobwire.runtime.leadership) ----------------------
    def elect_chore_leader(self, name: str, candidate: str, lease: timedelta, *, holding: bool) -> chore_leases.Term:
        """Renew or take the lease of the chores `name` for `candidate`, or learn who holds it."""
        return self.db.write(lambda c: chore_leases.elect(c, name, candidate, lease, holding=holding))

    def resign_chore_leader(self, name: str, holder: str) -> bool:
        """Give up the lease of the chores `name` if `holder` has it: whether it had."""
        return self.db.write(lambda c: chore_leases.resign(c, name, holder))

    # -- housekeeping (the chore leader runs it; see jobwire.runtime.housekeeping) -------------------------
    async def reap_leases(self, grace: timedelta, *, by: str, read: reaper.Read) -> reaper.Reaped:
        """Mark expired leases stalled; past `grace`, apply each job's lease-lost policy.

        `read` runs the reaper's queries (on a thread: they are SQLAlchemy's).
        """

        return await reaper.reap(self.db, read, self._run, grace, by=by)

    async def sweep_timeouts(self, *, by: str, read: reaper.Read) -> timeouts.Swept:
        """End jobs and attempts past their time limits; mark (or fail) jobs without progress."""
        return await timeouts.sweep(read, self._run, by=by)

    async def dependencies_due(self, *, read: reaper.Read, quiet: timedelta) -> list[dependencies.Pending]:
        """What endings left of their dependents that nobody has settled for `quiet` (a crash
        lost the settler's work): the sweep's work."""
        since = self.db.clock.now() - quiet
        due: list[dependencies.Pending] = await read(lambda conn: dependencies.due(conn, self.chunk, since))
        return due

    async def settle_dependents(self, pending: dependencies.Pending) -> tuple[int, list[dependencies.Pending]]:
        """Settle the next `chunk` waiting dependents of `pending`, and theirs while the chunk
        lasts, in one transaction: how many of `pending`'s changed, and what is left."""
        moved: list[Transition] = []
        ended: list[EndedLease] = []

        async def settle(wire: Wire) -> tuple[list[Any], list[dependencies.Pending]]:
            moved.clear()  # a rerun: the run before committed nothing
            ended.clear()
            follow = dependencies.FollowUps(self.chunk)
            ops, rows = await follow.settle(wire, pending)
            if not ops:
                return [], follow.left
            outcomes = await apply_ops(
                wire, ops, now=wire.now, cache=self.cache, evidence=self.evidence, rows=rows,
                follow=follow, moved=moved, leases_ended=ended,
            )  # fmt: skip
            return outcomes, follow.left

        settled, left = await self.db.transact(settle)
        self.observe(moved)
        if ended:
            self.leases_ended(ended)
        return sum(kind is not None for kind in settled), left

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
        self, scope: Scope, job_no: str, deleter: retention.ArtifactDeleter = retention.keep_files
    ) -> None:
        """Delete one terminal job with its events and artifact now (DeleteOperation)."""
        retention.delete_finished(self.db, scope, job_no, deleter)


def heartbeat_call(
    tenant: str, worker_id: str, held: Sequence[tuple[str, str]], *, touch: bool, kinds: Sequence[tuple[str, str]] = ()
) -> Call:
    """A worker's heartbeat as one call: a renewal per lease, its last-seen time, and the
    (queue, job type) pairs it serves (`kinds`): a worker whose every slot is busy claims
    nothing, and its kinds must not read as served by nobody (NO_WORKER) while it runs them."""
    ops = [leases.Renew(tenant=tenant, job_no=job_no, token=token) for job_no, token in held]
    extra: list[Extra] = [lambda wire, now: claims.touch_worker(wire, tenant, worker_id, now)] if touch else []
    if kinds:
        extra.append(lambda wire, now: claims.claimed_kinds(wire, tenant, kinds, now))
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
    """The jobs `work` may make: none for a batch too large to make (a replay of it needs no numbers)."""
    if isinstance(work, Submit):
        return work.news
    return work.batch.jobs if work.batch.refusal() is None else ()


def _split(items: Sequence[Any], sizes: Sequence[int]) -> list[Sequence[Any]]:
    out, start = [], 0
    for size in sizes:
        out.append(items[start : start + size])
        start += size
    return out
