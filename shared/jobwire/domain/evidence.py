"""What operators read: a job's evidence trail, the findings of Inspect, the workers seen.

The store returns these values; AdminService only encodes them, and the explanation a
finding carries is decided here, from facts, not rebuilt from columns in a servicer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from jobwire.domain.serving import last_asked
from jobwire.domain.states import Status


class EventKind(StrEnum):
    """Every kind of row in a job's evidence trail (job_event.kind), visible or evidence only."""

    SUBMITTED = "SUBMITTED"
    CLAIMED = "CLAIMED"
    PROGRESS = "PROGRESS"  # a report within the current stage
    STAGE_CHANGED = "STAGE_CHANGED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    CANCELLED = "CANCELLED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"  # a retryable failure with attempts left: QUEUED after a backoff
    RELEASED = "RELEASED"
    RETRIED = "RETRIED"  # a user's Retry of a FAILED job
    REQUEUED = "REQUEUED"  # an operator's Requeue of a stalled job
    LEASE_REVIVED = "LEASE_REVIVED"  # a stalled lease's holder spoke again
    LEASE_EXPIRED = "LEASE_EXPIRED"  # the reaper marked the lease stalled
    # the holder's Session ended: the lease ends within JOBWIRE_SESSION_GRACE_SECONDS unless named again
    WORKER_DISCONNECTED = "WORKER_DISCONNECTED"
    LEASE_REVOKED_REQUEUED = "LEASE_REVOKED_REQUEUED"  # RETRY with attempts left
    LEASE_REVOKED_FAILED = "LEASE_REVOKED_FAILED"  # RETRY with no attempts left: FAILED WORKER_LOST
    LEASE_REVOKED_CANCELLED = "LEASE_REVOKED_CANCELLED"  # a cancel was pending: CANCELLED
    LATE_CALL_REJECTED = "LATE_CALL_REJECTED"  # a once-real lease called after losing it (evidence only)
    HANDLER_EVIDENCE = "HANDLER_EVIDENCE"  # an entry the lease's holder recorded (evidence only)
    CHECKPOINT_SAVED = "CHECKPOINT_SAVED"  # a checkpoint kept with the job: its size and sha256 (evidence only)
    # One kind per time limit; the event's to_status says where the job went.
    ATTEMPT_TIMED_OUT = "ATTEMPT_TIMED_OUT"  # lease revoked; QUEUED after a backoff, FAILED TIMEOUT, or CANCELLED
    JOB_TIMED_OUT = "JOB_TIMED_OUT"  # FAILED TIMEOUT, not retryable; a lease held is revoked
    NO_PROGRESS = "NO_PROGRESS"  # marked (RUNNING stays), or ended as ATTEMPT_TIMED_OUT would under FAIL
    DEPENDENCY_READY = "DEPENDENCY_READY"  # a dependency ended READY; QUEUED stays, runnable once none is left
    DEPENDENCY_FAILED = "DEPENDENCY_FAILED"  # a dependency ended FAILED or CANCELLED: CANCELLED, naming it
    AWAITING_REVIEW = "AWAITING_REVIEW"  # the worker handed it to a person: WAITING, no lease
    REVIEW_APPROVED = "REVIEW_APPROVED"  # QUEUED again; the detail names who resolved and their note
    REVIEW_REJECTED = "REVIEW_REJECTED"  # FAILED REJECTED; the detail names who resolved and their note


class FindingKind(StrEnum):
    STALLED = "STALLED"  # a lease past its expiry
    RUNNING_WITHOUT_LEASE = "RUNNING_WITHOUT_LEASE"  # a broken invariant: must stay empty
    TERMINAL_WITH_TOKEN = "TERMINAL_WITH_TOKEN"  # a broken invariant (finished or WAITING): must stay empty
    NO_PROGRESS = "NO_PROGRESS"  # RUNNING with no new units and no new stage for its stage_timeout
    NO_WORKER = "NO_WORKER"  # QUEUED, and no worker claimed for its queue and job type lately (domain.serving)


@dataclass(frozen=True, kw_only=True)
class Finding:
    kind: FindingKind
    job_no: str
    queue: str
    status: Status
    stage: str | None
    attempt: int
    worker_id: str | None
    processed_units: int
    total_units: int | None
    checkpoint_present: bool
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    overdue_s: float | None  # how long ago the lease expired, by the database clock
    marked_stalled: bool
    on_lease_lost: str  # the job's policy: INSPECT or RETRY
    token_present: bool = True  # whether a lease token is stored: the two invariants are about it
    progress_at: datetime | None = None  # when its units or stage last moved
    idle_s: float | None = None  # how long ago that was, by the database clock
    stage_timeout_s: float | None = None
    marked_no_progress: bool = False
    on_no_progress: str = "INSPECT"
    job_type: str = ""
    claimed_at: datetime | None = None  # NO_WORKER: when a worker last claimed for its queue and job type
    unclaimed_s: float | None = None  # how long ago that was, by the database clock
    title: str = ""  # the job's, for the person reading the finding

    @property
    def detail(self) -> str:
        """What is wrong, and what the sweeps have done and will do, so an operator can decide with the evidence."""
        status = self.status.value
        if self.kind is FindingKind.NO_PROGRESS:
            return self._no_progress_detail()
        if self.kind is FindingKind.NO_WORKER:
            return (
                f"no worker serves queue {self.queue}, job type {self.job_type}; a worker last asked for it: "
                f"{last_asked(self.claimed_at, self.unclaimed_s)}"
            )
        if self.kind is FindingKind.RUNNING_WITHOUT_LEASE:
            gaps = (("no lease token", not self.token_present), ("no lease expiry", self.lease_expires_at is None))
            missing = [part for part, absent in gaps if absent]
            return (
                f"a {status} job has {' and '.join(missing)}: no worker can report on it and the reaper "
                "cannot recover it; requeue or cancel it"
            )
        if self.kind is FindingKind.TERMINAL_WITH_TOKEN:
            held_by = "a job waiting for review" if self.status is Status.WAITING else "a finished job"
            return f"a {status} job still holds a lease token: {held_by} must hold none"
        if self.overdue_s is None or self.overdue_s <= 0:
            return ""
        then = "ends CANCELLED" if self.status is Status.CANCEL_REQUESTED else f"policy {self.on_lease_lost}"
        marked = "marked stalled" if self.marked_stalled else "not yet marked stalled"
        return f"lease expired {self.overdue_s:.1f}s ago; {marked}; {then}"

    def _no_progress_detail(self) -> str:
        if self.idle_s is None or self.stage_timeout_s is None:
            return ""
        marked = "marked no progress" if self.marked_no_progress else "not yet marked"
        return (
            f"no progress for {self.idle_s:.1f}s (stage timeout {self.stage_timeout_s:g}s); {marked}; "
            f"on_no_progress {self.on_no_progress}"
        )


@dataclass(frozen=True, kw_only=True)
class JobEvent:
    """One row of a job's evidence trail: a change, or a call refused as late."""

    version: int
    kind: str
    from_status: Status | None
    to_status: Status | None
    stage: str | None
    processed_units: int | None
    total_units: int | None
    worker_id: str | None
    attempt: int | None
    detail: str | None
    created_at: datetime
    key: str | None = None  # HANDLER_EVIDENCE: the entry's key (its value is the detail)
    size_bytes: int | None = None  # CHECKPOINT_SAVED: the checkpoint's size and sha256
    sha256: str | None = None


@dataclass(frozen=True, kw_only=True)
class WorkerInfo:
    worker_id: str
    queues: Sequence[str]
    job_types: Sequence[str]
    last_seen_at: datetime
    leases_held: int
    live: bool  # seen within the time after which its leases would be lost
    leases_stalled: int = 0  # of leases_held, those stalled (their lease ran out, or the worker's session ended)
    shared_fleet: bool = False  # serves every tenant (auth file tenant = "*"), this one among them
