"""Honest, cheap progress: each job's reports coalesced, every job of a worker sent in one call.

Rules (DESIGN §8, issues 4 and 8):
* one BatchReportStage per worker per `interval` (250 ms) carries the news of all its jobs,
  so a fleet's calls grow with its workers, not with its jobs;
* within a stage a job's newest snapshot is what gets sent: at most one report per job and
  interval, and the last report is the latest value;
* every stage entered is reported, in order, however short;
* a checkpoint rides on the next report and is never dropped, only superseded by a newer one;
* a batch that fails in transit (UNAVAILABLE and friends) is sent again with backoff;
  WORKER_LEASE_LOST in a result stops that job (as timed out when it says so); another
  refusal drops that report;
* evidence entries (`ctx.record`) ride on the same cadence: each job's pending entries in one
  RecordEvidence call right after the interval's BatchReportStage (so the server files them
  under the stage the handler was in), never dropped in transit, and sent before the attempt
  ends (the endings flush first).

`JobReporter` keeps one job's state; `ReportSender` (one per worker) collects what every
reporter has due and sends it. Users see a change within one interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

import grpc
from google.rpc import code_pb2, status_pb2

from jobwire.client import Backoff, Pauses, status_info
from jobwire.domain.handler_evidence import MAX_ENTRIES_PER_CALL, Entry
from jobwire.v1 import worker_pb2
from jobwire.worker.sdk._attempt import Snapshot, StopReason
from jobwire.worker.sdk._rpc import CALL_TIMEOUT_S, WorkerStub, describe, is_transient, retry_level

log = logging.getLogger("jobwire.worker")
REPORT_INTERVAL_S = 0.25
MAX_REPORTS_PER_CALL = 1000  # the server's limit per BatchReportStage


class JobReporter:
    """One job's progress: what the server has heard, and what it should hear next. Lives on the loop."""

    def __init__(
        self,
        sender: ReportSender,
        *,
        job_no: str,
        token: str,
        first_stage: str,
        on_stop: Callable[[StopReason], None],
    ) -> None:
        self._sender = sender
        self.job_no, self._token = job_no, token
        self.ref = (job_no, token)  # the lease it reports on: a fleet may hold two tenants' jobs of one number
        self._on_stop = on_stop
        # Claim already put the job in its first stage, so that is what the server holds.
        self._sent_stage = first_stage
        self._sent_checkpoint_seq = 0
        self._checkpoint: tuple[int, bytes] | None = None  # the newest seen, sent or not
        self._backlog: deque[Snapshot] = deque()  # entries into stages not yet reported
        self._latest: Snapshot | None = None
        self._dirty = False  # `_latest` has not been sent
        self._in_flight: list[tuple[Snapshot, int]] = []  # sent, not answered: (snapshot, checkpoint seq)
        self._entries: deque[Entry] = deque()  # evidence recorded, not sent
        self._entries_in_flight: list[Entry] = []
        self._closed = False
        self._idle = asyncio.Event()
        self._idle.set()
        sender.add(self)

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
        self._sender.wake()

    def record(self, entry: Entry) -> None:
        """Take an evidence entry of the handler's; call on the loop (the sink hops threads for us)."""
        if self._closed:
            return
        self._entries.append(entry)
        self._idle.clear()
        self._sender.wake()

    @property
    def pending(self) -> bool:
        if self._closed or self._in_flight or self._entries_in_flight:
            return False
        return bool(self._backlog or self._dirty or self._entries)

    @property
    def _quiet(self) -> bool:
        """Nothing to send and nothing awaiting an answer: a flush may return."""
        return self._closed or not (self.pending or self._in_flight or self._entries_in_flight)

    def take_entries(self) -> worker_pb2.RecordEvidenceRequest | None:
        """The evidence to send now (at most one call's worth), marked in flight; None: none."""
        if self._closed or self._entries_in_flight or not self._entries:
            return None
        count = min(len(self._entries), MAX_ENTRIES_PER_CALL)
        self._entries_in_flight = [self._entries.popleft() for _ in range(count)]
        return worker_pb2.RecordEvidenceRequest(
            job_no=self.job_no, worker_token=self._token,
            entries=[worker_pb2.EvidenceEntry(key=e.key, value=e.value) for e in self._entries_in_flight],
        )  # fmt: skip

    def entries_settled(self, error: grpc.RpcError | None) -> None:
        """The answer to `take_entries`: None kept them; a failure in transit puts them back."""
        sent, self._entries_in_flight = self._entries_in_flight, []
        if error is not None and not self._closed:
            if is_transient(error):
                self._entries.extendleft(reversed(sent))
            else:
                # A lost lease is the heartbeat's to act on; any other refusal would come again.
                log.error("job %s: %d evidence entries refused (%s); dropped", self.job_no, len(sent), describe(error))
        if self._quiet:
            self._idle.set()

    def take(self) -> list[worker_pb2.ReportStageRequest]:
        """What to send now (stage entries first, then the latest), marked in flight."""
        if not self.pending:
            return []
        snapshots = list(self._backlog)
        self._backlog.clear()
        if self._dirty:
            assert self._latest is not None
            snapshots.append(self._latest)
            self._dirty = False
        requests = []
        for snapshot in snapshots:
            request, seq = self._request(snapshot)
            requests.append(request)
            self._in_flight.append((snapshot, seq))
        return requests

    def _request(self, snapshot: Snapshot) -> tuple[worker_pb2.ReportStageRequest, int]:
        """The request for `snapshot`, carrying the newest checkpoint not yet acknowledged."""
        request = worker_pb2.ReportStageRequest(
            job_no=self.job_no, worker_token=self._token, stage=snapshot.stage, processed_units=snapshot.processed
        )
        if snapshot.total is not None:
            request.total_units = snapshot.total
        if self._checkpoint is not None and self._checkpoint[0] > self._sent_checkpoint_seq:
            request.checkpoint = self._checkpoint[1]
            return request, self._checkpoint[0]
        return request, 0

    def settle(self, results: list[worker_pb2.ReportStageResult | None]) -> None:
        """The answers to what `take` gave, in order; None: the batch did not arrive (send again)."""
        sent, self._in_flight = self._in_flight, []
        unsent: list[Snapshot] = []
        for (snapshot, seq), result in zip(sent, results, strict=True):
            if self._closed:
                return
            if result is None:
                unsent.append(snapshot)
            elif result.WhichOneof("result") == "response":
                self._sent_stage = snapshot.stage
                self._sent_checkpoint_seq = max(self._sent_checkpoint_seq, seq)
                if result.response.cancel_requested:
                    self._on_stop(StopReason.CANCEL)
            elif (lost := _lease_lost(result.error)) is not None:
                why = "the attempt timed out" if lost is StopReason.TIMED_OUT else "lease lost"
                log.warning("job %s: %s while reporting; stopping it", self.job_no, why)
                self._closed = True
                self._on_stop(lost)
            else:
                # A refused report (bad stage, regression) would be refused again: drop it.
                log.error("job %s: report refused (%s: %s); dropped", self.job_no,
                          code_pb2.Code.Name(result.error.code), result.error.message)  # fmt: skip
        self._keep(unsent)
        if self._quiet:
            self._idle.set()

    def _keep(self, unsent: list[Snapshot]) -> None:
        """Put back what did not arrive, unless something newer in its stage replaced it."""
        for snapshot in reversed(unsent):
            if self._latest is not None and self._latest.stage == snapshot.stage and self._dirty:
                continue  # superseded by a newer value of the same stage
            if self._latest is not None and self._latest.stage != snapshot.stage and snapshot.stage != self._sent_stage:
                self._backlog.appendleft(snapshot)  # a stage entry the server must still hear of
            elif not self._dirty:
                self._latest, self._dirty = snapshot, True

    def send_now(self) -> None:
        """Send what is pending without waiting for the interval (and without waiting here)."""
        self._sender.wake(now=True)

    async def flush(self, timeout: float) -> bool:
        """Send what is pending now and wait until it was answered (True) or `timeout` passed."""
        self.send_now()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop reporting; anything unsent is dropped (flush first to keep it)."""
        self._closed = True
        self._idle.set()
        self._sender.remove(self)


class ReportSender:
    """Sends every job's due reports of one worker in one BatchReportStage per interval."""

    def __init__(
        self, stub: WorkerStub, *, interval: float = REPORT_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._stub = stub
        self._interval, self._clock = interval, clock
        self._reporters: dict[tuple[str, str], JobReporter] = {}
        self._wake = asyncio.Event()
        self._now = asyncio.Event()  # a flush: do not wait for the interval
        self._backoff = Pauses(Backoff(initial=interval, maximum=5.0, jitter=0.5))
        self._last_sent_at = float("-inf")
        self.calls = 0  # BatchReportStage calls made, for tests and logs
        self.evidence_calls = 0  # RecordEvidence calls made

    def add(self, reporter: JobReporter) -> None:
        self._reporters[reporter.ref] = reporter

    def remove(self, reporter: JobReporter) -> None:
        if self._reporters.get(reporter.ref) is reporter:
            del self._reporters[reporter.ref]

    def wake(self, *, now: bool = False) -> None:
        self._wake.set()
        if now:
            self._now.set()

    async def run(self) -> None:
        """Send until cancelled."""
        while True:
            if not any(r.pending for r in self._reporters.values()):
                self._wake.clear()
                await self._wake.wait()
                continue
            delay = self._last_sent_at + self._interval - self._clock()
            if delay > 0 and not self._now.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._now.wait(), delay)
            self._now.clear()
            await self._send()

    async def _send(self) -> None:
        due = [r for r in list(self._reporters.values()) if r.pending]
        taken = [(r, r.take()) for r in due]
        taken = [(r, requests) for r, requests in taken if requests]
        self._last_sent_at = self._clock()
        # Reports first: an entry is filed under the stage the server holds when it arrives,
        # so the stage the handler entered before recording must have been heard of first.
        await self._send_reports(taken)
        evidence = [(r, request) for r in due if (request := r.take_entries()) is not None]
        await asyncio.gather(*(self._record(r, request) for r, request in evidence))

    async def _record(self, reporter: JobReporter, request: worker_pb2.RecordEvidenceRequest) -> None:
        self.evidence_calls += 1
        try:
            await self._stub.RecordEvidence(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            if is_transient(exc):
                delay = self._backoff.next()
                log.log(
                    retry_level(exc),
                    "evidence of job %s failed (%s); again in %.2fs",
                    reporter.job_no,
                    describe(exc),
                    delay,
                )
                self._last_sent_at = self._clock() + delay - self._interval
            reporter.entries_settled(exc)
            return
        reporter.entries_settled(None)

    async def _send_reports(self, taken: list[tuple[JobReporter, list[worker_pb2.ReportStageRequest]]]) -> None:
        for chunk in _chunks(taken):
            results = await self._call([request for _, requests in chunk for request in requests])
            start = 0
            for reporter, requests in chunk:
                reporter.settle(results[start : start + len(requests)])
                start += len(requests)

    async def _call(self, requests: list[worker_pb2.ReportStageRequest]) -> list[worker_pb2.ReportStageResult | None]:
        """One result per request; None for each when the call failed in transit."""
        self.calls += 1
        try:
            reply = await self._stub.BatchReportStage(
                worker_pb2.BatchReportStageRequest(reports=requests), timeout=CALL_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            if not is_transient(exc):
                # Refused whole (not a state a retry changes): each report is refused with it.
                log.error("reports of %d job(s) refused (%s); dropped", len(requests), describe(exc))
                refused = worker_pb2.ReportStageResult()
                refused.error.code, refused.error.message = code_pb2.FAILED_PRECONDITION, describe(exc)
                return [refused for _ in requests]
            delay = self._backoff.next()
            log.log(
                retry_level(exc),
                "reports of %d job(s) failed (%s); again in %.2fs",
                len(requests),
                describe(exc),
                delay,
            )
            self._last_sent_at = self._clock() + delay - self._interval
            return [None for _ in requests]
        self._backoff.reset()
        return list(reply.results)


def _chunks(
    taken: list[tuple[JobReporter, list[worker_pb2.ReportStageRequest]]],
) -> list[list[tuple[JobReporter, list[worker_pb2.ReportStageRequest]]]]:
    """Whole jobs per call, at most MAX_REPORTS_PER_CALL reports each."""
    chunks: list[list[tuple[JobReporter, list[worker_pb2.ReportStageRequest]]]] = [[]]
    size = 0
    for reporter, requests in taken:
        if size + len(requests) > MAX_REPORTS_PER_CALL and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append((reporter, requests))
        size += len(requests)
    return chunks


def _lease_lost(status: status_pb2.Status) -> StopReason | None:
    """TIMED_OUT or LOST for a report refused with WORKER_LEASE_LOST; None for any other answer."""
    info = status_info(status)
    if info is None or info.reason != "WORKER_LEASE_LOST":
        return None
    return StopReason.TIMED_OUT if info.metadata.get("lease_state") == "TIMED_OUT" else StopReason.LOST
