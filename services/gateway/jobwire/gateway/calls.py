"""One person's calls to the job service: a channel that carries their token, errors as ClientError.

The channel is opened by jobwire.client.channel, as JobClient's is, so the token travels the
same way (call credentials over TLS, a bearer header over loopback plain text). One channel
per page or live stream: a person's token never rides on anyone else's calls.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Self, TypeVar

import anyio
import grpc
import grpc.aio

from jobwire.client import ChannelConfig, aio_channel
from jobwire.client.channel import FIXED_WINDOW_OPTIONS
from jobwire.client.errors import NotFoundError, PermissionDeniedError, from_rpc_error
from jobwire.gateway.search import JobQuery
from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc, schedule_pb2, schedule_pb2_grpc

T = TypeVar("T")
EVERY_JOB = JobQuery()
CALL_TIMEOUT_S = 10.0
PAGE_SIZE = 100
MAX_EVENTS = 1000  # a job reporting progress for hours has tens of thousands: a page shows the first


class Calls:
    """The calls the pages make, with `token` on each. Use as `async with Calls(...) as calls:`."""

    def __init__(self, service: ChannelConfig, token: str, locale: str, *, fixed_window: bool = False) -> None:
        """`fixed_window`: for a download, whose browser may stall (jobwire.client.channel.FIXED_WINDOW_OPTIONS)."""
        options = FIXED_WINDOW_OPTIONS if fixed_window else ()
        self._channel = aio_channel(replace(service, token=token), options)
        self._jobs = job_pb2_grpc.JobServiceStub(self._channel)
        self._admin = admin_pb2_grpc.AdminServiceStub(self._channel)
        self._schedules = schedule_pb2_grpc.ScheduleServiceStub(self._channel)
        self.locale = locale

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        # Shielded: when a browser leaves, its response (and this) is cancelled, and the
        # channel, with any WatchJobs stream on it, must still close now rather than at GC.
        with anyio.CancelScope(shield=True):
            await self._channel.close()

    async def _unary(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    async def list_jobs(
        self, query: JobQuery = EVERY_JOB, page_size: int = PAGE_SIZE, page_token: str = ""
    ) -> job_pb2.ListJobsResponse:
        """A page of the caller's jobs that `query` lets through, newest first as the server lists them."""
        request = query.request(page_size=page_size, page_token=page_token, locale=self.locale)
        return await self._unary(self._jobs.ListJobs(request, timeout=CALL_TIMEOUT_S))

    async def get(self, job_no: str) -> job_pb2.Job:
        request = job_pb2.GetRequest(job_no=job_no, locale=self.locale)
        return await self._unary(self._jobs.Get(request, timeout=CALL_TIMEOUT_S))

    async def payload(self, job_no: str, max_bytes: int) -> tuple[bytes, int]:
        """The first `max_bytes` of the job's payload, and its whole size."""
        request = job_pb2.GetPayloadRequest(job_no=job_no, max_bytes=max_bytes)
        reply = await self._unary(self._jobs.GetPayload(request, timeout=CALL_TIMEOUT_S))
        return reply.data, reply.size_bytes

    async def cancel(self, job_no: str) -> job_pb2.Job:
        request = job_pb2.CancelRequest(job_no=job_no, locale=self.locale)
        return await self._unary(self._jobs.Cancel(request, timeout=CALL_TIMEOUT_S))

    async def retry(self, job_no: str, *, force: bool = False) -> job_pb2.Job:
        request = job_pb2.RetryRequest(job_no=job_no, locale=self.locale, force=force)
        return await self._unary(self._jobs.Retry(request, timeout=CALL_TIMEOUT_S))

    async def batch(self, batch_id: str) -> job_pb2.Batch:
        return await self._unary(
            self._jobs.GetBatch(job_pb2.GetBatchRequest(batch_id=batch_id), timeout=CALL_TIMEOUT_S)
        )

    async def cancel_batch(self, batch_id: str) -> job_pb2.Batch:
        request = job_pb2.CancelBatchRequest(batch_id=batch_id)
        return await self._unary(self._jobs.CancelBatch(request, timeout=CALL_TIMEOUT_S))

    async def schedules(self, page_token: str = "") -> schedule_pb2.ListSchedulesResponse:
        request = schedule_pb2.ListSchedulesRequest(page_size=PAGE_SIZE, page_token=page_token)
        return await self._unary(self._schedules.ListSchedules(request, timeout=CALL_TIMEOUT_S))

    async def schedule(self, schedule_id: str) -> schedule_pb2.Schedule:
        request = schedule_pb2.ScheduleRef(schedule_id=schedule_id)
        return await self._unary(self._schedules.GetSchedule(request, timeout=CALL_TIMEOUT_S))

    async def schedule_jobs(self, schedule_id: str, page_size: int, page_token: str) -> job_pb2.ListJobsResponse:
        request = schedule_pb2.ListScheduleJobsRequest(
            schedule_id=schedule_id, page_size=page_size, page_token=page_token, locale=self.locale
        )
        return await self._unary(self._schedules.ListScheduleJobs(request, timeout=CALL_TIMEOUT_S))

    async def pause_schedule(self, schedule_id: str) -> None:
        request = schedule_pb2.ScheduleRef(schedule_id=schedule_id)
        await self._unary(self._schedules.PauseSchedule(request, timeout=CALL_TIMEOUT_S))

    async def resume_schedule(self, schedule_id: str) -> None:
        request = schedule_pb2.ScheduleRef(schedule_id=schedule_id)
        await self._unary(self._schedules.ResumeSchedule(request, timeout=CALL_TIMEOUT_S))

    async def delete_schedule(self, schedule_id: str) -> None:
        request = schedule_pb2.ScheduleRef(schedule_id=schedule_id)
        await self._unary(self._schedules.DeleteSchedule(request, timeout=CALL_TIMEOUT_S))

    async def admin_trail(self, job_no: str) -> list[admin_pb2.JobEvent] | None:
        """The job's trail when this token has the admin role (who has it only the server
        knows, so it is asked); None when it has not."""
        try:
            _, events = await self.events(job_no)
        except PermissionDeniedError:
            return None
        return events

    async def checkpoint(self, job_no: str) -> admin_pb2.Checkpoint | None:
        """The job's latest checkpoint; None when its worker never saved one."""
        request = admin_pb2.GetCheckpointRequest(job_no=job_no)
        try:
            return await self._unary(self._admin.GetCheckpoint(request, timeout=CALL_TIMEOUT_S))
        except NotFoundError as missing:
            if missing.reason == "CHECKPOINT_NOT_FOUND":
                return None
            raise

    async def requeue(self, job_no: str, reason: str) -> job_pb2.Job:
        request = admin_pb2.RequeueRequest(job_no=job_no, reason=reason, locale=self.locale)
        return await self._unary(self._admin.Requeue(request, timeout=CALL_TIMEOUT_S))

    async def inspect(self) -> list[admin_pb2.Finding]:
        reply = await self._unary(self._admin.Inspect(admin_pb2.InspectRequest(), timeout=CALL_TIMEOUT_S))
        return list(reply.findings)

    async def events(self, job_no: str) -> tuple[str, list[admin_pb2.JobEvent]]:
        """The job's title and its evidence trail, oldest first: its first MAX_EVENTS (a page is read whole)."""
        request = admin_pb2.ListEventsRequest(job_no=job_no, page_size=PAGE_SIZE)
        events: list[admin_pb2.JobEvent] = []
        while True:
            page = await self._unary(self._admin.ListEvents(request, timeout=CALL_TIMEOUT_S))
            events.extend(page.events)
            if not page.next_page_token or len(events) >= MAX_EVENTS:
                return page.title, events
            request.page_token = page.next_page_token

    async def workers(self, page_token: str = "") -> admin_pb2.ListWorkersResponse:
        """A page of the workers that serve the tenant, by id, each live or gone as the server decides."""
        request = admin_pb2.ListWorkersRequest(page_size=PAGE_SIZE, page_token=page_token)
        return await self._unary(self._admin.ListWorkers(request, timeout=CALL_TIMEOUT_S))

    async def queues(self) -> admin_pb2.ListQueuesResponse:
        """Every queue of the tenant this token may use, with the last hour by the minute."""
        return await self._unary(self._admin.ListQueues(admin_pb2.ListQueuesRequest(), timeout=CALL_TIMEOUT_S))

    async def pause_queue(self, queue: str) -> None:
        await self._unary(self._admin.PauseQueue(admin_pb2.PauseQueueRequest(queue=queue), timeout=CALL_TIMEOUT_S))

    async def resume_queue(self, queue: str) -> None:
        await self._unary(self._admin.ResumeQueue(admin_pb2.ResumeQueueRequest(queue=queue), timeout=CALL_TIMEOUT_S))

    async def set_queue_limits(self, queue: str, limits: admin_pb2.QueueLimits) -> None:
        request = admin_pb2.SetQueueLimitsRequest(queue=queue, limits=limits)
        await self._unary(self._admin.SetQueueLimits(request, timeout=CALL_TIMEOUT_S))

    async def result(self, job_no: str) -> tuple[str, AsyncGenerator[bytes, None]]:
        """The result's content type and its bytes; an error before the first chunk is raised here."""
        stream = self._jobs.GetResult(job_pb2.GetResultRequest(job_no=job_no))
        chunks = aiter(stream)
        try:
            first: job_pb2.ResultChunk = await anext(chunks)
        except StopAsyncIteration:
            first = job_pb2.ResultChunk()
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

        async def rest() -> AsyncGenerator[bytes, None]:
            yield first.data
            async for chunk in chunks:
                yield chunk.data

        return first.content_type, rest()

    async def watch(self, job_nos: Sequence[str]) -> AsyncGenerator[job_pb2.Job, None]:
        """Each watched job as it is, then every change (WatchJobs), until the caller stops."""
        request = job_pb2.WatchJobsRequest(job_nos=list(job_nos), locale=self.locale)
        stream = self._jobs.WatchJobs(request)  # no deadline: it lasts as long as the page is open
        try:
            async for update in stream:
                yield update.job
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        finally:
            stream.cancel()
