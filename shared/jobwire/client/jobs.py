"""JobClient: what a backend (Django, Flask, a cron script) uses to run jobs on jobwire."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import BinaryIO, NamedTuple

import grpc

from jobwire.client import convert
from jobwire.client.convert import Payload, Seconds
from jobwire.client.errors import from_rpc_error
from jobwire.client.schedules import ScheduleMethods
from jobwire.client.watch import OnReconnect, UpdateStream, watch_job
from jobwire.v1 import job_pb2, job_pb2_grpc


class Submitted(NamedTuple):
    """Submit's answer; unpacks as `job, created = client.submit(...)`."""

    job: job_pb2.Job
    created: bool  # False when an idempotency key replayed an earlier submit


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """A job's time limits for `JobClient.submit`; None leaves one unset, 0 is no limit.

    Attributes:
        attempt: One attempt, from its claim to its end; then it is retried while the retry
            policy allows, else FAILED with TIMEOUT. Unset: the server's default, if it has one.
        job: The whole job, from submit to its end, across retries and queueing; then FAILED.
        stage: A running job with no new units and no new stage this long made no progress.
        on_no_progress: `INSPECT` (default: an Inspect finding) or `FAIL` (also end the
            attempt as `attempt` would); FAIL needs `stage`.
    """

    attempt: Seconds | None = None
    job: Seconds | None = None
    stage: Seconds | None = None
    on_no_progress: str = "INSPECT"


class JobClient(ScheduleMethods):
    """Submit, read, cancel, retry, list and watch jobs (JobService), and schedule them (ScheduleService).

    Blocking and thread-safe: create one per process and share it. Every method raises a
    `jobwire.client.ClientError` subclass on failure, never a bare grpc error.

    Example:
        >>> with JobClient.connect("127.0.0.1:50051", token="...") as client:
        ...     job, created = client.submit("thumbnail", {"video": "s3://b/v.mp4"},
        ...                                  idempotency_key="upload-42")
        ...     for job in client.watch(job.job_no):
        ...         print(job.display.detail)
    """

    _stub: job_pb2_grpc.JobServiceStub

    def _bind(self) -> None:
        super()._bind()
        self._stub = job_pb2_grpc.JobServiceStub(self.channel)

    def submit_request(
        self,
        job_type: str,
        payload: Payload = None,
        *,
        queue: str = "",
        idempotency_key: str = "",
        priority: int = 0,
        run_after: datetime | None = None,
        max_attempts: int = 0,
        initial_backoff: Seconds | None = None,
        max_backoff: Seconds | None = None,
        backoff_multiplier: float = 0.0,
        on_lease_lost: str | None = None,
        timeouts: Timeouts | None = None,
        owner: str = "",
        labels: Mapping[str, str] | None = None,
        locale: str | None = None,
        depends_on: Sequence[str] = (),
    ) -> job_pb2.SubmitRequest:
        """The SubmitRequest `submit` sends (`submit_batch` sends many); the arguments are `submit`'s."""
        request = convert.message(
            job_pb2.SubmitRequest,
            job_type=job_type,
            queue=queue,
            payload=convert.encode_payload(payload),
            idempotency_key=idempotency_key,
            priority=priority,
            owner=owner,
            labels=dict(labels or {}),
            locale=self._locale(locale),
            depends_on=list(depends_on),
        )
        if run_after is not None:
            request.run_after.CopyFrom(convert.timestamp(run_after))
        policy = _retry_policy(
            max_attempts,
            initial_backoff,
            max_backoff,
            backoff_multiplier,
            on_lease_lost,
        )
        if policy is not None:
            request.retry_policy.CopyFrom(policy)
        if timeouts is not None:
            request.timeouts.CopyFrom(_timeouts(timeouts))
        return request

    def submit(
        self,
        job_type: str,
        payload: Payload = None,
        *,
        queue: str = "",
        idempotency_key: str = "",
        priority: int = 0,
        run_after: datetime | None = None,
        max_attempts: int = 0,
        initial_backoff: Seconds | None = None,
        max_backoff: Seconds | None = None,
        backoff_multiplier: float = 0.0,
        on_lease_lost: str | None = None,
        timeouts: Timeouts | None = None,
        owner: str = "",
        labels: Mapping[str, str] | None = None,
        locale: str | None = None,
        depends_on: Sequence[str] = (),
    ) -> Submitted:
        """Submit a job; it is QUEUED when this returns.

        Args:
            job_type: the handler to run, e.g. `transcode`.
            payload: bytes as given, or a mapping sent as UTF-8 JSON.
            queue: empty means `default`.
            idempotency_key: submits with the same key return the first job.
            priority: higher runs first.
            run_after: not before this moment (naive means UTC).
            max_attempts: 0 means the server's default.
            initial_backoff, max_backoff, backoff_multiplier: the pause between attempts.
            on_lease_lost: `INSPECT` (default: wait for an operator) or `RETRY`.
            timeouts: time limits of one attempt, the whole job, and running without progress.
            owner, labels: free-form, for listing and display.
            locale: labels in the returned job; defaults to the client's.
            depends_on: job numbers that must end READY before this job runs (at most 100);
                one ending FAILED or CANCELLED cancels it.
        """
        request = self.submit_request(
            job_type, payload, queue=queue, idempotency_key=idempotency_key, priority=priority,
            run_after=run_after, max_attempts=max_attempts, initial_backoff=initial_backoff,
            max_backoff=max_backoff, backoff_multiplier=backoff_multiplier, on_lease_lost=on_lease_lost,
            timeouts=timeouts, owner=owner, labels=labels, locale=locale, depends_on=depends_on,
        )  # fmt: skip
        # Retried only with a key: a Submit whose reply was lost may still have created the
        # job, and only the key lets the server return that job instead of a second one.
        response: job_pb2.SubmitResponse = self._unary(
            lambda: self._stub.Submit(request, timeout=self.timeout),
            idempotent=bool(idempotency_key),
        )
        return Submitted(response.job, response.created)

    def submit_batch(
        self, jobs: Sequence[job_pb2.SubmitRequest], *, idempotency_key: str = ""
    ) -> job_pb2.SubmitBatchResponse:
        """Submit 1 to 1000 jobs (each built with `submit_request`) in one transaction: all or none.

        With `idempotency_key` a repeat returns the same batch, so only then is it retried.

        Raises:
            InvalidArgumentError: a bad job, naming `jobs[i].<field>`; nothing was made.
        """
        request = job_pb2.SubmitBatchRequest(jobs=list(jobs), idempotency_key=idempotency_key)
        response: job_pb2.SubmitBatchResponse = self._unary(
            lambda: self._stub.SubmitBatch(request, timeout=self.timeout), idempotent=bool(idempotency_key)
        )
        return response

    def get_batch(self, batch_id: str) -> job_pb2.Batch:
        """The batch's jobs counted by status, and its progress (finished / total)."""
        request = job_pb2.GetBatchRequest(batch_id=batch_id)
        batch: job_pb2.Batch = self._unary(lambda: self._stub.GetBatch(request, timeout=self.timeout), idempotent=True)
        return batch

    def cancel_batch(self, batch_id: str) -> job_pb2.Batch:
        """Cancel every unfinished job of the batch as `cancel` would; the batch afterwards."""
        request = job_pb2.CancelBatchRequest(batch_id=batch_id)
        # Cancel is idempotent job by job, so a repeat after a lost reply is harmless.
        batch: job_pb2.Batch = self._unary(
            lambda: self._stub.CancelBatch(request, timeout=self.timeout), idempotent=True
        )
        return batch

    def watch_batch(self, batch_id: str, *, locale: str | None = None) -> Iterator[job_pb2.Job]:
        """Each job of the batch as it is, then every change, until the caller stops iterating."""
        request = job_pb2.WatchJobsRequest(batch_id=batch_id, locale=self._locale(locale))
        stream: UpdateStream = self._stub.WatchJobs(request)
        try:
            for update in stream:
                yield update.job
        finally:
            stream.cancel()

    def get(self, job_no: str, *, locale: str | None = None) -> job_pb2.Job:
        """The job as it is now."""
        request = job_pb2.GetRequest(job_no=job_no, locale=self._locale(locale))
        job: job_pb2.Job = self._unary(lambda: self._stub.Get(request, timeout=self.timeout), idempotent=True)
        return job

    def result_chunks(self, job_no: str) -> Iterator[bytes]:
        """The bytes of a READY job's result the server keeps (uri jobwire://results/<job_no>), in chunks.

        Raises:
            NotFoundError: no such job in your tenant.
            FailedPreconditionError: RESULT_NOT_AVAILABLE (not READY, or the worker published
                the result at its own uri: fetch that instead).
        """
        stream = self._stub.GetResult(job_pb2.GetResultRequest(job_no=job_no))  # as long as the bytes take
        try:
            for chunk in stream:
                yield chunk.data
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            stream.cancel()

    def result(self, job_no: str) -> bytes:
        """A READY job's result, whole (see `result_chunks`; `result_to` writes a large one to a file)."""
        return b"".join(self.result_chunks(job_no))

    def result_to(self, job_no: str, out: BinaryIO) -> int:
        """Write a READY job's result to `out` as it arrives; the number of bytes written."""
        written = 0
        for data in self.result_chunks(job_no):
            out.write(data)
            written += len(data)
        return written

    def cancel(self, job_no: str, *, locale: str | None = None) -> job_pb2.Job:
        """Ask the job to stop: QUEUED ends CANCELLED at once, RUNNING becomes CANCEL_REQUESTED.

        Raises:
            FailedPreconditionError: JOB_NOT_CANCELLABLE (READY, FAILED, or a stage that
                cannot be interrupted such as DELIVERING).
        """
        request = job_pb2.CancelRequest(job_no=job_no, locale=self._locale(locale))
        # Cancel is idempotent by contract, so a repeat after a lost reply is harmless.
        job: job_pb2.Job = self._unary(lambda: self._stub.Cancel(request, timeout=self.timeout), idempotent=True)
        return job

    def retry(self, job_no: str, *, locale: str | None = None) -> job_pb2.Job:
        """Queue a FAILED job again when its error was retryable (NOT_RETRYABLE otherwise)."""
        request = job_pb2.RetryRequest(job_no=job_no, locale=self._locale(locale))
        # The FAILED -> QUEUED guard applies at most once, so a repeat can never run the job
        # twice; at worst a repeat after a lost reply answers FAILED_PRECONDITION.
        job: job_pb2.Job = self._unary(lambda: self._stub.Retry(request, timeout=self.timeout), idempotent=True)
        return job

    def resolve(self, job_no: str, decision: str, *, note: str = "", locale: str | None = None) -> job_pb2.Job:
        """Decide on a job WAITING for review: APPROVE queues it again, REJECT fails it with `note`.

        Raises:
            FailedPreconditionError: JOB_NOT_WAITING (the job is not waiting for review).
        """
        request = job_pb2.ResolveRequest(
            job_no=job_no, decision=job_pb2.Review.Decision.Value(decision.upper()), note=note,
            locale=self._locale(locale),
        )  # fmt: skip
        # WAITING -> QUEUED or FAILED happens at most once: a repeat after a lost reply can
        # change nothing, at worst it answers FAILED_PRECONDITION.
        job: job_pb2.Job = self._unary(lambda: self._stub.Resolve(request, timeout=self.timeout), idempotent=True)
        return job

    def list_job_pages(
        self,
        *,
        owner: str = "",
        statuses: Iterable[str | int] = (),
        job_type: str = "",
        assignee: str = "",
        page_size: int = 0,
        locale: str | None = None,
    ) -> Iterator[job_pb2.ListJobsResponse]:
        """Pages of jobs, fetched one at a time as the iterator advances."""
        request = convert.message(
            job_pb2.ListJobsRequest,
            owner=owner,
            statuses=convert.statuses(statuses),
            job_type=job_type,
            assignee=assignee,
            page_size=page_size,
            locale=self._locale(locale),
        )
        return self._pages(self._stub.ListJobs, request)

    def list_jobs(
        self,
        *,
        owner: str = "",
        statuses: Iterable[str | int] = (),
        job_type: str = "",
        assignee: str = "",
        page_size: int = 0,
        limit: int | None = None,
        locale: str | None = None,
    ) -> Iterator[job_pb2.Job]:
        """Jobs matching the filters, across pages, at most `limit` of them."""
        pages = self.list_job_pages(
            owner=owner,
            statuses=statuses,
            job_type=job_type,
            assignee=assignee,
            page_size=page_size,
            locale=locale,
        )
        return convert.at_most(chain.from_iterable(page.jobs for page in pages), limit)

    def watch(
        self,
        job_no: str,
        after_version: int = 0,
        *,
        locale: str | None = None,
        on_reconnect: OnReconnect | None = None,
    ) -> Generator[job_pb2.Job, None, None]:
        """Each new version of the job, from the current one to the terminal one.

        Reconnects by itself when the stream breaks (UNAVAILABLE, a lost connection),
        resuming after the last version delivered, with exponential backoff and jitter; no
        transition is missed or repeated. Ends after READY, FAILED or CANCELLED. Closing the
        iterator early hangs up the stream. `on_reconnect(failures, delay, cause)` is called
        before each pause; `retry_settings.watch_max_reconnects` bounds them.

        Raises:
            NotFoundError: no such job. Other ClientErrors as the server answers.
        """
        loc = self._locale(locale)

        def open_stream(after: int) -> UpdateStream:
            request = convert.message(job_pb2.WatchStatusRequest, job_no=job_no, after_version=after, locale=loc)
            # No deadline: a watch lasts as long as the job; keepalive finds dead peers.
            stream: UpdateStream = self._stub.WatchStatus(request)
            return stream

        return watch_job(
            open_stream,
            lambda: self.get(job_no, locale=loc),
            after_version=after_version,
            settings=self.retry_settings,
            sleep=self._sleep,
            on_reconnect=on_reconnect,
        )


def _retry_policy(
    max_attempts: int,
    initial_backoff: Seconds | None,
    max_backoff: Seconds | None,
    multiplier: float,
    on_lease_lost: str | None,
) -> job_pb2.RetryPolicy | None:
    if not (max_attempts or initial_backoff or max_backoff or multiplier or on_lease_lost):
        return None  # leave the field unset so the server applies its defaults
    policy = convert.message(
        job_pb2.RetryPolicy,
        max_attempts=max_attempts,
        backoff_multiplier=multiplier,
        on_lease_lost=convert.on_lease_lost(on_lease_lost),
    )
    if initial_backoff is not None:
        policy.initial_backoff.CopyFrom(convert.duration(initial_backoff))
    if max_backoff is not None:
        policy.max_backoff.CopyFrom(convert.duration(max_backoff))
    return policy


def _timeouts(limits: Timeouts) -> job_pb2.Timeouts:
    out = job_pb2.Timeouts(on_no_progress=convert.on_no_progress(limits.on_no_progress))
    if limits.attempt is not None:
        out.attempt_timeout.CopyFrom(convert.duration(limits.attempt))
    if limits.job is not None:
        out.job_timeout.CopyFrom(convert.duration(limits.job))
    if limits.stage is not None:
        out.stage_timeout.CopyFrom(convert.duration(limits.stage))
    return out
