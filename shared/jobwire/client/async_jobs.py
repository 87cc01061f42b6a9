"""AsyncJobClient: JobClient for asyncio backends (FastAPI, aiohttp), on grpc.aio.

It sends the very calls JobClient builds (`job_calls`), with the same retry decisions
(`retry.retry_pause`) and the same watch state machine (`watch._Watch`); only the
transport is awaited.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from functools import partial
from typing import Any, BinaryIO, Unpack

import grpc
import grpc.aio

from jobwire.client import convert, job_calls, views
from jobwire.client.base import AsyncBaseClient, JobService
from jobwire.client.convert import Payload
from jobwire.client.errors import from_rpc_error
from jobwire.client.job_calls import ListFilters, SubmitOptions, Submitted, WatchOptions
from jobwire.client.retry import AsyncSleep
from jobwire.client.watch import async_watch_batch, async_watch_job
from jobwire.v1 import job_pb2


class AsyncJobClient(JobService[grpc.aio.Channel, AsyncSleep], AsyncBaseClient):
    """JobClient's operations, awaited: each method is documented on `JobClient`.

    Use it from one event loop; it raises the same `ClientError` subclasses with the same
    reasons as JobClient. Iterators (`watch`, `list_jobs`, ...) are async iterators; to stop
    one early and hang up its stream at once, wrap it in `contextlib.aclosing`.

    Example:
        >>> async with AsyncJobClient.connect("127.0.0.1:50051", token="...") as client:
        ...     job, created = await client.submit("thumbnail", {"video": "s3://b/v.mp4"})
        ...     async for job in client.watch(job.job_no):
        ...         print(job.status, job.display.detail)
    """

    async def submit(self, job_type: str, payload: Payload = None, **options: Unpack[SubmitOptions]) -> Submitted:
        """Submit a job; it is QUEUED when this returns (see JobClient.submit)."""
        return await self._call(job_calls.submit(job_type, payload, self.locale, options))

    async def submit_batch(
        self, jobs: Sequence[job_pb2.SubmitRequest], *, idempotency_key: str = ""
    ) -> views.SubmittedBatch:
        """Submit 1 to 1000 jobs in one transaction: all or none."""
        return await self._call(job_calls.submit_batch(jobs, idempotency_key))

    async def get_batch(self, batch_id: str) -> views.Batch:
        """The batch's jobs counted by status, and its progress."""
        return await self._call(job_calls.get_batch(batch_id))

    async def cancel_batch(self, batch_id: str) -> views.Batch:
        """Cancel every unfinished job of the batch; the batch afterwards."""
        return await self._call(job_calls.cancel_batch(batch_id))

    async def watch_batch(self, batch_id: str, *, locale: str | None = None) -> AsyncIterator[views.Job]:
        """Each job of the batch as it is, then every change, until every job has ended (see JobClient)."""
        total = (await self.get_batch(batch_id)).total  # asked first: see BatchEnd
        request = job_calls.watch_batch_request(batch_id, self._locale(locale))
        async with aclosing(
            async_watch_batch(lambda: self._stub.WatchJobs(request), total, self.retry_settings, self._sleep)
        ) as jobs:  # hangs up once ended
            async for job in jobs:
                yield job

    async def get(self, job_no: str, *, locale: str | None = None) -> views.Job:
        """The job as it is now."""
        return await self._call(job_calls.get(job_no, self._locale(locale)))

    async def result_chunks(self, job_no: str) -> AsyncIterator[bytes]:
        """The bytes of a READY job's result the server keeps, in chunks."""
        async for chunk in self._result_stream(job_no):
            yield chunk.data

    async def result(self, job_no: str) -> bytes:
        """A READY job's result, whole."""
        return b"".join([data async for data in self.result_chunks(job_no)])

    async def result_json(self, job_no: str) -> Any:
        """A READY job's result parsed as JSON (see JobClient.result_json)."""
        chunks = [chunk async for chunk in self._result_stream(job_no)]
        content_type = chunks[0].content_type if chunks else ""
        return job_calls.parse_result_json(job_no, content_type, b"".join(chunk.data for chunk in chunks))

    async def result_to(self, job_no: str, out: BinaryIO) -> int:
        """Write a READY job's result to `out` as it arrives; the number of bytes written."""
        written = 0
        async for data in self.result_chunks(job_no):
            out.write(data)
            written += len(data)
        return written

    async def cancel(self, job_no: str, *, locale: str | None = None) -> views.Job:
        """Ask the job to stop (see JobClient.cancel)."""
        return await self._call(job_calls.cancel(job_no, self._locale(locale)))

    async def retry(self, job_no: str, *, force: bool = False, locale: str | None = None) -> views.Job:
        """Queue a FAILED job again when its error was retryable, or always with `force` (see JobClient.retry)."""
        return await self._call(job_calls.retry(job_no, self._locale(locale), force=force))

    async def resolve(self, job_no: str, decision: str, *, note: str = "", locale: str | None = None) -> views.Job:
        """Decide on a job WAITING for review: APPROVE or REJECT."""
        return await self._call(job_calls.resolve(job_no, decision, note, self._locale(locale)))

    async def list_job_pages(self, **filters: Unpack[ListFilters]) -> AsyncIterator[views.JobPage]:
        """Pages of jobs, fetched one at a time as the iteration advances."""
        async for page in self._pages(self._stub.ListJobs, job_calls.list_request(self.locale, filters)):
            yield views.JobPage(page)

    def list_jobs(self, *, limit: int | None = None, **filters: Unpack[ListFilters]) -> AsyncIterator[views.Job]:
        """Jobs matching the filters, across pages, at most `limit` of them."""
        return convert.async_at_most(self._each(self.list_job_pages(**filters), lambda page: page.jobs), limit)

    def watch(
        self, job_no: str, after_version: int = 0, **options: Unpack[WatchOptions]
    ) -> AsyncGenerator[views.Job, None]:
        """Each new version of the job to the terminal one, reconnecting and resuming as JobClient.watch."""
        loc = self._locale(options.get("locale"))
        get = partial(self.get, job_no, locale=loc)
        on_reconnect = options.get("on_reconnect")
        return async_watch_job(
            self._open_watch(job_no, loc), get, after_version, self.retry_settings, self._sleep, on_reconnect
        )

    def _result_stream(self, job_no: str) -> AsyncIterator[job_pb2.ResultChunk]:
        """GetResult's chunks (the first names the content type)."""
        return self._stream(self._stub.GetResult(job_calls.result_request(job_no)))

    @staticmethod
    async def _stream(call: Any) -> AsyncGenerator[Any, None]:
        """The messages of a server stream, its failure as a ClientError; hangs up on exit."""
        try:
            async for message in call:
                yield message
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()
