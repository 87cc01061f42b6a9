"""Honest, cheap progress: coalesce a job's reports into at most one ReportStage per interval.

Rules (DESIGN §8, issue 4):
* while the stage is unchanged, at most one ReportStage per `interval` (250 ms), measured
  from the start of one send to the start of the next;
* a stage change is sent at once, and every stage entered is reported, however short;
* within a stage the newest snapshot is what gets sent, so the last report is the latest value;
* a checkpoint rides on the next report and is never dropped, only superseded by a newer one;
* UNAVAILABLE and friends are retried with backoff; WORKER_LEASE_LOST stops the job.

One sender task per job keeps that job's reports strictly ordered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

import grpc

from jobwire.v1 import worker_pb2
from jobwire.worker.sdk._context import Snapshot, StopReason
from jobwire.worker.sdk._rpc import CALL_TIMEOUT_S, Backoff, WorkerStub, describe, is_lease_lost, is_transient

log = logging.getLogger("jobwire.worker")
REPORT_INTERVAL_S = 0.25


class JobReporter:
    """Sends one job's progress snapshots to WorkerService.ReportStage. Lives on the event loop."""

    def __init__(
        self,
        stub: WorkerStub,
        *,
        job_no: str,
        token: str,
        first_stage: str,
        on_stop: Callable[[StopReason], None],
        interval: float = REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stub = stub
        self._job_no, self._token = job_no, token
        self._on_stop = on_stop
        self._interval, self._clock = interval, clock
        # Claim already put the job in its first stage, so that is what the server holds.
        self._sent_stage = first_stage
        self._sent_checkpoint_seq = 0
        self._checkpoint: tuple[int, bytes] | None = None  # the newest seen, sent or not
        self._last_sent_at = float("-inf")
        self._backlog: deque[Snapshot] = deque()  # entries into stages not yet reported
        self._latest: Snapshot | None = None
        self._dirty = False  # `_latest` has not been sent
        self._closed = False
        self._wake = asyncio.Event()
        self._urgent = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._backoff = Backoff(initial=interval)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"report {job_no}")

    def update(self, snapshot: Snapshot) -> None:
        """Take a new snapshot; call on the loop (the sink hops threads for us)."""
        if self._closed:
            return
        previous = self._latest
        if self._dirty and previous is not None and previous.stage not in (snapshot.stage, self._sent_stage):
            # `previous` entered a stage the server has not heard of: keep it, in order.
            self._backlog.append(previous)
        self._latest, self._dirty = snapshot, True
        if snapshot.checkpoint is not None and snapshot.checkpoint_seq > (self._checkpoint or (0, b""))[0]:
            self._checkpoint = (snapshot.checkpoint_seq, snapshot.checkpoint)
        self._idle.clear()
        self._wake.set()
        if snapshot.stage != self._sent_stage:
            self._urgent.set()

    async def flush(self, timeout: float) -> bool:
        """Wait until the latest snapshot was sent (True) or `timeout` passed (False)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop sending; anything unsent is dropped (flush first to keep it)."""
        self._closed = True
        self._idle.set()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        try:
            while not self._closed:
                if not self._backlog and not self._dirty:
                    self._idle.set()
                    await self._wake.wait()
                    self._wake.clear()
                    continue
                if not self._backlog:
                    await self._wait_window()
                await self._send(self._next())
        finally:
            self._idle.set()  # a closed reporter never holds up a flush

    def _next(self) -> Snapshot:
        if self._backlog:
            return self._backlog.popleft()
        assert self._latest is not None
        self._dirty = False
        return self._latest

    async def _wait_window(self) -> None:
        """Hold a same-stage report until the interval since the last send has passed."""
        while True:
            assert self._latest is not None
            if self._latest.stage != self._sent_stage:
                return
            delay = self._last_sent_at + self._interval - self._clock()
            if delay <= 0:
                return
            # Updates that raced the previous send set the flag for a stage that has been
            # sent since: only a stage change from now on may cut the wait short.
            self._urgent.clear()
            try:
                await asyncio.wait_for(self._urgent.wait(), delay)
            except TimeoutError:
                return

    async def _send(self, snapshot: Snapshot) -> None:
        request, checkpoint_seq = self._request(snapshot)
        self._last_sent_at = self._clock()
        try:
            reply = await self._stub.ReportStage(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            await self._failed(snapshot, exc)
            return
        self._backoff.reset()
        self._sent_stage = snapshot.stage
        self._sent_checkpoint_seq = max(self._sent_checkpoint_seq, checkpoint_seq)
        if reply.cancel_requested:
            self._on_stop(StopReason.CANCEL)

    def _request(self, snapshot: Snapshot) -> tuple[worker_pb2.ReportStageRequest, int]:
        """The request for `snapshot`, carrying the newest checkpoint not yet acknowledged."""
        request = worker_pb2.ReportStageRequest(
            job_no=self._job_no,
            worker_token=self._token,
            stage=snapshot.stage,
            processed_units=snapshot.processed,
        )
        if snapshot.total is not None:
            request.total_units = snapshot.total
        if self._checkpoint is not None and self._checkpoint[0] > self._sent_checkpoint_seq:
            request.checkpoint = self._checkpoint[1]
            return request, self._checkpoint[0]
        return request, 0

    async def _failed(self, snapshot: Snapshot, exc: grpc.RpcError) -> None:
        if is_lease_lost(exc):
            log.warning("job %s: lease lost while reporting; stopping it", self._job_no)
            self._closed = True
            self._on_stop(StopReason.LOST)
            return
        if not is_transient(exc):
            # A refused report (bad stage, regression) will be refused again: drop it.
            log.error("job %s: report refused (%s); dropped", self._job_no, describe(exc))
            return
        self._keep(snapshot)
        delay = self._backoff.next()
        log.warning("job %s: report failed (%s); retrying in %.2fs", self._job_no, describe(exc), delay)
        await asyncio.sleep(delay)

    def _keep(self, snapshot: Snapshot) -> None:
        """Put an unsent snapshot back, unless something newer in its stage replaced it."""
        assert self._latest is not None
        if self._latest.stage != snapshot.stage and snapshot.stage != self._sent_stage:
            self._backlog.appendleft(snapshot)  # a stage entry the server must still hear of
        elif not self._dirty:
            self._latest, self._dirty = snapshot, True
