"""A lease as a worker holds it, and what the server says of it on each call."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from jobwire.domain.review import Review
from jobwire.domain.stages import StageDef


@dataclass(frozen=True, kw_only=True)
class Lease:
    """A job handed to one worker: what to run, where to resume, and until when."""

    job_no: str
    tenant: str  # whose job: a shared fleet's worker serves every tenant
    worker_token: str
    job_type: str
    payload: bytes
    attempt: int
    checkpoint: bytes | None
    stages: tuple[StageDef, ...]
    lease_expires_at: datetime
    lease_seconds: float
    attempt_deadline: datetime | None = None  # when this attempt's time runs out (None: no limit)
    review: Review | None = None  # a reviewer's approval of this job, when there was one: who, and their note
    trace_context: str | None = None  # the W3C traceparent of the Submit that made the job, when traced
    version: int = 0  # the job's version once leased: its changes up to it are the lease's past, not news


class LeaseState(StrEnum):
    OK = "OK"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"  # stop at the next safe point and confirm
    LOST = "LOST"  # the lease is no longer this worker's: stop, tell nobody
    TIMED_OUT = "TIMED_OUT"  # the attempt ran past its time limit and the lease was revoked: as LOST


@dataclass(frozen=True, kw_only=True)
class LeaseStatus:
    """The answer to a heartbeat or a report: is the lease still held, and until when."""

    job_no: str
    state: LeaseState
    lease_expires_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Holding:
    """Who holds a job's lease. `epoch` counts the leases ever issued; each token names its epoch."""

    epoch: int
    token: str | None
    expires_at: datetime | None
    stalled: bool


def alive(holding: Holding, now: datetime) -> bool:
    """Whether a worker may still be running the job: its lease is neither stalled nor expired at `now`."""
    return not holding.stalled and holding.expires_at is not None and holding.expires_at > now


def end(holding: Holding) -> Holding:
    """The holder ended its own lease: nobody holds it; the epoch stays, so a replay of that ending is known."""
    return Holding(epoch=holding.epoch, token=None, expires_at=None, stalled=False)


def revoke(holding: Holding) -> Holding:
    """The lease is taken from its holder: nobody holds it, and a new epoch so the old token never matches again."""
    return Holding(epoch=holding.epoch + 1, token=None, expires_at=None, stalled=False)
