"""AdminClient and AsyncAdminClient: the operator's side (AdminService): findings, evidence,
requeue, workers, queue limits. Both send the calls built here; only the transport differs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from itertools import chain

from jobwire.client import convert, views
from jobwire.client.base import AsyncBaseClient, BaseClient
from jobwire.client.convert import Seconds
from jobwire.client.job_calls import Call
from jobwire.v1 import admin_pb2, admin_pb2_grpc


def _inspect(stalled_after: Seconds | None, queue: str, kinds: Iterable[str | int]) -> Call[list[views.Finding]]:
    request = admin_pb2.InspectRequest(queue=queue, kinds=[convert.finding_kind(k) for k in kinds])
    if stalled_after is not None:
        request.stalled_after.CopyFrom(convert.duration(stalled_after))
    return Call("Inspect", request, True, lambda reply: [views.Finding(f) for f in reply.findings])


def _requeue(job_no: str, reason: str, locale: str) -> Call[views.Job]:
    request = admin_pb2.RequeueRequest(job_no=job_no, reason=reason, locale=locale)
    # Not retried: the answer may have been lost after the requeue happened, and by the
    # time a repeat arrives a new worker may hold the job. An operator decides again
    # with fresh facts (inspect, events) rather than the client deciding for them.
    return Call("Requeue", request, False, views.Job)


def _checkpoint(job_no: str) -> Call[views.Checkpoint]:
    return Call("GetCheckpoint", admin_pb2.GetCheckpointRequest(job_no=job_no), True, views.Checkpoint)


def _events_request(job_no: str, page_size: int) -> admin_pb2.ListEventsRequest:
    return convert.message(admin_pb2.ListEventsRequest, job_no=job_no, page_size=page_size)


def _workers_request(queue: str) -> admin_pb2.ListWorkersRequest:
    return convert.message(admin_pb2.ListWorkersRequest, queue=queue)


class AdminClient(BaseClient):
    """Inspect stalled leases and broken invariants, read a job's evidence, decide.

    Needs a token with role `admin`. Blocking and thread-safe, like JobClient; it can share
    JobClient's channel: `AdminClient(channel=job_client.channel)`.
    """

    _stub: admin_pb2_grpc.AdminServiceStub

    def _bind(self) -> None:
        super()._bind()
        self._stub = admin_pb2_grpc.AdminServiceStub(self.channel)

    def inspect(
        self,
        *,
        stalled_after: Seconds | None = None,
        queue: str = "",
        kinds: Iterable[str | int] = (),
    ) -> list[views.Finding]:
        """Findings: STALLED leases, and invariant breaks that must never appear.

        Args:
            stalled_after: only leases past expiry by at least this long.
            queue: only this queue; empty means every queue.
            kinds: only these kinds (STALLED, RUNNING_WITHOUT_LEASE, TERMINAL_WITH_TOKEN).
        """
        return self._call(_inspect(stalled_after, queue, kinds))

    def list_event_pages(self, job_no: str, *, page_size: int = 0) -> Iterator[views.EventPage]:
        """Pages of a job's evidence trail, oldest first, each with the job's title; fetched as it advances."""
        return map(views.EventPage, self._pages(self._stub.ListEvents, _events_request(job_no, page_size)))

    def list_events(self, job_no: str, *, page_size: int = 0, limit: int | None = None) -> Iterator[views.JobEvent]:
        """A job's evidence trail, oldest first, across pages, at most `limit` events."""
        pages = self.list_event_pages(job_no, page_size=page_size)
        return convert.at_most(chain.from_iterable(page.events for page in pages), limit)

    def checkpoint(self, job_no: str) -> views.Checkpoint:
        """The latest checkpoint the job's worker saved (at most 64 KiB): its bytes, size and sha256."""
        return self._call(_checkpoint(job_no))

    def requeue(self, job_no: str, *, reason: str) -> views.Job:
        """An operator's decision for a stalled job: revoke its lease and queue it again.

        Never retried by the client. Args: reason: why, for the evidence trail.
        """
        return self._call(_requeue(job_no, reason, self.locale))

    def list_workers(self, *, queue: str = "", limit: int | None = None) -> Iterator[views.WorkerInfo]:
        """Known workers by id, across pages: last seen, leases held, queues and job types."""
        pages = self._pages(self._stub.ListWorkers, _workers_request(queue))
        return convert.at_most(map(views.WorkerInfo, chain.from_iterable(page.workers for page in pages)), limit)

    def queue_limits(self, queue: str) -> admin_pb2.QueueLimitsResponse:
        """A queue's limits and whether it is paused (a queue never limited has none)."""
        request = admin_pb2.GetQueueLimitsRequest(queue=queue)
        return self._queue_call(lambda: self._stub.GetQueueLimits(request, timeout=self.timeout))

    def set_queue_limits(
        self, queue: str, *, max_running: int = 0, rate_per_second: float = 0.0, burst: int = 0
    ) -> admin_pb2.QueueLimitsResponse:
        """Replace a queue's limits (0: none of that kind); a pause stays as it is.

        Args:
            max_running: jobs of the queue leased at once.
            rate_per_second: jobs started per second, with `burst` starting at once after a quiet spell.
        """
        limits = admin_pb2.QueueLimits(max_running=max_running, rate_per_second=rate_per_second, burst=burst)
        request = admin_pb2.SetQueueLimitsRequest(queue=queue, limits=limits)
        return self._queue_call(lambda: self._stub.SetQueueLimits(request, timeout=self.timeout))

    def pause_queue(self, queue: str) -> admin_pb2.QueueLimitsResponse:
        """Lease nothing from `queue` until it is resumed; running jobs go on."""
        request = admin_pb2.PauseQueueRequest(queue=queue)
        return self._queue_call(lambda: self._stub.PauseQueue(request, timeout=self.timeout))

    def resume_queue(self, queue: str) -> admin_pb2.QueueLimitsResponse:
        request = admin_pb2.ResumeQueueRequest(queue=queue)
        return self._queue_call(lambda: self._stub.ResumeQueue(request, timeout=self.timeout))

    def _queue_call(self, call: Callable[[], admin_pb2.QueueLimitsResponse]) -> admin_pb2.QueueLimitsResponse:
        # Each sets a state (not a step), so a repeat after a lost answer changes nothing more.
        response: admin_pb2.QueueLimitsResponse = self._unary(call, idempotent=True)
        return response


class AsyncAdminClient(AsyncBaseClient):
    """AdminClient's operations, awaited (each is documented on `AdminClient`)."""

    _stub: admin_pb2_grpc.AdminServiceStub

    def _bind(self) -> None:
        super()._bind()
        self._stub = admin_pb2_grpc.AdminServiceStub(self.channel)

    async def inspect(
        self, *, stalled_after: Seconds | None = None, queue: str = "", kinds: Iterable[str | int] = ()
    ) -> list[views.Finding]:
        """Findings: STALLED leases, and invariant breaks that must never appear."""
        return await self._call(_inspect(stalled_after, queue, kinds))

    async def list_event_pages(self, job_no: str, *, page_size: int = 0) -> AsyncIterator[views.EventPage]:
        """Pages of a job's evidence trail, each with the job's title, fetched one at a time."""
        async for page in self._pages(self._stub.ListEvents, _events_request(job_no, page_size)):
            yield views.EventPage(page)

    def list_events(
        self, job_no: str, *, page_size: int = 0, limit: int | None = None
    ) -> AsyncIterator[views.JobEvent]:
        """A job's evidence trail, oldest first, across pages, at most `limit` events."""
        pages = self.list_event_pages(job_no, page_size=page_size)
        return convert.async_at_most(self._each(pages, lambda page: page.events), limit)

    async def checkpoint(self, job_no: str) -> views.Checkpoint:
        """The latest checkpoint the job's worker saved (at most 64 KiB): its bytes, size and sha256."""
        return await self._call(_checkpoint(job_no))

    async def requeue(self, job_no: str, *, reason: str) -> views.Job:
        """Revoke a stalled job's lease and queue it again; never retried by the client."""
        return await self._call(_requeue(job_no, reason, self.locale))

    def list_workers(self, *, queue: str = "", limit: int | None = None) -> AsyncIterator[views.WorkerInfo]:
        """Known workers by id, across pages, at most `limit` of them."""
        pages = self._pages(self._stub.ListWorkers, _workers_request(queue))
        return convert.async_at_most(self._each(pages, lambda page: map(views.WorkerInfo, page.workers)), limit)
