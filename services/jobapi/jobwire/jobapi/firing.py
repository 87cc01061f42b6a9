"""The schedule loop of a job-service process: find due schedules, submit their jobs, move them on.

One serving process of all replicas runs the loop: the chore leader of `schedules`
(jobwire.runtime.leadership). Every `JOBWIRE_SCHEDULE_INTERVAL_SECONDS` a round reads
the schedules whose next fire time has come, by the database clock, in batches that take
every tenant's oldest before anyone's second (jobwire.db.schedules.due), so one tenant's
thousands hold another's one back by a batch at most; a round goes on while batches come
back full. Each schedule is asked of jobwire.domain.schedules.decide. A batch's firings
are submitted together through the normal submit (group commit: a few transactions for
the batch, not one each), each with the idempotency key `<schedule_id>@<fire time>`, so
however many processes find it due (two may, at a handover of the lease), one job is made
per fire time; then one transaction advances the batch's next_fire_at, each UPDATE guarded
by the fire time it read, so one process advances each. A crash between the two submits
the same keys again on the next round, which answers with the jobs already made. A
database outage is logged and waited out: the loop never dies of an error.

A fire time found late is missed only if no loop ran at its time: each round tells the
store that a loop ran (`mark`, at most every third of the run gap), and a late one is
judged by those runs and by this loop's own (jobwire.domain.schedules.Run). A firing whose
Submit is refused (a queue's limits, a template today's rules refuse) is REFUSED, not
missed: logged with the reason, counted with the schedule's skipped firings.

`tick` is one round; `run` calls it until the process stops leading.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import datetime, timedelta

from jobwire.domain.errors import JobwireError, StoreUnavailable
from jobwire.domain.schedules import (
    Advance,
    Backlog,
    Due,
    Firing,
    Outcome,
    Run,
    ScheduleRecord,
    continues,
    decide,
    firing_key,
    run_gap,
)
from jobwire.jobapi.decode import decode_submit
from jobwire.jobapi.jobs import Jobs
from jobwire.rpc.auth import Principal
from jobwire.rpc.metrics import Metrics
from jobwire.runtime.rounds import Rounds
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2

log = logging.getLogger(__name__)
BATCH = 100  # due schedules per read: the submits of one share a few transactions


class ScheduleLoop:
    def __init__(self, jobs: Jobs, settings: Settings, metrics: Metrics, *, batch: int = BATCH) -> None:
        self.jobs = jobs
        self.store = jobs.store
        self.interval = settings.schedule_interval_seconds
        self.grace = timedelta(seconds=settings.schedule_misfire_grace_seconds)
        self.gap = run_gap(self.grace, timedelta(seconds=self.interval))
        self.default_attempt_s = settings.default_attempt_timeout_seconds
        self.metrics = metrics
        self.batch = batch
        self.rounds = Rounds(log, "schedules")
        # This loop's own run (database clock): since when it has read the due schedules with
        # no silence past the gap, when it last did, and when it last told the store.
        self.since: datetime | None = None
        self.seen_at: datetime | None = None
        self.marked_at: datetime | None = None

    async def run(self) -> None:
        """Round after round until cancelled (this process no longer runs the loop)."""
        try:
            while True:
                await self.tick()
                await asyncio.sleep(self.interval)
        finally:
            self.metrics.schedule_lag(0.0)  # the lag is the next leader's to show

    async def tick(self) -> None:
        """One round: batch after batch of due schedules until one comes back short; the lag
        gauge says how late the oldest due one was when the round began. Errors are logged;
        the next round tries again."""
        with self.rounds.round():
            now = self.store.now()
            read = await self.fire_batch(now)
            self.metrics.schedule_lag(0.0 if read.oldest is None else (now - read.oldest).total_seconds())
            while len(read.due) == self.batch:
                read = await self.fire_batch(self.store.now())

    async def fire_batch(self, now: datetime) -> Backlog:
        """Read one batch of the schedules due at `now` and deal with each; what was read."""
        backlog = await self.read(now)
        if not backlog.due:
            return backlog
        runs = await self.runs(backlog, now)
        decided = [(due.schedule, self.decide(due, now, runs)) for due in backlog.due]
        made = await asyncio.gather(*(self.submit(one, firing.fire_at) for one, firing in decided))
        moves = [move(one, firing, job_no) for (one, firing), job_no in zip(decided, made, strict=True)]
        advanced = await self.store.advance_schedules([advance for advance, _ in moves])
        for (_, outcome), moved in zip(moves, advanced, strict=True):
            if moved:  # only the replica that advanced it counts the fire time
                self.metrics.schedule_fired(outcome.value)
        return backlog

    async def read(self, now: datetime) -> Backlog:
        """The due schedules at `now`; this loop's run goes on, or after a silence past the gap
        begins again, and the store hears of it every third of the gap."""
        fresh = self.seen_at is None or not continues(self.seen_at, now, self.gap)
        if fresh or self.marked_at is None or now - self.marked_at >= self.gap / 3:
            await self.jobs.blocking(self.store.mark_schedule_round, now, self.gap)
            self.marked_at = now
        backlog = await self.jobs.blocking(self.store.due_schedules, now, self.batch)
        if fresh:
            self.since = now
        self.seen_at = now
        return backlog

    async def runs(self, backlog: Backlog, now: datetime) -> list[Run]:
        """When loops ran since the oldest due fire time, this one included; read only when one is late."""
        assert self.since is not None and backlog.oldest is not None  # `read` came first and found some due
        own = Run(started_at=self.since, last_at=now)
        if now - backlog.oldest <= self.grace:
            return [own]
        return [*await self.jobs.blocking(self.store.schedule_runs, backlog.oldest), own]

    def decide(self, due: Due, now: datetime, runs: list[Run]) -> Firing:
        one = due.schedule
        assert one.next_fire_at is not None  # due_schedules reads only schedules with one
        return decide(
            one.timing, one.next_fire_at, now, overlap=one.overlap, catch_up=one.catch_up,
            previous_unfinished=due.previous_unfinished, grace=self.grace, runs=runs,
        )  # fmt: skip

    async def submit(self, one: ScheduleRecord, fire_at: datetime | None) -> str | None:
        """The job of one firing (made now, or by an earlier try of this fire time); None if refused
        (or for a decision that fires nothing)."""
        if fire_at is None:
            return None
        template = job_pb2.SubmitRequest.FromString(one.template)
        try:
            new = decode_submit(template, one.tenant, self.default_attempt_s)
            new = replace(new, idempotency_key=firing_key(one.schedule_id, fire_at))
            # The queue was checked against the creator's token when the schedule was made.
            who = Principal(
                tenant=one.tenant,
                roles=frozenset({"client"}),
                queues=frozenset({new.queue}),
                name=f"schedule {one.schedule_id}",
            )
            job, _ = await self.jobs.submit(who, new)
        except StoreUnavailable:
            raise
        except JobwireError as refused:
            log.warning("schedule %s/%s: firing at %s refused: %s", one.tenant, one.schedule_id, fire_at, refused)
            return None
        return job.job_no


def move(one: ScheduleRecord, firing: Firing, job_no: str | None) -> tuple[Advance, Outcome]:
    """The advance of a decided schedule and the outcome it counts.

    A firing whose submit was refused is REFUSED, not missed (a server ran at its time): the
    schedule counts it with its skipped firings, the metric by its own label, the log says why.
    """
    assert one.next_fire_at is not None  # due_schedules reads only schedules with one
    refused = firing.fire_at is not None and job_no is None
    outcome = Outcome.REFUSED if refused else firing.outcome
    advance = Advance(
        schedule=one, due_at=one.next_fire_at, next_fire_at=firing.next_fire_at,
        fired=None if firing.fire_at is None or job_no is None else (firing.fire_at, job_no),
        skipped=outcome in (Outcome.SKIPPED_OVERLAP, Outcome.REFUSED), missed=outcome is Outcome.MISSED,
    )  # fmt: skip
    return advance, outcome


def schedule_loop(jobs: Jobs, settings: Settings, metrics: Metrics) -> ScheduleLoop | None:
    """The schedule loop for the chore leader to run; None when the interval is 0."""
    if settings.schedule_interval_seconds <= 0:
        return None
    return ScheduleLoop(jobs, settings, metrics)
