"""JobClient: what a backend (Django, Flask, a cron script) uses to run jobs on jobwire.

The requests and the decoding of replies live in `job_calls`, shared with AsyncJobClient;
this module only carries them over a blocking channel.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from functools import partial
from itertools import chain
from typing import Any, BinaryIO, Unpack

import grpc

from jobwire.client import convert, job_calls, views
from jobwire.client.base import JobService
from jobwire.client.convert import Payload
from jobwire.client.errors import from_rpc_error
from jobwire.client.job_calls import ListFilters, SubmitOptions, Submitted, WatchOptions
from jobwire.client.retry import Sleep
from jobwire.client.schedules import ScheduleMethods
from jobwire.client.watch import watch_batch, watch_job
from jobwire.v1 import job_pb2


class JobClient(JobService[grpc.Channel, Sleep], ScheduleMethods):
    """Submit, read, cancel, retry, list and watch jobs (JobService), and schedule them (ScheduleService).

    Blocking and thread-safe: create one per process and share it. Every method raises a
    `jobwire.client.ClientError` subclass on failure, never a bare grpc error.
    `jobwire.client.AsyncJobClient` offers the same methods for asyncio.

    Jobs come back as `jobwire.client.Job` views: `job.status` prints its name (READY) and
    equals the wire number, times are aware UTC datetimes, `job.raw` is the `job_pb2.Job`.

    Example:
        >>> with JobClient.connect("127.0.0.1:50051", token="...") as client:
        ...     job, created = client.submit("thumbnail", {"video": "s3://b/v.mp4"},
        ...                                  idempotency_key="upload-42")
        ...     for job in client.watch(job.job_no):
        ...         print(job.status, job.display.detail)
    """

    def submit(self, job_type: str, payload: Payload = None, **options: Unpack[SubmitOptions]) -> Submitted:
        """Submit a job; it is QUEUED when this returns.

        Retried on UNAVAILABLE only with an `idempotency_key`: a Submit whose reply was
        lost may still have created the job, and only the key makes a repeat safe.

        Args:
            job_type: the handler to run, e.g. `transcode`.
            payload: bytes (bytearray, memoryview) as given; a mapping sent as a compact
                UTF-8 JSON object with sorted keys; None for none. Other JSON (a list, a
                number) goes as bytes: `json.dumps(value).encode()`.
            **options: queue, idempotency_key, priority, run_after, retry policy, timeouts,
                owner, labels, locale, depends_on: see `jobwire.client.job_calls.SubmitOptions`.

        Raises:
            TypeError: a payload of another type (a str: encode it; a list: send it as
                bytes), or a mapping that is not JSON; nothing was sent.
        """
        return self._call(job_calls.submit(job_type, payload, self.locale, options))

    def submit_batch(self, jobs: Sequence[job_pb2.SubmitRequest], *, idempotency_key: str = "") -> views.SubmittedBatch:
        """Submit 1 to 1000 jobs (each built with `submit_request`) in one transaction: all or none.

        With `idempotency_key` a repeat returns the same batch, so only then is it retried.

        Raises:
            InvalidArgumentError: a bad job, naming `jobs[i].<field>`; nothing was made.
        """
        return self._call(job_calls.submit_batch(jobs, idempotency_key))

    def get_batch(self, batch_id: str) -> views.Batch:
        """The batch's jobs counted by status (`counts`), and its progress (finished / total)."""
        return self._call(job_calls.get_batch(batch_id))

    def cancel_batch(self, batch_id: str) -> views.Batch:
        """Cancel every unfinished job of the batch as `cancel` would; the batch afterwards."""
        return self._call(job_calls.cancel_batch(batch_id))

    def watch_batch(self, batch_id: str, *, locale: str | None = None) -> Iterator[views.Job]:
        """Each job of the batch as it is, then every change, until every job has ended.

        Ends once each job of the batch is READY, FAILED or CANCELLED (at once for a batch
        already finished); stopping the iteration earlier hangs up the stream. A stream that
        breaks (a server restart, its connection age) is opened again and catches up: each
        version of a job comes once.

        Raises:
            NotFoundError: no such batch in your tenant. Other ClientErrors as the server answers.
        """
        total = self.get_batch(batch_id).total  # asked first: see BatchEnd
        request = job_calls.watch_batch_request(batch_id, self._locale(locale))
        # No deadline: a watch lasts as long as the batch; hangs up as soon as it has ended.
        yield from watch_batch(lambda: self._stub.WatchJobs(request), total, self.retry_settings, self._sleep)

    def get(self, job_no: str, *, locale: str | None = None) -> views.Job:
        """The job as it is now."""
        return self._call(job_calls.get(job_no, self._locale(locale)))

    def result_chunks(self, job_no: str) -> Iterator[bytes]:
        """The bytes of a READY job's result the server keeps (uri jobwire://results/<job_no>), in chunks.

        Raises:
            NotFoundError: no such job in your tenant.
            FailedPreconditionError: RESULT_NOT_AVAILABLE (not READY, or the worker published
                the result at its own uri: fetch that instead).
        """
        for chunk in self._result_stream(job_no):
            yield chunk.data

    def result(self, job_no: str) -> bytes:
        """A READY job's result, whole (see `result_chunks`; `result_to` writes a large one to a file)."""
        return b"".join(self.result_chunks(job_no))

    def result_json(self, job_no: str) -> Any:
        """A READY job's result parsed as JSON (a handler's `Result.from_json`, a dict or list it returned).

        Raises:
            ValueError: the result is not JSON; the message names the job and its content type.
            NotFoundError, FailedPreconditionError: as `result_chunks`.
        """
        chunks = list(self._result_stream(job_no))
        content_type = chunks[0].content_type if chunks else ""
        return job_calls.parse_result_json(job_no, content_type, b"".join(chunk.data for chunk in chunks))

    def result_to(self, job_no: str, out: BinaryIO) -> int:
        """Write a READY job's result to `out` as it arrives; the number of bytes written."""
        written = 0
        for data in self.result_chunks(job_no):
            out.write(data)
            written += len(data)
        return written

    def cancel(self, job_no: str, *, locale: str | None = None) -> views.Job:
        """Ask the job to stop: QUEUED ends CANCELLED at once, RUNNING becomes CANCEL_REQUESTED.

        Raises:
            FailedPreconditionError: JOB_NOT_CANCELLABLE (READY, FAILED, or a stage that
                cannot be interrupted such as DELIVERING).
        """
        return self._call(job_calls.cancel(job_no, self._locale(locale)))

    def retry(self, job_no: str, *, force: bool = False, locale: str | None = None) -> views.Job:
        """Queue a FAILED job again when its error was retryable (NOT_RETRYABLE otherwise).

        Args:
            force: Retry it even when its error is not retryable; the admin role only (the
                job's event trail names who forced it).

        Raises:
            FailedPreconditionError: NOT_RETRYABLE (not FAILED, or its error is not
                retryable and `force` was not given).
            PermissionDeniedError: `force` from a token without the admin role.
        """
        return self._call(job_calls.retry(job_no, self._locale(locale), force=force))

    def resolve(self, job_no: str, decision: str, *, note: str = "", locale: str | None = None) -> views.Job:
        """Decide on a job WAITING for review: APPROVE queues it again, REJECT fails it with `note`.

        Raises:
            FailedPreconditionError: JOB_NOT_WAITING (the job is not waiting for review).
        """
        return self._call(job_calls.resolve(job_no, decision, note, self._locale(locale)))

    def list_job_pages(self, **filters: Unpack[ListFilters]) -> Iterator[views.JobPage]:
        """Pages of jobs (filters: owner, statuses, job_type, assignee, page_size, locale), fetched as it advances."""
        pages = self._pages(self._stub.ListJobs, job_calls.list_request(self.locale, filters))
        return map(views.JobPage, pages)

    def list_jobs(self, *, limit: int | None = None, **filters: Unpack[ListFilters]) -> Iterator[views.Job]:
        """Jobs matching the filters (as `list_job_pages`), across pages, at most `limit` of them."""
        pages = self.list_job_pages(**filters)
        return convert.at_most(chain.from_iterable(page.jobs for page in pages), limit)

    def watch(
        self, job_no: str, after_version: int = 0, **options: Unpack[WatchOptions]
    ) -> Generator[views.Job, None, None]:
        """Each new version of the job, from the current one to the terminal one.

        Reconnects by itself when the stream breaks (UNAVAILABLE, a lost connection),
        resuming after the last version delivered, with exponential backoff and jitter; no
        transition is missed or repeated. Ends after READY, FAILED or CANCELLED. Closing the
        iterator early hangs up the stream. `on_reconnect(failures, delay, cause)` is called
        before each pause; `retry_settings.watch_max_reconnects` bounds them.

        Raises:
            NotFoundError: no such job. Other ClientErrors as the server answers.
        """
        loc = self._locale(options.get("locale"))
        get = partial(self.get, job_no, locale=loc)
        on_reconnect = options.get("on_reconnect")
        return watch_job(
            self._open_watch(job_no, loc), get, after_version, self.retry_settings, self._sleep, on_reconnect
        )

    def _result_stream(self, job_no: str) -> Iterator[job_pb2.ResultChunk]:
        """GetResult's chunks (the first names the content type); as long as the bytes take."""
        return self._stream(self._stub.GetResult(job_calls.result_request(job_no)))

    @staticmethod
    def _stream(call: Any) -> Generator[Any, None, None]:
        """The messages of a server stream, its failure as a ClientError; hangs up on exit."""
        try:
            yield from call
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()
