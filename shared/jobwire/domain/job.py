"""The job as a value: what the store reads and every view is rendered from."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.flow import Held
from jobwire.domain.limits import CONTROL
from jobwire.domain.progress import Progress
from jobwire.domain.stages import DEFAULT_PLAN, StageDef
from jobwire.domain.states import Status

Name = tuple[str, str]  # (tenant, job_no): what names a job, its number being its tenant's

SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class ErrorCategory(StrEnum):
    INPUT_INVALID = "INPUT_INVALID"
    DEPENDENCY_FAILED = "DEPENDENCY_FAILED"
    TIMEOUT = "TIMEOUT"
    WORKER_LOST = "WORKER_LOST"
    RESULT_INVALID = "RESULT_INVALID"
    PROCESSING_ERROR = "PROCESSING_ERROR"
    REJECTED = "REJECTED"  # a person reviewing it said no


@dataclass(frozen=True, kw_only=True)
class JobFailure:
    """What a user is told about a failure. `message` is plain text, never a trace."""

    category: ErrorCategory
    stage: str
    message: str
    retryable: bool


# Where results may live by default (JOBWIRE_RESULT_SCHEMES changes it on a server).
DEFAULT_RESULT_SCHEMES = frozenset({"https", "http", "s3", "gs", "az", "file"})
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")


@dataclass(frozen=True, kw_only=True)
class Artifact:
    uri: str
    size_bytes: int
    sha256: str
    content_type: str = ""
    summary: str = ""

    def verified(self, schemes: Collection[str] | None = None) -> Artifact:
        """The artifact if deliverable, else DELIVERABLE_INVALID; the job stays as it is.

        `schemes` are the URI schemes a user may be sent to (None: any); a reference without
        a scheme is relative and stays allowed. A result page turns the URI into a link, so
        `javascript:` or `data:` must never get that far.
        """
        problem = None
        scheme = _SCHEME.match(self.uri)
        if not self.uri or len(self.uri) > 2048:
            problem = "result.uri must be 1 to 2048 characters"
        elif CONTROL.search(self.uri) or any(c.isspace() for c in self.uri):
            problem = "result.uri must not contain white space or control characters"
        elif scheme is not None and schemes is not None and scheme.group(1).lower() not in schemes:
            problem = f"result.uri scheme must be one of: {', '.join(sorted(schemes))}"
        elif not SHA256_HEX.fullmatch(self.sha256.lower()):
            problem = "result.sha256 must be 64 hex digits"
        elif self.size_bytes < 0:
            problem = "result.size_bytes must not be negative"
        elif len(self.content_type) > 255 or len(self.summary) > 2000:
            problem = "result.content_type or summary is too long"
        if problem:
            raise InvalidArgument("result", problem, reason="DELIVERABLE_INVALID")
        return Artifact(
            uri=self.uri,
            size_bytes=self.size_bytes,
            sha256=self.sha256.lower(),
            content_type=self.content_type,
            summary=self.summary,
        )


@dataclass(frozen=True, kw_only=True)
class Digest:
    """Bytes told apart without them: their size and sha256 (a job's payload, a checkpoint)."""

    size_bytes: int
    sha256: str

    @classmethod
    def of(cls, payload: bytes) -> Digest:
        return cls(size_bytes=len(payload), sha256=hashlib.sha256(payload).hexdigest())


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    """One job's current truth, as stored."""

    job_no: str
    tenant: str
    job_type: str
    queue: str
    owner: str
    labels: Mapping[str, str]
    status: Status
    priority: int
    stage: str | None
    progress: Progress
    stages: tuple[StageDef, ...] = DEFAULT_PLAN
    stalled: bool = False
    # Marked as making no progress for its stage_timeout: how long, as of when it was read
    # (or, in a watcher's snapshot, as of that version).
    no_progress_for: timedelta | None = None
    attempt: int = 0
    max_attempts: int = 1
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    run_after: datetime | None = None
    error: JobFailure | None = None
    result: Artifact | None = None
    version: int = 1
    locale: str = "en"
    queue_position: int | None = None
    depends_on: tuple[str, ...] = ()  # as submitted
    # The dependencies not READY yet while it waits for them (claimable once none is left).
    waiting_for: tuple[str, ...] = ()
    batch_id: str | None = None
    # WAITING only: who must review it and what they should look at
    review_assignee: str = ""
    review_items: tuple[str, ...] = ()
    # QUEUED only, as of a Get: no worker has claimed for its queue and job type lately (NO_WORKER)
    no_worker: bool = False
    # QUEUED only, as of a Get or a ListJobs: its queue is paused or at a limit (jobwire.domain.flow)
    held: Held | None = None
    title: str = ""  # as submitted; empty when none was given
    input: Digest | None = None  # computed at submit (None only in a watch snapshot older than it)

    @property
    def stage_def(self) -> StageDef | None:
        for stage in self.stages:
            if stage.code == self.stage:
                return stage
        return None

    @property
    def cancellable(self) -> bool:
        if self.status in (Status.QUEUED, Status.WAITING):
            return True
        if self.status is Status.RUNNING:
            current = self.stage_def
            return current is None or current.cancellable
        return False

    @property
    def downloadable(self) -> bool:
        return self.status is Status.READY and self.result is not None


_HIDDEN = (
    # URLs and DSNs first, whole: they may carry credentials (postgres://admin:pw@db01/prod)
    (re.compile(r"\b[a-z][a-z0-9+.\-]*://\S+", re.I), "[url]"),
    # user:password@host and user@host without a scheme
    (re.compile(r"\b[\w.%+\-]+(?::[^\s@]*)?@[\w.\-]+(?::\d+)?", re.I), "[address]"),
    # paths: two or more segments, Unix or Windows
    (re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-~@+]+){2,}[\\/]?"), "[path]"),
    # IPv4 and IPv6 addresses, with an optional port
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "[address]"),
    (re.compile(r"\[?\b[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}\]?(?::\d+)?", re.I), "[address]"),
    # host names: three or more labels, or two with a common suffix
    (re.compile(r"\b(?:[a-z0-9-]+\.){2,}[a-z][a-z0-9-]*\b", re.I), "[host]"),
    (re.compile(r"\b[a-z0-9-]+\.(?:internal|local|lan|corp|com|net|org|io|svc)\b", re.I), "[host]"),
    # any name with a port (db01:5432, localhost:8080): a single label is a host too
    (re.compile(r"\b[a-z][a-z0-9\-]*:\d{2,5}\b", re.I), "[address]"),
)
MAX_USER_MESSAGE = 300
# Terminal colour codes (ffmpeg, compilers) and other control characters carry no meaning
# for a person reading a status page.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def plain_message(text: str) -> str:
    """A failure message safe to show a user: one line, no trace, path, host or address."""
    text = _CONTROL.sub(" ", _ANSI.sub("", text))
    lines = [" ".join(line.split()) for line in text.strip().splitlines() if line.strip()]
    if not lines or lines[0].startswith(("Traceback", "File ")):
        return "The job could not be completed."
    line = lines[0]
    for pattern, mask in _HIDDEN:
        line = pattern.sub(mask, line)
    return line[:MAX_USER_MESSAGE]
