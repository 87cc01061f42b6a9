"""What the clients return: thin read-only views over the reply messages, in Python's terms.

A view reads its message's fields through: enums as `jobwire.client.enums` members (they
print their names and still equal the wire numbers), Timestamps as aware UTC datetimes
(None when unset), `optional` numbers as `int | None`, a message the server sends only in
some states (a job's `error`, its `result`) as None when absent. Every other field reads as
on the message, and any attribute a view does not define (`HasField`, `WhichOneof`, ...) is
the message's own, so code written against the raw messages keeps working. `raw` is the
message itself, for protobuf tools (`MessageToDict`, `SerializeToString`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, Generic, Self, TypeVar, overload

from google.protobuf import duration_pb2
from google.protobuf.message import Message

from jobwire.client.convert import from_timestamp
from jobwire.client.enums import CatchUp, DisplayAction, ErrorCategory, FindingKind, JobStatus, Overlap, WireEnum
from jobwire.v1 import admin_pb2, job_pb2, schedule_pb2

M = TypeVar("M", bound=Message)
T = TypeVar("T")
E = TypeVar("E", bound=WireEnum)
V = TypeVar("V", bound="View[Any]")


class View(Generic[M]):
    """A reply message, read in Python's terms; unknown attributes fall through to `raw`."""

    __slots__ = ("raw",)
    wire_type: ClassVar[type[Message]]  # the message type each view reads
    shown: ClassVar[tuple[str, ...]] = ()  # the fields its repr names
    __hash__ = None  # type: ignore[assignment]  # as unhashable as the message it holds

    def __init__(self, raw: M) -> None:
        self.raw = raw

    def __getattr__(self, name: str) -> Any:
        if name == "raw" or name.startswith("__"):  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.raw, name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *dir(self.raw)})

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return bool(self.raw == other.raw)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={_short(getattr(self, name))}" for name in self.shown)
        return f"{type(self).__name__}({fields})"


def _short(value: object) -> str:
    return str(value) if isinstance(value, Enum) else repr(value)


class Field(Generic[T]):
    """A field of a view's message, read through `read(message, field name)`."""

    def __init__(self, read: Callable[[Any, str], T], kind: object = None) -> None:
        self.read, self.kind = read, kind  # kind: what the descriptor test checks it against
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, view: None, owner: type) -> Self: ...

    @overload
    def __get__(self, view: View[Any], owner: type) -> T: ...

    def __get__(self, view: View[Any] | None, owner: type) -> Self | T:
        if view is None:
            return self
        return self.read(view.raw, self.name)


def plain(_: type[T]) -> Field[T]:
    """The field as the message holds it."""
    return Field(getattr)


def moment() -> Field[datetime | None]:
    """A Timestamp as an aware UTC datetime; None when unset."""
    return Field(lambda raw, name: from_timestamp(getattr(raw, name)), datetime)


def number_or_none() -> Field[int | None]:
    """An `optional` number: None when the server left it out."""
    return Field(lambda raw, name: int(getattr(raw, name)) if raw.HasField(name) else None, int)


def enum(kind: type[E]) -> Field[E]:
    return Field(lambda raw, name: kind(getattr(raw, name)), kind)


def each_enum(kind: type[E]) -> Field[tuple[E, ...]]:
    """A repeated enum, as a tuple."""
    return Field(lambda raw, name: tuple(kind(value) for value in getattr(raw, name)), kind)


def view(kind: type[V]) -> Field[V]:
    return Field(lambda raw, name: kind(getattr(raw, name)), kind)


def view_or_none(kind: type[V]) -> Field[V | None]:
    """A message the server sends only in some states: None when absent."""
    return Field(lambda raw, name: kind(getattr(raw, name)) if raw.HasField(name) else None, kind)


def message_or_none(kind: type[M]) -> Field[M | None]:
    """A message with nothing to convert, as is; None when absent."""
    return Field(lambda raw, name: getattr(raw, name) if raw.HasField(name) else None, kind)


def each_view(kind: type[V]) -> Field[tuple[V, ...]]:
    return Field(lambda raw, name: tuple(kind(one) for one in getattr(raw, name)), kind)


class JobError(View[job_pb2.JobError]):
    """Why a job did not complete (FAILED only): a value, not an exception."""

    __slots__ = ()
    wire_type = job_pb2.JobError
    shown = ("category", "stage", "retryable")
    category = enum(ErrorCategory)
    stage = plain(str)
    message = plain(str)  # for a person; never a trace, a path or a host
    retryable = plain(bool)


class Display(View[job_pb2.Display]):
    """What a person is shown: localized labels and the actions they may take."""

    __slots__ = ()
    wire_type = job_pb2.Display
    shown = ("status_label", "detail", "actions")
    status_label = plain(str)
    stage_label = plain(str)
    detail = plain(str)
    actions = each_enum(DisplayAction)
    locale = plain(str)
    title = plain(str)


class Job(View[job_pb2.Job]):
    """A job as the server answered: `print(job.status)` shows READY, `job.created_at` is a datetime."""

    __slots__ = ()
    wire_type = job_pb2.Job
    shown = ("job_no", "status", "stage", "version")
    job_no = plain(str)
    job_type = plain(str)
    queue = plain(str)
    owner = plain(str)
    title = plain(str)  # as submitted; empty when none was given
    input = plain(job_pb2.JobInput)  # the payload's size_bytes and sha256, computed by the server
    labels: Field[Mapping[str, str]] = Field(getattr)
    status = enum(JobStatus)
    stage = plain(str)
    progress = plain(job_pb2.Progress)
    queue_position = number_or_none()  # QUEUED only: runnable jobs ahead in its queue
    cancellable = plain(bool)
    downloadable = plain(bool)
    stalled = plain(bool)
    attempt = plain(int)
    max_attempts = plain(int)
    created_at = moment()
    started_at = moment()
    updated_at = moment()
    finished_at = moment()
    run_after = moment()
    error = view_or_none(JobError)  # FAILED only
    result = message_or_none(job_pb2.Artifact)  # READY only
    display = view(Display)
    version = plain(int)
    priority = plain(int)
    no_progress_for = plain(duration_pb2.Duration)
    depends_on: Field[Sequence[str]] = Field(getattr)
    batch_id = plain(str)
    review_assignee = plain(str)
    review_items: Field[Sequence[str]] = Field(getattr)
    no_worker = plain(bool)


class JobPage(View[job_pb2.ListJobsResponse]):
    """One page of `list_job_pages`."""

    __slots__ = ()
    wire_type = job_pb2.ListJobsResponse
    shown = ("jobs", "next_page_token")
    jobs = each_view(Job)
    next_page_token = plain(str)


class Batch(View[job_pb2.Batch]):
    """A batch's jobs counted by status (`counts.ready`, ...) and its progress (finished / total)."""

    __slots__ = ()
    wire_type = job_pb2.Batch
    shown = ("batch_id", "finished", "total")
    batch_id = plain(str)
    total = plain(int)
    counts = plain(job_pb2.BatchCounts)
    finished = plain(int)
    progress = plain(float)
    created_at = moment()


class SubmittedBatch(View[job_pb2.SubmitBatchResponse]):
    """`submit_batch`'s answer: the batch's id and its jobs, in request order.

    A replayed batch whose jobs no longer fit one reply lists those that fit and counts the
    rest in `jobs_omitted` (read them with `get_batch` and `watch_batch`).
    """

    __slots__ = ()
    wire_type = job_pb2.SubmitBatchResponse
    shown = ("batch_id", "jobs")
    batch_id = plain(str)
    jobs = each_view(Job)
    jobs_omitted = plain(int)


class Schedule(View[schedule_pb2.Schedule]):
    """A schedule; `template` stays the SubmitRequest it fires, as `submit_request` builds one."""

    __slots__ = ()
    wire_type = schedule_pb2.Schedule
    shown = ("schedule_id", "paused", "next_fire_time")
    schedule_id = plain(str)
    cron = plain(str)
    every = plain(duration_pb2.Duration)
    time_zone = plain(str)
    template = plain(job_pb2.SubmitRequest)
    overlap = enum(Overlap)
    catch_up = enum(CatchUp)
    paused = plain(bool)
    next_fire_time = moment()  # None while paused
    last_fire_time = moment()
    last_job_no = plain(str)
    created_at = moment()
    skipped_firings = plain(int)
    missed_firings = plain(int)


class JobEvent(View[admin_pb2.JobEvent]):
    """One entry of a job's evidence trail."""

    __slots__ = ()
    wire_type = admin_pb2.JobEvent
    shown = ("version", "kind", "to_status")
    version = plain(int)
    kind = plain(str)
    from_status = enum(JobStatus)
    to_status = enum(JobStatus)
    stage = plain(str)
    processed_units = plain(int)
    total_units = number_or_none()
    worker_id = plain(str)
    attempt = plain(int)
    detail = plain(str)  # HANDLER_EVIDENCE: the entry's value
    created_at = moment()
    key = plain(str)  # HANDLER_EVIDENCE: the entry's key
    size_bytes = plain(int)  # CHECKPOINT_SAVED: the checkpoint's size and sha256
    sha256 = plain(str)


class EventPage(View[admin_pb2.ListEventsResponse]):
    """One page of `list_event_pages`: events, and the job's title (the trail's heading)."""

    __slots__ = ()
    wire_type = admin_pb2.ListEventsResponse
    shown = ("title", "events", "next_page_token")
    events = each_view(JobEvent)
    next_page_token = plain(str)
    title = plain(str)


class Checkpoint(View[admin_pb2.Checkpoint]):
    """A job's latest checkpoint, as an admin reads it."""

    __slots__ = ()
    wire_type = admin_pb2.Checkpoint
    shown = ("job_no", "size_bytes", "sha256")
    job_no = plain(str)
    data = plain(bytes)
    size_bytes = plain(int)
    sha256 = plain(str)


class Finding(View[admin_pb2.Finding]):
    """What Inspect found: a stalled lease, a job without progress or workers, a broken invariant."""

    __slots__ = ()
    wire_type = admin_pb2.Finding
    shown = ("kind", "job_no", "status")
    kind = enum(FindingKind)
    job_no = plain(str)
    status = enum(JobStatus)
    stage = plain(str)
    heartbeat_at = moment()
    worker_id = plain(str)
    detail = plain(str)
    queue = plain(str)
    attempt = plain(int)
    processed_units = plain(int)
    total_units = number_or_none()
    checkpoint_present = plain(bool)
    lease_expires_at = moment()
    progress_at = moment()
    job_type = plain(str)
    worker_claimed_at = moment()  # NO_WORKER: when a worker last claimed for it; None: never
    title = plain(str)  # the job's title; empty: none


class WorkerInfo(View[admin_pb2.WorkerInfo]):
    """A worker the server knows: when it was last seen and what it serves."""

    __slots__ = ()
    wire_type = admin_pb2.WorkerInfo
    shown = ("worker_id", "live", "last_seen_at")
    worker_id = plain(str)
    queues: Field[Sequence[str]] = Field(getattr)
    job_types: Field[Sequence[str]] = Field(getattr)
    last_seen_at = moment()
    leases_held = plain(int)
    leases_stalled = plain(int)
    live = plain(bool)
    shared_fleet = plain(bool)
