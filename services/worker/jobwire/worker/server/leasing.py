"""Use cases behind WorkerService: long-polling claims, reports, endings, wake-ups.

Every worker call that changes a job goes through the runtime's group commit (`commits`):
calls from the whole fleet that arrive together share one transaction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from jobwire.db.changes import JobOp
from jobwire.db.handler_evidence import Record
from jobwire.db.leases import AwaitReview, Complete, ConfirmCancel, Fail, Release, Report
from jobwire.db.queue_limits import Budget
from jobwire.db.store import Call, Claim, JobStore, Work, heartbeat_call, lease_states
from jobwire.domain.commands import Claimant, Failure, ProgressReport
from jobwire.domain.errors import JobwireError, ResourceExhausted
from jobwire.domain.handler_evidence import Entry
from jobwire.domain.job import Artifact, JobRecord
from jobwire.domain.kept_results import KeptResult
from jobwire.domain.lease import Lease, LeaseStatus
from jobwire.domain.review import ReviewRequest
from jobwire.domain.states import Status
from jobwire.process_state.claim_kinds import ClaimKinds
from jobwire.process_state.last_claims import LastClaims
from jobwire.rpc.batching import Batcher
from jobwire.rpc.metrics import Metrics
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.shares import TenantShares
from jobwire.runtime.wakeup import Waiter, Wakeup

log = logging.getLogger(__name__)
T = TypeVar("T")

# Waiting claims are woken by submits in this process and its siblings (Wakeup) and by the
# runnable-work watcher for every other process and for jobs whose run_after comes later;
# this slow poll is only a safety net (an event the tail gave up on, a feed outage).
POLL_INTERVAL_S = 30.0
# A claim held back by a queue's limits is woken when a job of the queue ends (here or, through
# the event tail, anywhere) or the queue is resumed here; it looks again this often for what
# no event announces (a resume or a new limit through another process).
HELD_RECHECK_S = 2.0
TOKEN_MARGIN_S = 0.005  # a claim waiting for the next token looks this long after it is due
# ListWorkers needs "last seen", not every call: one write per worker this often.
SEEN_EVERY_S = 5.0
MAX_SEEN = 10_000  # workers remembered; each SDK restart is a new worker id
# (queue, job type) pairs a tenant's claims record in worker_claim for NO_WORKER, per process,
# within the rows' retention (JOBWIRE_MAX_CLAIM_KINDS_PER_TENANT; jobwire.process_state.claim_kinds)
MAX_CLAIM_KINDS_PER_TENANT = 10_000
KINDS_KEPT_S = 7 * 86_400.0  # JOBWIRE_RETENTION_WORKER_DAYS: rows not claimed for as long are purged
MAX_WAITING_CLAIMS = 20_000  # long polls one process holds at once, shared among tenants


class TooManyWaitingClaims(ResourceExhausted):
    """This server holds as many waiting claims of yours as it may; claim again in a while."""

    reason = "TOO_MANY_WAITING_CLAIMS"


class Leasing:
    def __init__(
        self,
        store: JobStore,
        commits: Batcher[Work, Any],
        wakeup: Wakeup,
        *,
        blocking: Blocking,
        metrics: Metrics,
        tenants: int = 1,
        kinds_per_tenant: int = MAX_CLAIM_KINDS_PER_TENANT,
        kinds_kept_s: float = KINDS_KEPT_S,
    ) -> None:
        self.store = store
        self.commits = commits
        self.wakeup = wakeup
        self.blocking = blocking  # the store's reads, on the database threads
        self.metrics = metrics  # the server's: counts the claims waiting here (jobwire_claims_waiting)
        # Long polls are held per tenant share: one tenant's thousands of idle workers must
        # not leave another's without a place to wait (jobwire.runtime.shares).
        self.waiting = TenantShares(MAX_WAITING_CLAIMS, tenants)
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._last_claims = LastClaims(MAX_SEEN)  # what a busy worker's heartbeats keep served
        self._kinds = ClaimKinds(
            every_s=SEEN_EVERY_S, keep_s=kinds_kept_s, per_tenant=kinds_per_tenant, full=_no_more_kinds
        )
        self._handing_back: set[asyncio.Future[Any]] = set()

    async def claim(
        self, who: Claimant, max_jobs: int, wait_s: float, *, stop: asyncio.Event | None = None
    ) -> list[Lease]:
        """Leases for up to `max_jobs` jobs, waiting up to `wait_s` for the first.

        `stop` ends the wait (answered empty) but never a claim's transaction: what that one
        commits is answered, where a cancel would hand it back, and its job would be claimed
        twice (a worker's session moving to a new connection ends its standing claim so)."""
        deadline = time.monotonic() + wait_s
        woken: Waiter | None = None
        while True:
            if stop is not None and stop.is_set():
                if woken is not None:
                    self.wakeup.pass_on(woken)  # the work it was woken for still needs a claim
                return []
            if who.shared and self.store.turns_due(who.queues):
                # Whose turn it is needs to know who has work: listed by a read of its own,
                # never inside the claim's transaction (jobwire.process_state.turns).
                await self.blocking(self.store.list_turns, who.queues, sorted(who.plans))
            self._last_claims.claimed(who.tenant, who.worker_id, who.queues, who.plans)
            work = Claim(who, max_jobs, self._note_seen(who.tenant, who.worker_id), kinds=self._kinds_due(who))
            try:
                leases = await self._claim_once(who, work)
            except BaseException:
                if woken is not None:
                    self.wakeup.pass_on(woken)  # the work it was woken for still needs a claim
                raise
            for budget in work.held.values():
                self.metrics.claim_held(str(budget.held))
            remaining = deadline - time.monotonic()
            if leases or remaining <= 0:
                return leases
            timeout = min(remaining, POLL_INTERVAL_S, *(_recheck_s(b) for b in work.held.values()))
            with self.waiting.hold(who.tenant, TooManyWaitingClaims), self.metrics.claim_waiting():
                waiting = self.wakeup.wait(who.tenant, who.queues, who.plans, timeout, held=work.held)
                woken = await _unless(stop, waiting)
            if woken is None:  # stopped
                return []
            if woken.woken_by is None and time.monotonic() >= deadline:
                # Nothing came: the caller's next Claim looks at once, so a last look now would
                # only repeat it (one query per idle worker and wait, bench/idle.py).
                return []

    async def _claim_once(self, who: Claimant, work: Claim) -> list[Lease]:
        attempt = asyncio.ensure_future(self.commits(work))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            # The caller left (deadline, disconnect, shutdown) while its claim's transaction
            # runs on, shielded, and may still commit: hand those leases back, or the jobs
            # would wait, stalled, for a worker that never heard of them.
            attempt.add_done_callback(lambda done: self._hand_back_claimed(who.tenant, done))
            raise

    def _hand_back_claimed(self, tenant: str, claimed: asyncio.Future[list[Lease]]) -> None:
        if not claimed.cancelled() and claimed.exception() is None:
            self.hand_back(tenant, claimed.result(), "the caller left")

    def hand_back(self, tenant: str, leases: Sequence[Lease], why: str) -> None:
        """Release leases whose claim was not delivered, at once, so their jobs run elsewhere."""
        for lease in leases:
            release = asyncio.ensure_future(
                self.release(tenant, lease.job_no, lease.worker_token, None, f"claim not delivered: {why}")
            )
            self._handing_back.add(release)
            release.add_done_callback(self._handed_back)

    def _handed_back(self, release: asyncio.Future[Any]) -> None:
        self._handing_back.discard(release)
        if not release.cancelled() and release.exception() is not None:
            log.warning("could not hand back an undelivered lease", exc_info=release.exception())

    def _note_seen(self, tenant: str, worker_id: str) -> bool:
        key, now = (tenant, worker_id), time.monotonic()
        if now - self._seen.get(key, -SEEN_EVERY_S) < SEEN_EVERY_S:
            return False
        self._seen[key] = now
        self._seen.move_to_end(key)
        if len(self._seen) > MAX_SEEN:
            self._seen.popitem(last=False)  # the longest unseen: at worst one write more for it
        return True

    def _kinds_due(self, who: Claimant) -> list[tuple[str, str]]:
        """The (queue, job type) pairs of `who` this process has not recorded as claimed for
        in the last SEEN_EVERY_S (NO_WORKER): writes grow with the kinds served, not with the
        workers serving them (320 workers of 64 queues x 100 job types each once took minutes),
        and a tenant's rows are bounded (MAX_CLAIM_KINDS_PER_TENANT)."""
        return self._kinds.due(who.tenant, who.queues, who.plans)

    async def heartbeat(self, tenant: str, worker_id: str, held: Sequence[tuple[str, str]]) -> list[LeaseStatus]:
        kinds = await self._serving(tenant, worker_id) if held else []
        call = heartbeat_call(tenant, worker_id, held, touch=self._note_seen(tenant, worker_id), kinds=kinds)
        return lease_states(held, await self.commits(call))

    async def _serving(self, tenant: str, worker_id: str) -> list[tuple[str, str]]:
        """The kinds a worker holding leases serves that are due to be recorded (NO_WORKER)."""
        serves = self._last_claims.heard(tenant, worker_id)
        if serves is None:  # it claimed through another process, or before this one started
            try:
                queues, job_types = await self.blocking(self.store.worker_serves, tenant, worker_id)
            except Exception:
                log.debug("could not read what worker %s serves", worker_id, exc_info=True)
                return []
            serves = self._last_claims.claimed(tenant, worker_id, queues, job_types)
        return self._kinds.due(tenant, *serves)

    async def renew(self, tenant: str, job_no: str, token: str) -> LeaseStatus:
        """The lease renewed as its worker's heartbeat would, on the word of a live session that holds it."""
        held = [(job_no, token)]
        (status,) = lease_states(held, await self.commits(heartbeat_call(tenant, "", held, touch=False)))
        return status

    async def reports(self, reports: Sequence[ProgressReport]) -> list[LeaseStatus | JobwireError]:
        """Several reports (one worker's batch) in one call: each its status or its refusal."""
        outcomes: list[LeaseStatus | JobwireError] = await self.commits(Call([Report.of(r) for r in reports]))
        return outcomes

    async def report(self, report: ProgressReport) -> LeaseStatus:
        return await self._one(Report.of(report))

    async def record(self, tenant: str, job_no: str, token: str, entries: tuple[Entry, ...]) -> int:
        """The handler's evidence entries, kept with its attempt; the attempt's count after them."""
        return await self._one(Record(tenant=tenant, job_no=job_no, token=token, entries=entries))

    async def complete(
        self, tenant: str, job_no: str, token: str, result: Artifact, kept: KeptResult | None = None
    ) -> JobRecord:
        return self._ended(
            await self._one(Complete(tenant=tenant, job_no=job_no, token=token, result=result, kept=kept))
        )

    async def fail(self, tenant: str, job_no: str, token: str, failure: Failure) -> JobRecord:
        return self._requeued(await self._one(Fail(tenant=tenant, job_no=job_no, token=token, failure=failure)))

    async def confirm_cancel(self, tenant: str, job_no: str, token: str, note: str) -> JobRecord:
        return self._ended(await self._one(ConfirmCancel(tenant=tenant, job_no=job_no, token=token, note=note)))

    async def release(self, tenant: str, job_no: str, token: str, checkpoint: bytes | None, note: str) -> JobRecord:
        op = Release(tenant=tenant, job_no=job_no, token=token, checkpoint=checkpoint, note=note)
        return self._requeued(await self._one(op))

    async def await_review(
        self, tenant: str, job_no: str, token: str, request: ReviewRequest, checkpoint: bytes | None
    ) -> JobRecord:
        return self._ended(
            await self._one(
                AwaitReview(tenant=tenant, job_no=job_no, token=token, request=request, checkpoint=checkpoint)
            )
        )

    async def _one(self, op: JobOp[T]) -> T:
        outcome = (await self.commits(Call([op])))[0]
        if isinstance(outcome, JobwireError):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    def _ended(self, job: JobRecord) -> JobRecord:
        """A job of a limited queue left its lease: a claim held back by that queue may take its place."""
        if self.store.limited.known(job.tenant, job.queue):
            self.wakeup.notify_held(job.tenant, job.queue, every=False)
        return job

    def _requeued(self, job: JobRecord) -> JobRecord:
        self._ended(job)
        if job.status is Status.QUEUED:
            # A retry with a backoff is not runnable yet; the poll finds it when it is.
            asyncio.get_running_loop().call_soon(self.wakeup.notify, job.tenant, job.queue, job.job_type)
        return job


def _no_more_kinds(tenant: str, bound: int) -> None:
    log.warning(
        "tenant %s: its workers claimed for %d queue and job type pairs; this process records no more"
        " (JOBWIRE_MAX_CLAIM_KINDS_PER_TENANT): their claims go on, their jobs may show NO_WORKER",
        tenant, bound,
    )  # fmt: skip


def _recheck_s(held: Budget) -> float:
    """How long a claim held back by `held` waits at most before it looks again by itself."""
    token = held.retry_after_s()
    return HELD_RECHECK_S if token is None else min(token + TOKEN_MARGIN_S, HELD_RECHECK_S)


async def _unless(stop: asyncio.Event | None, waiting: Coroutine[Any, Any, Waiter]) -> Waiter | None:
    """`waiting`'s waiter, or None once `stop` is set before it ends."""
    if stop is None:
        return await waiting
    wait = asyncio.ensure_future(waiting)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({wait, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not wait.done():
            wait.cancel()
        await asyncio.gather(wait, stopping, return_exceptions=True)
    return None if wait.cancelled() else wait.result()
