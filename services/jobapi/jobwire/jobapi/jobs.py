"""Use cases behind JobService and AdminService: permission checks, store calls, wake-ups.

Submits and state changes go through the runtime's group commit: concurrent calls share
one transaction. Reads run on the blocking pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from jobwire.db.changes import JobOp
from jobwire.db.retention import ArtifactDeleter, keep_files
from jobwire.db.store import Call, JobStore, Submit, SubmitBatch, Work
from jobwire.db.user_actions import Cancel, Requeue, Resolve, Retry
from jobwire.domain.batches import BatchRecord, NewBatch
from jobwire.domain.commands import JobFilter, NewJob
from jobwire.domain.errors import JobNotFound, JobwireError
from jobwire.domain.evidence import Finding, FindingKind, WorkerInfo
from jobwire.domain.flow import QueueLimits
from jobwire.domain.job import JobRecord
from jobwire.domain.limits import LIST_SCAN_ROWS
from jobwire.domain.review import Decision, Review
from jobwire.domain.states import Status
from jobwire.rpc.auth import Principal
from jobwire.rpc.batching import Batcher
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.wakeup import Wakeup

T = TypeVar("T")
log = logging.getLogger(__name__)


class Jobs:
    def __init__(
        self,
        store: JobStore,
        blocking: Blocking,
        commits: Batcher[Work, Any],
        wakeup: Wakeup,
        *,
        no_worker_after: timedelta,
        worker_gone_after: timedelta,
        list_scan_rows: int = LIST_SCAN_ROWS,
        deleter: ArtifactDeleter = keep_files,
        news: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.deleter = deleter  # JOBWIRE_ARTIFACT_DELETER: a deleted job's result file goes too
        self.no_worker_after = no_worker_after  # JOBWIRE_NO_WORKER_AFTER
        self.list_scan_rows = list_scan_rows  # JOBWIRE_LIST_SCAN_ROWS
        # ListWorkers' live or gone: one lease plus the stall grace, when leases would be lost
        self.worker_gone_after = worker_gone_after
        self.blocking = blocking
        self.commits = commits
        self.wakeup = wakeup
        # A cancel or requeue committed: the event tails poll at once, so the worker's Session
        # holding the job is pushed it within milliseconds, not at the next poll.
        self.news = news

    async def submit(self, who: Principal, new: NewJob) -> tuple[JobRecord, bool]:
        who.check_queue(new.queue)
        (answer,) = await self.commits(Submit([new]))
        if isinstance(answer, JobwireError):
            raise answer
        job, created = answer
        if created:
            self.wakeup.notify(new.tenant, new.queue, new.job_type)
        return job, created

    async def submit_batch(self, who: Principal, batch: NewBatch) -> tuple[str, list[JobRecord]]:
        for new in batch.jobs:
            who.check_queue(new.queue)
        answer = await self.commits(SubmitBatch(batch))
        if isinstance(answer, JobwireError):
            raise answer
        batch_id, jobs, created = answer
        if created:
            for queue, job_type in dict.fromkeys((job.queue, job.job_type) for job in jobs):
                self.wakeup.notify(batch.tenant, queue, job_type)
        return batch_id, jobs

    async def with_store(self, call: Callable[[JobStore], T]) -> T:
        """`call` with the store, on the blocking pool: a read that needs nothing but the store
        (its answer is domain values), made by a servicer, which imports no database code."""
        return await self.blocking(call, self.store)

    async def cancel_batch(self, who: Principal, batch_id: str) -> BatchRecord:
        """Cancel each unfinished job as Cancel would; one that refuses (a stage that cannot be
        cancelled) runs on, and the counts say so. Only the jobs the caller sees: a token of
        some queues cancels the batch's jobs in those."""
        job_nos = await self.blocking(partial(self.store.batch_job_nos, who.scope, batch_id, unfinished=True))
        if job_nos:
            await self.commits(Call([Cancel(scope=who.scope, job_no=job_no) for job_no in job_nos]))
            self.news()
        return await self.blocking(self.store.get_batch, who.scope, batch_id)

    async def get(self, who: Principal, job_no: str) -> JobRecord:
        return await self.blocking(lambda: self.store.get(who.scope, job_no, no_worker_after=self.no_worker_after))

    async def check_visible(self, who: Principal, job_nos: Sequence[str]) -> None:
        """NOT_FOUND unless the caller sees every one of `job_nos`, before a watch of them starts.

        Watches check the tenant themselves; a token of some queues is checked here, once (a
        job's queue never changes), and answered exactly as for a job that does not exist.
        """
        if who.scope.queues is not None and job_nos:
            seen = await self.blocking(self.store.visible_jobs, who.scope, job_nos)
            if seen != set(job_nos):
                raise JobNotFound()

    async def cancel(self, who: Principal, job_no: str) -> JobRecord:
        job = await self._one(Cancel(scope=who.scope, job_no=job_no))
        self.news()
        return job

    async def delete(self, who: Principal, job_no: str) -> None:
        """Remove a finished job now, as retention would later; an unfinished one is refused."""
        await self.blocking(self.store.delete_finished, who.scope, job_no, self.deleter)

    async def retry(self, who: Principal, job_no: str, *, force: bool = False) -> JobRecord:
        """Queue a FAILED job again; `force` (the admin role only) even when its error is not retryable."""
        if force:
            who.check_role("admin", "force a retry (RetryRequest.force)")
        job = await self._one(Retry(scope=who.scope, job_no=job_no, forced_by=who.name if force else None))
        if job.status is Status.QUEUED:
            self.wakeup.notify(who.tenant, job.queue, job.job_type)
        return job

    async def resolve(self, who: Principal, job_no: str, decision: Decision, note: str) -> JobRecord:
        # The tenant is who resolved it, as a review has always said (the token's `name` is
        # newer, and only the evidence trail of a forced retry uses it so far).
        review = Review(decision=decision, note=note, resolved_by=who.tenant)
        job = await self._one(Resolve(scope=who.scope, job_no=job_no, review=review))
        if job.status is Status.QUEUED:
            self.wakeup.notify(who.tenant, job.queue, job.job_type)
        return job

    async def _one(self, op: JobOp[T]) -> T:
        outcome = (await self.commits(Call([op])))[0]
        if isinstance(outcome, JobwireError):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    async def list_jobs(self, where: JobFilter, page_size: int, page_token: str) -> tuple[list[JobRecord], str]:
        return await self.blocking(
            lambda: self.store.list_jobs(
                where, page_size, page_token, no_worker_after=self.no_worker_after, scan_rows=self.list_scan_rows
            )
        )

    async def requeue(self, who: Principal, job_no: str, reason: str) -> JobRecord:
        job = await self._one(Requeue(scope=who.scope, job_no=job_no, reason=reason, by=who.name))
        log.info("job %s/%s requeued by %s: %s", who.tenant, job_no, who.name, reason or "no reason given")
        self.wakeup.notify(who.tenant, job.queue, job.job_type)
        self.news()
        return job

    async def inspect(
        self, who: Principal, stalled_after: timedelta, queue: str, kinds: list[FindingKind]
    ) -> list[Finding]:
        return await self.blocking(
            lambda: self.store.inspect(
                who.scope, stalled_after=stalled_after, queue=queue, kinds=kinds, no_worker_after=self.no_worker_after
            )
        )

    async def list_workers(
        self, who: Principal, queue: str, page_size: int, page_token: str
    ) -> tuple[list[WorkerInfo], str]:
        return await self.blocking(
            self.store.list_workers, who.scope, queue, page_size, page_token, self.worker_gone_after
        )

    async def queue_limits(self, who: Principal, queue: str) -> QueueLimits:
        who.check_queue(queue)
        return await self.blocking(self.store.queue_limits, who.tenant, queue)

    async def set_queue_limits(self, who: Principal, queue: str, limits: QueueLimits) -> QueueLimits:
        return await self._change_queue(who, queue, lambda old: replace(limits, paused=old.paused), "limits set")

    async def pause_queue(self, who: Principal, queue: str) -> QueueLimits:
        return await self._change_queue(who, queue, lambda old: replace(old, paused=True), "paused")

    async def resume_queue(self, who: Principal, queue: str) -> QueueLimits:
        return await self._change_queue(who, queue, lambda old: replace(old, paused=False), "resumed")

    async def _change_queue(
        self, who: Principal, queue: str, change: Callable[[QueueLimits], QueueLimits], what: str
    ) -> QueueLimits:
        who.check_queue(queue)
        after = await self.blocking(self.store.change_queue_limits, who.tenant, queue, change)
        log.info("queue %s of tenant %s %s by %s: now %s", queue, who.tenant, what, who.name, after)
        # Claims held back here may lease now (a resume, a higher limit): wake them.
        self.wakeup.notify_held(who.tenant, queue)
        return after
