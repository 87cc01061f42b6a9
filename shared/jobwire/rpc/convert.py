"""Proto <-> domain, in one place. Servicers decode with these and encode with these."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import Literal, cast

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from jobwire.domain.batches import BatchRecord
from jobwire.domain.commands import NewJob
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.job import Artifact, ErrorCategory, JobRecord
from jobwire.domain.retry import OnLeaseLost, RetryPolicy
from jobwire.domain.review import Decision, Review
from jobwire.domain.states import LEASED, Status
from jobwire.domain.timeouts import OnNoProgress, Timeouts
from jobwire.domain.view import render
from jobwire.v1 import job_pb2

_EPOCH = datetime(1970, 1, 1)
# google.protobuf.Duration's own range (duration.proto): +-10,000 years, nanos of the seconds' sign.
# protobuf decodes any int64 and int32 without a complaint; past this, Python's timedelta overflows.
MAX_DURATION_S = 315_576_000_000
_NANOS = 1_000_000_000


def timestamp(value: datetime | None) -> Timestamp | None:
    """A naive UTC (or aware) datetime as a Timestamp; by arithmetic, since FromDatetime is slow."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    delta = value - _EPOCH
    return Timestamp(seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1000)


def from_timestamp(ts: Timestamp, field: str = "timestamp") -> datetime:
    """A caller's Timestamp as naive UTC; one outside 0001..9999 or with bad nanos is INVALID_ARGUMENT."""
    try:
        return ts.ToDatetime(tzinfo=UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):
        raise InvalidArgument(field, "is not a valid timestamp between years 1 and 9999") from None


def seconds(duration: Duration, field: str) -> float:
    """A caller's Duration in seconds; one outside Duration's own range is INVALID_ARGUMENT naming `field`.

    Every Duration a request carries is decoded here, so none reaches a timedelta (or a
    domain range check) as a value no Duration may hold: the domain's bounds come after.
    """
    whole, nanos = duration.seconds, duration.nanos
    if abs(whole) > MAX_DURATION_S or abs(nanos) >= _NANOS or (whole and nanos and (whole < 0) != (nanos < 0)):
        raise InvalidArgument(
            field, f"is not a valid Duration: seconds within +-{MAX_DURATION_S} and nanos within +-999999999, one sign"
        )
    return whole + nanos / 1e9


def duration(value: float) -> Duration:
    out = Duration()
    out.FromNanoseconds(int(value * 1e9))
    return out


# What a new job's reply carries beyond what its SubmitRequest gave: its number, status,
# progress, times, counters, its place in line and the display words (tests/service keeps
# this an upper bound for the longest of them).
SERVER_FIELDS_BYTES = 512


def reply_bytes(new: NewJob) -> int:
    """At most what `new`, once made, weighs in a reply that lists it (a SubmitBatchResponse)."""
    given = job_pb2.Job(
        job_type=new.job_type, queue=new.queue, owner=new.owner, labels=new.labels,
        depends_on=new.depends_on, batch_id=new.batch_id or "", title=new.title,
        display=job_pb2.Display(title=new.title),  # the title again, for a person
        input=job_pb2.JobInput(size_bytes=len(new.payload), sha256="0" * 64),
    )  # fmt: skip
    waiting_for = sum(len(no) + 2 for no in new.depends_on)  # the detail names the unfinished ones
    return given.ByteSize() + waiting_for + SERVER_FIELDS_BYTES


def job_to_proto(job: JobRecord, locale: str = "") -> job_pb2.Job:
    view = render(job, locale)
    progress = job.progress
    out = job_pb2.Job(
        job_no=job.job_no,
        job_type=job.job_type,
        queue=job.queue,
        owner=job.owner,
        title=job.title,
        labels=dict(job.labels),
        status=job_pb2.Job.Status.Value(job.status.value),
        stage=job.stage or "" if job.status in (Status.RUNNING, Status.CANCEL_REQUESTED) else "",
        progress=job_pb2.Progress(
            stage_index=progress.stage_index,
            stage_count=progress.stage_count,
            processed_units=progress.processed_units,
            total_units=progress.total_units,
            percent=progress.percent,
        ),
        queue_position=job.queue_position,
        cancellable=job.cancellable,
        downloadable=job.downloadable,
        stalled=job.stalled,
        no_progress_for=duration(job.no_progress_for.total_seconds())
        if job.no_progress_for is not None and job.status in LEASED
        else None,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        created_at=timestamp(job.created_at),
        started_at=timestamp(job.started_at),
        updated_at=timestamp(job.updated_at),
        finished_at=timestamp(job.finished_at),
        run_after=timestamp(job.run_after) if job.status is Status.QUEUED else None,
        display=job_pb2.Display(
            status_label=view.status_label,
            stage_label=view.stage_label,
            detail=view.detail,
            actions=[job_pb2.Display.Action.Value(a.value) for a in view.actions],
            locale=view.locale,
            title=job.title,
        ),
        version=job.version,
        priority=job.priority,
        depends_on=job.depends_on,
        batch_id=job.batch_id or "",
        review_assignee=job.review_assignee,
        review_items=job.review_items,
        no_worker=job.no_worker,
    )
    if job.error is not None:
        out.error.CopyFrom(job_pb2.JobError(
            category=job_pb2.JobError.Category.Value(job.error.category.value),
            stage=job.error.stage, message=job.error.message, retryable=job.error.retryable,
        ))  # fmt: skip
    if job.input is not None:
        out.input.CopyFrom(job_pb2.JobInput(size_bytes=job.input.size_bytes, sha256=job.input.sha256))
    if job.result is not None:
        r = job.result
        out.result.CopyFrom(job_pb2.Artifact(
            uri=r.uri, size_bytes=r.size_bytes, sha256=r.sha256, content_type=r.content_type, summary=r.summary,
        ))  # fmt: skip
    return out


def batch_to_proto(batch: BatchRecord) -> job_pb2.Batch:
    counts = {status.value.lower(): batch.counts.get(status, 0) for status in Status}
    return job_pb2.Batch(
        batch_id=batch.batch_id,
        total=batch.total,
        counts=job_pb2.BatchCounts(**counts),
        finished=batch.finished,
        progress=batch.progress,
        created_at=timestamp(batch.created_at),
    )


def retry_policy(policy: job_pb2.RetryPolicy, present: bool) -> RetryPolicy:
    """The submitted policy, zero fields meaning the defaults."""
    base = RetryPolicy()
    if not present:
        return base
    _known(job_pb2.RetryPolicy.OnLeaseLost, policy.on_lease_lost, "retry_policy.on_lease_lost")
    if policy.max_attempts < 0:
        raise InvalidArgument("retry_policy.max_attempts", "must not be negative")
    initial = _backoff(policy, "initial_backoff", base.initial_backoff_s)
    ceiling = _backoff(policy, "max_backoff", base.max_backoff_s)
    return RetryPolicy(
        max_attempts=policy.max_attempts or base.max_attempts,
        initial_backoff_s=initial,
        max_backoff_s=max(ceiling, initial) if not policy.HasField("max_backoff") else ceiling,
        backoff_multiplier=policy.backoff_multiplier or base.backoff_multiplier,
        on_lease_lost=OnLeaseLost.RETRY if policy.on_lease_lost == job_pb2.RetryPolicy.RETRY else OnLeaseLost.INSPECT,
    ).validated()


def _backoff(policy: job_pb2.RetryPolicy, name: Literal["initial_backoff", "max_backoff"], default: float) -> float:
    return seconds(getattr(policy, name), f"retry_policy.{name}") if policy.HasField(name) else default


def timeouts(limits: job_pb2.Timeouts, present: bool, default_attempt_s: float | None) -> Timeouts:
    """The submitted time limits; an unset attempt_timeout takes the server's default."""
    if not present:
        return Timeouts(attempt_s=default_attempt_s)
    _known(job_pb2.Timeouts.OnNoProgress, limits.on_no_progress, "timeouts.on_no_progress")
    return Timeouts(
        attempt_s=_limit(limits, "attempt_timeout") if limits.HasField("attempt_timeout") else default_attempt_s,
        job_s=_limit(limits, "job_timeout"),
        stage_s=_limit(limits, "stage_timeout"),
        on_no_progress=OnNoProgress(job_pb2.Timeouts.OnNoProgress.Name(limits.on_no_progress)),
    ).validated()


def _limit(limits: job_pb2.Timeouts, name: Literal["attempt_timeout", "job_timeout", "stage_timeout"]) -> float | None:
    # Zero is no limit: how a caller turns the server's default attempt_timeout off.
    value = seconds(getattr(limits, name), f"timeouts.{name}") if limits.HasField(name) else 0.0
    return value or None


def _known(enum: object, number: int, field: str) -> bool:
    """Unknown enum numbers are a caller's mistake: INVALID_ARGUMENT, never UNKNOWN."""
    values = enum.values()  # type: ignore[attr-defined]
    if number not in values:
        raise InvalidArgument(field, f"unknown value {number}")
    return True


def status(number: int, field: str = "statuses") -> Status:
    _known(job_pb2.Job.Status, number, field)
    if number == job_pb2.Job.STATUS_UNSPECIFIED:
        raise InvalidArgument(field, "STATUS_UNSPECIFIED is not a status")
    return Status(job_pb2.Job.Status.Name(cast(job_pb2.Job.Status.ValueType, number)))


def category(number: int) -> ErrorCategory:
    _known(job_pb2.JobError.Category, number, "category")
    if number == job_pb2.JobError.CATEGORY_UNSPECIFIED:
        return ErrorCategory.PROCESSING_ERROR
    return ErrorCategory(job_pb2.JobError.Category.Name(cast(job_pb2.JobError.Category.ValueType, number)))


def artifact(result: job_pb2.Artifact, schemes: Collection[str]) -> Artifact:
    return Artifact(
        uri=result.uri,
        size_bytes=result.size_bytes,
        sha256=result.sha256,
        content_type=result.content_type,
        summary=result.summary,
    ).verified(schemes)


def claimed_artifact(result: job_pb2.Artifact) -> Artifact:
    """What a worker says of bytes the server keeps; the server checks it (jobwire.domain.kept_results)."""
    return Artifact(
        uri=result.uri, size_bytes=result.size_bytes, sha256=result.sha256, content_type=result.content_type,
        summary=result.summary,
    )  # fmt: skip


def decision(number: int) -> Decision:
    _known(job_pb2.Review.Decision, number, "decision")
    if number == job_pb2.Review.DECISION_UNSPECIFIED:
        raise InvalidArgument("decision", "must be APPROVE or REJECT")
    return Decision(job_pb2.Review.Decision.Name(cast(job_pb2.Review.Decision.ValueType, number)))


def review_to_proto(review: Review | None) -> job_pb2.Review | None:
    if review is None:
        return None
    return job_pb2.Review(
        decision=job_pb2.Review.Decision.Value(review.decision.value), note=review.note, resolved_by=review.resolved_by
    )
