"""Which event is which counted move (jobwire.domain.transitions): the metrics' counters read this."""

from __future__ import annotations

import pytest

from jobwire.domain.evidence import EventKind
from jobwire.domain.states import Status
from jobwire.domain.transitions import Move, move_of

K, S = EventKind, Status


@pytest.mark.parametrize(
    ("kind", "before", "after", "move"),
    [
        (K.CLAIMED, S.QUEUED, S.RUNNING, Move.CLAIMED),
        (K.COMPLETED, S.RUNNING, S.READY, Move.COMPLETED),
        (K.COMPLETED, S.CANCEL_REQUESTED, S.READY, Move.COMPLETED),
        (K.FAILED, S.RUNNING, S.FAILED, Move.FAILED),
        (K.LEASE_REVOKED_FAILED, S.RUNNING, S.FAILED, Move.FAILED),
        (K.REVIEW_REJECTED, S.WAITING, S.FAILED, Move.FAILED),
        (K.JOB_TIMED_OUT, S.QUEUED, S.FAILED, Move.FAILED),
        (K.CANCELLED, S.QUEUED, S.CANCELLED, Move.CANCELLED),
        (K.LEASE_REVOKED_CANCELLED, S.CANCEL_REQUESTED, S.CANCELLED, Move.CANCELLED),
        (K.DEPENDENCY_FAILED, S.QUEUED, S.CANCELLED, Move.CANCELLED),
        (K.RETRY_SCHEDULED, S.RUNNING, S.QUEUED, Move.RETRIED),
        (K.LEASE_REVOKED_REQUEUED, S.RUNNING, S.QUEUED, Move.RETRIED),
        (K.ATTEMPT_TIMED_OUT, S.RUNNING, S.QUEUED, Move.RETRIED),
        (K.REQUEUED, S.RUNNING, S.QUEUED, Move.RETRIED),
        (K.RETRIED, S.FAILED, S.QUEUED, Move.RETRIED),
        (K.LEASE_EXPIRED, S.RUNNING, S.RUNNING, Move.LEASE_EXPIRED),
        (K.LEASE_EXPIRED, S.CANCEL_REQUESTED, S.CANCEL_REQUESTED, Move.LEASE_EXPIRED),
        # not counted: the worker gave it back unrun, nothing ended, or it only waits on
        (K.RELEASED, S.RUNNING, S.QUEUED, None),
        (K.REVIEW_APPROVED, S.WAITING, S.QUEUED, None),
        (K.PROGRESS, S.RUNNING, S.RUNNING, None),
        (K.CANCEL_REQUESTED, S.RUNNING, S.CANCEL_REQUESTED, None),
        (K.AWAITING_REVIEW, S.RUNNING, S.WAITING, None),
        (K.DEPENDENCY_READY, S.QUEUED, S.QUEUED, None),
        (K.NO_PROGRESS, S.RUNNING, S.RUNNING, None),
    ],
)
def test_each_event_is_one_move_or_none(kind: EventKind, before: Status, after: Status, move: Move | None) -> None:
    assert move_of(kind, before, after) is move
