"""The schedule loop of a job-service process: find due schedules, submit their jobs, move them on.

Every `JOBWIRE_SCHEDULE_INTERVAL_SECONDS` (jittered, so replicas do not tick in step) a
round reads the schedules whose next fire time has come, by the database clock, and asks
jobwire.domain.schedules.decide what to do with each. A firing submits the template
through the normal submit (group commit) with the idempotency key
`<schedule_id>@<fire time>`, so however many replicas find it due, one job is made per
fire time; then the round advances next_fire_at with an UPDATE guarded by the fire time it
read, so one replica advances it. A crash between the two submits the same key again on
the next round, which answers with the job already made. A database outage is logged and
waited out: the loop never dies of an error.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial

from jobwire.domain.errors import JobwireError, StoreUnavailable
from jobwire.domain.schedules import Due, Outcome, ScheduleRecord, decide, firing_key
from jobwire.jobapi.decode import decode_submit
from jobwire.jobapi.jobs import Jobs
from jobwire.rpc.auth import Principal
from jobwire.rpc.metrics import Metrics
from jobwire.runtime.rounds import Rounds
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2

log = logging.getLogger(__name__)
BATCH = 100  # due schedules per read: more wait for the next round


class ScheduleLoop:
    def __init__(self, jobs: Jobs, settings: Settings, metrics: Metrics) -> None:
        self.jobs = jobs
        self.store = jobs.store
        self.interval = settings.schedule_interval_seconds
        self.grace = timedelta(seconds=settings.schedule_misfire_grace_seconds)
        self.default_attempt_s = settings.default_attempt_timeout_seconds
        self.metrics = metrics
        self.rounds = Rounds(log, "schedules")

    async def run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(self.interval * random.uniform(0.8, 1.2))

    async def tick(self) -> None:
        """One round over the due schedules. Errors are logged; the next round tries again."""
        with self.rounds.round():
            now = self.store.now()
            for due in await self.jobs.blocking(self.store.due_schedules, now, BATCH):
                await self.fire(due, now)

    async def fire(self, due: Due, now: datetime) -> None:
        one = due.schedule
        assert one.next_fire_at is not None  # due_schedules reads only schedules with one
        firing = decide(
            one.timing, one.next_fire_at, now, overlap=one.overlap, catch_up=one.catch_up,
            previous_unfinished=due.previous_unfinished, grace=self.grace,
        )  # fmt: skip
        outcome, fired = firing.outcome, None
        if firing.fire_at is not None:
            job_no = await self.submit(one, firing.fire_at)
            if job_no is None:
                outcome = Outcome.MISSED
            else:
                fired = (firing.fire_at, job_no)
        advance = partial(
            self.store.advance_schedule, one, due_at=one.next_fire_at, next_fire_at=firing.next_fire_at,
            fired=fired, skipped=outcome is Outcome.SKIPPED_OVERLAP,
        )  # fmt: skip
        if await self.jobs.blocking(advance):  # only the replica that advanced it counts the fire time
            self.metrics.schedule_fired(outcome.value)

    async def submit(self, one: ScheduleRecord, fire_at: datetime) -> str | None:
        """The job of one firing (made now, or by an earlier try of this fire time); None if refused."""
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


def start(jobs: Jobs, settings: Settings, metrics: Metrics) -> asyncio.Task[None] | None:
    """The schedule loop as a background task for its host to stop; None when the interval is 0."""
    if settings.schedule_interval_seconds <= 0:
        return None
    loop = ScheduleLoop(jobs, settings, metrics)
    return asyncio.get_running_loop().create_task(loop.run(), name="jobwire-schedules")
