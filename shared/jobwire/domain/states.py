"""Job states and the transition table, as data.

Every write the store makes passes `allowed(action, from, to)` before its guarded UPDATE
(jobwire.db.changes), Claim included, and the tests walk the table cell by cell, so the
rules live here once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Status(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    READY = "READY"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    WAITING = "WAITING"  # a person must review it: nobody holds it, and no time runs for its attempt

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: Final = frozenset({Status.READY, Status.FAILED, Status.CANCELLED})
LEASED: Final = frozenset({Status.RUNNING, Status.CANCEL_REQUESTED})


class Action(StrEnum):
    SUBMIT = "SUBMIT"
    CLAIM = "CLAIM"
    CANCEL = "CANCEL"
    REPORT = "REPORT"
    HEARTBEAT = "HEARTBEAT"
    COMPLETE = "COMPLETE"
    CONFIRM_CANCEL = "CONFIRM_CANCEL"
    FAIL = "FAIL"
    RELEASE = "RELEASE"
    LEASE_EXPIRED = "LEASE_EXPIRED"  # the reaper found an expired lease past its grace
    RETRY = "RETRY"
    REQUEUE = "REQUEUE"  # an operator's decision for a stalled job
    ATTEMPT_TIMEOUT = "ATTEMPT_TIMEOUT"  # the sweep found an attempt past its attempt_timeout
    JOB_TIMEOUT = "JOB_TIMEOUT"  # the sweep found an unfinished job past its job_timeout
    NO_PROGRESS = "NO_PROGRESS"  # the sweep found a RUNNING job with no progress for its stage_timeout
    DEPENDENCY_READY = "DEPENDENCY_READY"  # a job it depends on ended READY: one fewer to wait for
    DEPENDENCY_FAILED = "DEPENDENCY_FAILED"  # a job it depends on ended FAILED or CANCELLED
    AWAIT_REVIEW = "AWAIT_REVIEW"  # the lease's holder hands the job to a person
    RESOLVE = "RESOLVE"  # a person's decision on a WAITING job


Q, R, CR = Status.QUEUED, Status.RUNNING, Status.CANCEL_REQUESTED
READY, FAILED, CANCELLED = Status.READY, Status.FAILED, Status.CANCELLED
W = Status.WAITING

# action -> {from status -> the statuses it may end in}. Anything absent is refused.
TRANSITIONS: Final[dict[Action, dict[Status, frozenset[Status]]]] = {
    Action.CLAIM: {Q: frozenset({R})},
    Action.CANCEL: {
        Q: frozenset({CANCELLED}),
        R: frozenset({CR}),
        CR: frozenset({CR}),  # idempotent
        CANCELLED: frozenset({CANCELLED}),  # idempotent
        W: frozenset({CANCELLED}),  # nobody holds it, so it ends at once
    },
    Action.REPORT: {R: frozenset({R}), CR: frozenset({CR})},
    Action.HEARTBEAT: {R: frozenset({R}), CR: frozenset({CR})},
    Action.COMPLETE: {R: frozenset({READY}), CR: frozenset({READY})},
    Action.CONFIRM_CANCEL: {CR: frozenset({CANCELLED})},
    # Fail while a cancel is pending ends CANCELLED: the user asked it to stop.
    Action.FAIL: {R: frozenset({Q, FAILED}), CR: frozenset({CANCELLED})},
    Action.RELEASE: {R: frozenset({Q}), CR: frozenset({CANCELLED})},
    # An expired lease is first marked stalled (same status); after the grace INSPECT keeps
    # a RUNNING job so, RETRY requeues or fails it, and a pending cancel ends CANCELLED.
    Action.LEASE_EXPIRED: {R: frozenset({R, Q, FAILED}), CR: frozenset({CR, CANCELLED})},
    Action.RETRY: {FAILED: frozenset({Q})},
    Action.REQUEUE: {R: frozenset({Q})},
    # Time limits (jobwire.domain.timeouts). An attempt past its limit ends as a retryable
    # failure would; a pending cancel ends CANCELLED. Past the job's own limit nothing is
    # retried, whatever the status. No progress is first a finding (same status); with
    # on_no_progress FAIL it ends the attempt as an attempt timeout would.
    Action.ATTEMPT_TIMEOUT: {R: frozenset({Q, FAILED}), CR: frozenset({CANCELLED})},
    Action.JOB_TIMEOUT: {
        Q: frozenset({FAILED}),
        R: frozenset({FAILED}),
        CR: frozenset({FAILED}),
        W: frozenset({FAILED}),
    },
    Action.NO_PROGRESS: {R: frozenset({R, Q, FAILED})},
    # Dependencies (jobwire.db.dependencies). A job waits QUEUED, unclaimable, until each job
    # it depends on is READY; one ending FAILED or CANCELLED cancels it, and so on down the chain.
    Action.DEPENDENCY_READY: {Q: frozenset({Q})},
    Action.DEPENDENCY_FAILED: {Q: frozenset({CANCELLED})},
    # Waiting for a person (jobwire.domain.review): the lease ends; a pending cancel wins, as
    # with Release. APPROVE queues it again (the attempt not charged); REJECT fails it.
    Action.AWAIT_REVIEW: {R: frozenset({W}), CR: frozenset({CANCELLED})},
    Action.RESOLVE: {W: frozenset({Q, FAILED})},
}


def sources(action: Action) -> frozenset[Status]:
    """The statuses from which `action` may start."""
    if action is Action.SUBMIT:
        return frozenset()
    return frozenset(TRANSITIONS[action])


def allowed(action: Action, current: Status, target: Status) -> bool:
    return target in TRANSITIONS.get(action, {}).get(current, frozenset())
