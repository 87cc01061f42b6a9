"""The Worker: claims jobs, runs them through JobRunner, and shuts down gracefully.

Shutdown: stop claiming; every running job is asked to stop at its next
safe point and is released with its latest checkpoint; whatever has not ended when the
grace period runs out is abandoned (its lease expires and the job's lease policy decides).
A second shutdown request ends the grace period at once. While the server is unreachable,
every call backs off and retries and handlers keep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc

from jobwire.client import aio_channel
from jobwire.observe import logs
from jobwire.v1 import job_pb2, worker_pb2, worker_pb2_grpc
from jobwire.worker.sdk._attempt import StopReason
from jobwire.worker.sdk._claims import Claims
from jobwire.worker.sdk._config import WorkerConfig
from jobwire.worker.sdk._context import JobContext
from jobwire.worker.sdk._deps import RunnerDeps
from jobwire.worker.sdk._handlers import Handlers, SyncHandler
from jobwire.worker.sdk._lease_keeper import LeaseKeeper
from jobwire.worker.sdk._reporter import ReportSender
from jobwire.worker.sdk._result import ResultStore
from jobwire.worker.sdk._rpc import CALL_TIMEOUT_S, CHANNEL_OPTIONS, WorkerRefused, WorkerStub, call_retrying
from jobwire.worker.sdk._runner import JobRunner
from jobwire.worker.sdk._session import SESSION_BEAT_S, SESSION_CLOSE_S, SessionStub
from jobwire.worker.sdk._stage_check import check_stages

log = logging.getLogger("jobwire.worker")


@dataclass(frozen=True)
class _Running:
    job_no: str
    runner: JobRunner | None  # None for a lease handed straight back
    task: asyncio.Task[object]


class Worker:
    """Runs handlers for the jobs it claims from WorkerService.

    Example:
        worker = Worker(WorkerConfig(target="127.0.0.1:50051"), registry)
        exit_code = await worker.run()   # until worker.shutdown() is called

    Args:
        config: Connection, queues, concurrency and timing.
        handlers: The job types this worker runs.
        stub: The WorkerStub to use instead of opening a channel (tests): a unary stub or
            fake, used as it is, or a SessionStub over one.

    Raises:
        UndeclaredStage: A handler's source enters a stage its plan does not have (a
            ValueError: jobwire-worker exits 2 with its message).
    """

    def __init__(self, config: WorkerConfig, handlers: Handlers, *, stub: WorkerStub | None = None) -> None:
        if not len(handlers):
            raise ValueError("a worker needs at least one handler")
        check_stages(handlers)  # a stage the source names but the plan lacks would fail every attempt
        self.config, self.handlers = config, handlers
        self._stub = stub
        self._store = (
            ResultStore(config.results_dir, base_url=config.results_url) if config.results_dir is not None else None
        )
        # By (tenant, job_no): a shared fleet's worker may run two tenants' jobs of one number.
        self._running: dict[tuple[str, str], _Running] = {}
        self._stopping = False
        self._deadline = float("inf")
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()
        self._claims: Claims | None = None
        self._claims_stopped = asyncio.Event()
        self._busy_threads = 0
        self._busy_lock = threading.Lock()
        self._refused: WorkerRefused | None = None

    @property
    def running(self) -> int:
        """Jobs running now."""
        return len(self._running)

    @property
    def abandoned_threads(self) -> int:
        """Sync handlers still running after shutdown; the process must exit to stop them."""
        return self._busy_threads

    def shutdown(self, *, immediate: bool = False) -> None:
        """Stop claiming and stop running jobs at their next safe point; call on the loop.

        The first call starts the grace period; a second call (or `immediate`) ends it.
        """
        now = time.monotonic()
        if self._stopping:
            self._deadline = min(self._deadline, now)
            self._hurry.set()
            return
        self._stopping = True
        self._deadline = now + (0.0 if immediate else self.config.grace_period)
        log.info("shutting down: %d running job(s), %.0fs grace", len(self._running), self._deadline - now)
        for running in self._running.values():
            if running.runner is not None:
                running.runner.request_stop(StopReason.SHUTDOWN)
        self._stop.set()
        if self._claims is not None:
            self._claims.wake()

    async def run(self) -> int:
        """Claim and run jobs until `shutdown()`; returns 0 if every job ended cleanly, else 1.

        Raises:
            WorkerRefused: The server refused the first Claim (UNAUTHENTICATED: a wrong or
                missing token; PERMISSION_DENIED: a token without the worker role or the
                queues asked for). Its message names the setting to fix.
        """
        channel = None
        stub = self._stub
        if stub is None:
            channel = aio_channel(self.config.channel_config(), CHANNEL_OPTIONS)
            unary = worker_pb2_grpc.WorkerServiceStub(channel)
            stub = SessionStub(unary, grace=self.config.session_grace) if self.config.transport == "session" else unary
        session = stub if isinstance(stub, SessionStub) else None
        # Made before the first claim: a folder missing here failed every job it leased
        # (found by the soak), each lease then left to expire.
        for folder in (self.config.tmp_root, self.config.results_dir):
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
        pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="jobwire-handler")
        keeper = LeaseKeeper(
            stub, worker_id=self.config.worker_id, default_interval=self.config.heartbeat_interval,
            most=SESSION_BEAT_S if session is not None else None,
        )  # fmt: skip
        reports = ReportSender(stub, interval=self.config.report_interval)
        deps = self._deps(stub, keeper, reports, pool)
        claims = Claims(
            self.config, self.handlers, stub, session,
            free=lambda: self.config.concurrency - len(self._running),
            start=functools.partial(self._start, stub, deps),
            stop=self._stop,
        )  # fmt: skip
        self._claims = claims
        logs.bind(worker_id=self.config.worker_id)  # every task made from here on logs it
        self._announce(session)
        upkeep = [asyncio.create_task(session.run(_Pushes(claims, keeper), channel), name="session")] if session else []
        for upkept in upkeep:
            upkept.add_done_callback(_session_ended)
        keeper_task = asyncio.create_task(keeper.run(), name="lease keeper")
        reports_task = asyncio.create_task(reports.run(), name="reports")
        claim_task = asyncio.create_task(self._claim_loop(claims), name="claim loop")
        try:
            await self._stop.wait()
            abandoned = await self._drain(claim_task)
            if session is not None:
                await session.close(SESSION_CLOSE_S)
                await self._hand_backs_sent()
        finally:
            # Normally all done by now; if run() itself was cancelled, take everything down.
            tasks = [claim_task, keeper_task, reports_task, *(r.task for r in self._running.values()), *upkeep]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            pool.shutdown(wait=False, cancel_futures=True)
            if channel is not None:
                await channel.close()
        if self._refused is not None:
            raise self._refused
        log.info("worker %s stopped", self.config.worker_id)
        return 1 if abandoned else 0

    def _announce(self, session: SessionStub | None) -> None:
        if session is None:
            log.info("worker transport: unary calls (as configured)")
        log.info(
            "worker %s: target %s, queues %s, job types %s, concurrency %d",
            self.config.worker_id,
            self.config.target,
            ",".join(self.config.queues),
            ",".join(s.job_type for s in self.handlers),
            self.config.concurrency,
        )

    def _deps(
        self, stub: WorkerStub, keeper: LeaseKeeper, reports: ReportSender, pool: ThreadPoolExecutor
    ) -> RunnerDeps:
        loop = asyncio.get_running_loop()

        def tracked(fn: SyncHandler, ctx: JobContext) -> object:
            with self._busy_lock:
                self._busy_threads += 1
            try:
                return fn(ctx)
            finally:
                with self._busy_lock:
                    self._busy_threads -= 1

        async def run_sync(fn: SyncHandler, ctx: JobContext) -> object:
            # In the job's context, as asyncio.to_thread would: the handler's log lines name the job.
            return await loop.run_in_executor(pool, contextvars.copy_context().run, tracked, fn, ctx)

        return RunnerDeps(
            stub=stub,
            keeper=keeper,
            store=self._store,
            tmp_root=self.config.tmp_root,
            run_sync=run_sync,
            give_up_at=lambda: self._deadline if self._stopping else None,
            reports=reports,
            claims_stopped=self._claims_stopped,
        )

    async def _claim_loop(self, claims: Claims) -> None:
        try:
            await claims.run()
        finally:
            self._claims_stopped.set()
        if claims.refused is not None:
            # Nothing this worker does can succeed: stop, so the process exits and says why
            # (a pod crash-loops with a reason instead of running idle).
            self._refused = claims.refused
            self.shutdown(immediate=True)

    def _start(self, stub: WorkerStub, deps: RunnerDeps, lease: worker_pb2.Lease) -> None:
        log.info(
            "job %s (%s) attempt %d claimed",
            lease.job_no,
            lease.job_type,
            lease.attempt,
            extra={"job_no": lease.job_no},
        )
        spec = self.handlers.get(lease.job_type)
        runner: JobRunner | None = None
        job = contextvars.copy_context()  # the job's log lines, and only they, name it
        job.run(logs.bind, job_no=lease.job_no)
        jobs_running = sum(1 for running in self._running.values() if running.runner is not None)
        if spec is None or self._stopping or jobs_running >= self.config.concurrency:
            # Claimed as shutdown began, a type we do not run, or (should a server push more
            # than the worker asked for) a lease with no slot free: handed straight back, the
            # attempt not charged.
            note = "worker shutting down" if self._stopping else "no free slot: the worker runs as many as it may"
            back = self._hand_back(stub, deps, lease, known=spec is not None, note=note)
            task: asyncio.Task[object] = asyncio.create_task(back, context=job)
        else:
            runner = JobRunner(deps, lease, spec)
            task = asyncio.create_task(runner.run(), name=f"job {lease.job_no}", context=job)
        self._running[lease.tenant, lease.job_no] = _Running(job_no=lease.job_no, runner=runner, task=task)
        task.add_done_callback(functools.partial(self._finished, lease.tenant, lease.job_no))

    def _finished(self, tenant: str, job_no: str, task: asyncio.Task[object]) -> None:
        self._running.pop((tenant, job_no), None)
        if self._claims is not None:
            self._claims.wake()
        if not task.cancelled() and task.exception() is not None:
            # A bug in the runtime itself: say so loudly; the lease expires and the policy decides.
            log.error("job %s: the worker runtime failed", job_no, exc_info=task.exception())

    async def _hand_back(
        self, stub: WorkerStub, deps: RunnerDeps, lease: worker_pb2.Lease, *, known: bool, note: str
    ) -> object:
        job_no, token, give_up = lease.job_no, lease.worker_token, deps.give_up_at
        with contextlib.suppress(grpc.RpcError):
            if known:
                request = worker_pb2.ReleaseRequest(job_no=job_no, worker_token=token, note=note)
                await call_retrying(
                    lambda: stub.Release(request, timeout=CALL_TIMEOUT_S), what="Release", give_up_at=give_up
                )
            else:
                log.error("job %s: no handler for job type %r", lease.job_no, lease.job_type)
                request_f = worker_pb2.FailRequest(
                    job_no=job_no,
                    worker_token=token,
                    category=job_pb2.JobError.PROCESSING_ERROR,
                    message="no worker runs this job type",
                    retryable=True,
                )
                await call_retrying(
                    lambda: stub.Fail(request_f, timeout=CALL_TIMEOUT_S), what="Fail", give_up_at=give_up
                )
        return None

    async def _hand_backs_sent(self) -> None:
        """Wait (a call's time at most) for the leases pushed as the session closed to be handed back."""
        backs = {running.task for running in self._running.values()}
        if backs:
            await asyncio.wait(backs, timeout=CALL_TIMEOUT_S)

    async def _drain(self, claim_task: asyncio.Task[None]) -> bool:
        """Wait for the claim loop and running jobs until the deadline; True if any were abandoned."""
        while True:
            pending: set[asyncio.Future[Any]] = {r.task for r in self._running.values()}
            if not claim_task.done():
                pending.add(claim_task)
            remaining = self._deadline - time.monotonic()
            if not pending or remaining <= 0:
                break
            hurry = asyncio.ensure_future(self._hurry.wait())
            await asyncio.wait({*pending, hurry}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            hurry.cancel()
        left = list(self._running.values())
        for running in left:
            log.error("job %s did not reach a safe point within the grace period; abandoned", running.job_no)
            running.task.cancel()
        if left:
            await asyncio.wait([r.task for r in left], timeout=5.0)
        return bool(left) or self._busy_threads > 0


def _session_ended(task: asyncio.Task[None]) -> None:
    # It ends by itself only once the server turned out to have no Session, or by a bug: say so
    # loudly, as every call made after it would wait out its timeout.
    if not task.cancelled() and task.exception() is not None:
        log.error("the worker's session failed; no call can be made", exc_info=task.exception())


@dataclass(frozen=True)
class _Pushes:
    """What the session hears, to whom it concerns: leases to the claims, a lease's news to the keeper."""

    claims: Claims
    keeper: LeaseKeeper

    def leased(self, reply: worker_pb2.ClaimResponse) -> None:
        self.claims.leased(reply)

    def cancel_requested(self, state: worker_pb2.LeaseState) -> None:
        self.keeper.told(state.job_no, worker_pb2.LeaseState.CANCEL_REQUESTED)

    def lease_lost(self, state: worker_pb2.LeaseState) -> None:
        timed_out = state.state == worker_pb2.LeaseState.TIMED_OUT
        self.keeper.told(state.job_no, worker_pb2.LeaseState.TIMED_OUT if timed_out else worker_pb2.LeaseState.LOST)

    def opened(self) -> None:
        self.claims.wake()
        self.keeper.renew_now()  # a worker back within the grace names its leases in time

    def gone(self) -> None:
        self.keeper.lose_all()
