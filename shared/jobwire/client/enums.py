"""The wire's enums as Python enums that print their names: `print(job.status)` shows `READY`.

Each is an `IntEnum`, so it still equals the wire's number (`job.status == job_pb2.Job.READY`)
and goes anywhere the number went. They are written out rather than built from the
descriptors at import time, so an editor and mypy see every member; a unit test checks each
against its proto enum (names and numbers), so they cannot drift.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Self


class WireEnum(IntEnum):
    """An IntEnum whose `str()` and `format()` are its name; `int()` or `.value` is the number.

    A number this client does not know (a newer server's) reads as `UNKNOWN_<n>` instead of
    failing, so an old client keeps working against a newer server.
    """

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    @classmethod
    def _missing_(cls, value: object) -> Self | None:
        if not isinstance(value, int):
            return None
        unknown = int.__new__(cls, value)
        unknown._name_ = f"UNKNOWN_{value}"
        unknown._value_ = value
        return unknown


class JobStatus(WireEnum):
    """`job_pb2.Job.Status`: where a job is in its life."""

    STATUS_UNSPECIFIED = 0
    QUEUED = 1
    RUNNING = 2
    CANCEL_REQUESTED = 3
    READY = 4
    FAILED = 5
    CANCELLED = 6
    WAITING = 7  # waiting for a person's review


class ErrorCategory(WireEnum):
    """`job_pb2.JobError.Category`: why a job did not complete."""

    CATEGORY_UNSPECIFIED = 0
    INPUT_INVALID = 1
    DEPENDENCY_FAILED = 2
    TIMEOUT = 3
    WORKER_LOST = 4
    RESULT_INVALID = 5
    PROCESSING_ERROR = 6
    REJECTED = 7  # a person reviewing it said no


class DisplayAction(WireEnum):
    """`job_pb2.Display.Action`: what a person may do with the job now."""

    ACTION_UNSPECIFIED = 0
    VIEW = 1
    CANCEL = 2
    PREVIEW = 3
    DOWNLOAD = 4
    RETRY = 5
    RESUBMIT = 6


class FindingKind(WireEnum):
    """`admin_pb2.Finding.Kind`: what Inspect found."""

    KIND_UNSPECIFIED = 0
    STALLED = 1
    RUNNING_WITHOUT_LEASE = 2
    TERMINAL_WITH_TOKEN = 3
    NO_PROGRESS = 4
    NO_WORKER = 5


class Overlap(WireEnum):
    """`schedule_pb2.Schedule.Overlap`: whether a firing waits for the previous job."""

    OVERLAP_UNSPECIFIED = 0  # treated as SKIP
    SKIP = 1
    ALLOW = 2


class CatchUp(WireEnum):
    """`schedule_pb2.Schedule.CatchUp`: what a server back after missed firings does."""

    CATCH_UP_UNSPECIFIED = 0  # treated as NONE
    NONE = 1
    ONE = 2
