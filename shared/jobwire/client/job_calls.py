"""What JobClient and AsyncJobClient send and how they read the answers: all but the transport.

Each operation is built here once as a `Call` (method name, request, whether a repeat is
safe, how to decode the reply); the blocking and the asyncio client only carry it over
their own channel, so the two can never drift apart in what they ask or how they retry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, NamedTuple, TypedDict, TypeVar

from google.protobuf.message import Message

from jobwire.client import convert, views
from jobwire.client.convert import Payload, Seconds
from jobwire.client.watch import OnReconnect
from jobwire.v1 import job_pb2

R = TypeVar("R")


class Submitted(NamedTuple):
    """Submit's answer; unpacks as `job, created = client.submit(...)`."""

    job: views.Job
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


class SubmitOptions(TypedDict, total=False):
    """The keyword arguments of `submit` and `submit_request`; every one may be left out.

    Attributes:
        queue: empty means `default`.
        idempotency_key: submits with the same key return the first job.
        priority: higher runs first.
        run_after: not before this moment (naive means UTC).
        max_attempts: 0 means the server's default.
        initial_backoff, max_backoff, backoff_multiplier: the pause between attempts.
        on_lease_lost: `INSPECT` (default: wait for an operator) or `RETRY`.
        timeouts: time limits of one attempt, the whole job, and running without progress.
        owner, labels: free-form, for listing and display.
        title: what a person reads as the job's name (plain text, at most 200 characters),
            shown first wherever the job is shown; empty: none.
        locale: labels in the returned job; defaults to the client's.
        depends_on: job numbers that must end READY before this job runs (at most 100);
            one ending FAILED or CANCELLED cancels it.
    """

    queue: str
    idempotency_key: str
    priority: int
    run_after: datetime | None
    max_attempts: int
    initial_backoff: Seconds | None
    max_backoff: Seconds | None
    backoff_multiplier: float
    on_lease_lost: str | None
    timeouts: Timeouts | None
    owner: str
    labels: Mapping[str, str] | None
    locale: str | None
    depends_on: Sequence[str]
    title: str


class ListFilters(TypedDict, total=False):
    """The keyword arguments of `list_job_pages` (and, with `limit`, of `list_jobs`)."""

    owner: str
    statuses: Iterable[str | int]
    job_type: str
    queue: str  # one the token may use (else PERMISSION_DENIED)
    assignee: str
    page_size: int
    locale: str | None


class WatchOptions(TypedDict, total=False):
    """The keyword arguments of `watch`.

    Attributes:
        locale: labels in the delivered jobs; defaults to the client's.
        on_reconnect: called as `(failures, delay, cause)` before each pause between
            reconnects, so a watcher is never silent while it retries.
    """

    locale: str | None
    on_reconnect: OnReconnect | None


@dataclass(frozen=True)
class Call(Generic[R]):
    """One unary call, ready to send.

    Attributes:
        method: the stub's method name, e.g. `Get`.
        request: the request message.
        idempotent: a repeat after a lost reply is harmless, so UNAVAILABLE may be retried.
        decode: the reply to what the client method returns.
    """

    method: str
    request: Message
    idempotent: bool
    decode: Callable[[Any], R]


def _submitted(reply: job_pb2.SubmitResponse) -> Submitted:
    return Submitted(views.Job(reply.job), reply.created)


def locale_or(locale: str | None, default: str) -> str:
    """The locale asked for, else the client's."""
    return default if locale is None else locale


def submit_request(
    job_type: str, payload: Payload, default_locale: str, options: SubmitOptions
) -> job_pb2.SubmitRequest:
    """The SubmitRequest of `submit(job_type, payload, **options)`."""
    request = convert.message(
        job_pb2.SubmitRequest,
        job_type=job_type,
        queue=options.get("queue", ""),
        payload=convert.encode_payload(payload),
        idempotency_key=options.get("idempotency_key", ""),
        priority=options.get("priority", 0),
        owner=options.get("owner", ""),
        labels=dict(options.get("labels") or {}),
        locale=locale_or(options.get("locale"), default_locale),
        depends_on=list(options.get("depends_on", ())),
        title=options.get("title", ""),
    )
    run_after = options.get("run_after")
    if run_after is not None:
        request.run_after.CopyFrom(convert.timestamp(run_after))
    policy = _retry_policy(options)
    if policy is not None:
        request.retry_policy.CopyFrom(policy)
    timeouts = options.get("timeouts")
    if timeouts is not None:
        request.timeouts.CopyFrom(_timeouts(timeouts))
    return request


def submit(job_type: str, payload: Payload, default_locale: str, options: SubmitOptions) -> Call[Submitted]:
    # Retried only with a key: a Submit whose reply was lost may still have created the
    # job, and only the key lets the server return that job instead of a second one.
    request = submit_request(job_type, payload, default_locale, options)
    return Call("Submit", request, bool(request.idempotency_key), _submitted)


def submit_batch(jobs: Sequence[job_pb2.SubmitRequest], idempotency_key: str) -> Call[views.SubmittedBatch]:
    # With a key a repeat returns the same batch, so only then is it retried.
    request = job_pb2.SubmitBatchRequest(jobs=list(jobs), idempotency_key=idempotency_key)
    return Call("SubmitBatch", request, bool(idempotency_key), views.SubmittedBatch)


def get_batch(batch_id: str) -> Call[views.Batch]:
    return Call("GetBatch", job_pb2.GetBatchRequest(batch_id=batch_id), True, views.Batch)


def cancel_batch(batch_id: str) -> Call[views.Batch]:
    # Cancel is idempotent job by job, so a repeat after a lost reply is harmless.
    return Call("CancelBatch", job_pb2.CancelBatchRequest(batch_id=batch_id), True, views.Batch)


def get(job_no: str, locale: str) -> Call[views.Job]:
    return Call("Get", job_pb2.GetRequest(job_no=job_no, locale=locale), True, views.Job)


def cancel(job_no: str, locale: str) -> Call[views.Job]:
    # Cancel is idempotent by contract, so a repeat after a lost reply is harmless.
    return Call("Cancel", job_pb2.CancelRequest(job_no=job_no, locale=locale), True, views.Job)


def retry(job_no: str, locale: str, *, force: bool = False) -> Call[views.Job]:
    # The FAILED -> QUEUED guard applies at most once, so a repeat can never run the job
    # twice; at worst a repeat after a lost reply answers FAILED_PRECONDITION.
    return Call("Retry", job_pb2.RetryRequest(job_no=job_no, locale=locale, force=force), True, views.Job)


def resolve(job_no: str, decision: str, note: str, locale: str) -> Call[views.Job]:
    request = job_pb2.ResolveRequest(
        job_no=job_no, decision=job_pb2.Review.Decision.Value(decision.upper()), note=note, locale=locale
    )
    # WAITING -> QUEUED or FAILED happens at most once: a repeat after a lost reply can
    # change nothing, at worst it answers FAILED_PRECONDITION.
    return Call("Resolve", request, True, views.Job)


def list_request(default_locale: str, filters: ListFilters) -> job_pb2.ListJobsRequest:
    return convert.message(
        job_pb2.ListJobsRequest,
        owner=filters.get("owner", ""),
        statuses=convert.statuses(filters.get("statuses", ())),
        job_type=filters.get("job_type", ""),
        queue=filters.get("queue", ""),
        assignee=filters.get("assignee", ""),
        page_size=filters.get("page_size", 0),
        locale=locale_or(filters.get("locale"), default_locale),
    )


def watch_request(job_no: str, after_version: int, locale: str) -> job_pb2.WatchStatusRequest:
    return convert.message(job_pb2.WatchStatusRequest, job_no=job_no, after_version=after_version, locale=locale)


def watch_batch_request(batch_id: str, locale: str) -> job_pb2.WatchJobsRequest:
    return job_pb2.WatchJobsRequest(batch_id=batch_id, locale=locale)


def result_request(job_no: str) -> job_pb2.GetResultRequest:
    return job_pb2.GetResultRequest(job_no=job_no)


def parse_result_json(job_no: str, content_type: str, data: bytes) -> Any:
    """`result_json`'s answer: the result's bytes as JSON, whatever content type the worker gave.

    Raises:
        ValueError: the bytes are not JSON, naming the job and its content type.
    """
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        kind = content_type or "no content type"
        raise ValueError(
            f"the result of {job_no} is not JSON ({kind}, {len(data)} bytes: {error});"
            " read its bytes with result() or result_to()"
        ) from None


def _retry_policy(options: SubmitOptions) -> job_pb2.RetryPolicy | None:
    max_attempts = options.get("max_attempts", 0)
    initial_backoff, max_backoff = options.get("initial_backoff"), options.get("max_backoff")
    multiplier, on_lease_lost = options.get("backoff_multiplier", 0.0), options.get("on_lease_lost")
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
