"""The transition table, cell by cell, against an expected table written independently of it.

EXPECTED below is written independently from the design text, not copied from states.py:

| from | by | to |
| — | Submit | QUEUED |                                   (a creation, not a transition)
| QUEUED | Claim | RUNNING |
| QUEUED | Cancel | CANCELLED |
| RUNNING | Cancel | CANCEL_REQUESTED |                   (DELIVERING guard: JobRecord.cancellable)
| RUNNING, CANCEL_REQUESTED | ReportStage, Heartbeat | same |
| RUNNING, CANCEL_REQUESTED | Complete | READY |
| CANCEL_REQUESTED | ConfirmCancel | CANCELLED |
| RUNNING | Fail | QUEUED (backoff) or FAILED |
| CANCEL_REQUESTED | Fail | CANCELLED |                    (fine print)
| RUNNING | Release | QUEUED |
| CANCEL_REQUESTED | Release | CANCELLED |                 (fine print)
| RUNNING | lease expired | RUNNING (stalled, INSPECT) / QUEUED (RETRY) / FAILED (RETRY, no attempts: WORKER_LOST) |
| CANCEL_REQUESTED | lease expired | CANCELLED |
| FAILED (retryable) | Retry | QUEUED |
| RUNNING (stalled) | Requeue (operator, AdminService) | QUEUED |
| RUNNING | attempt timeout | QUEUED (backoff) or FAILED (TIMEOUT) |   (issue 11: as a retryable failure)
| CANCEL_REQUESTED | attempt timeout | CANCELLED |
| QUEUED, RUNNING, CANCEL_REQUESTED | job timeout | FAILED (TIMEOUT, not retryable) |
| RUNNING | no progress | RUNNING (a finding, INSPECT) / QUEUED or FAILED (FAIL, as an attempt timeout) |
| QUEUED (waiting) | a dependency ends READY | QUEUED (runnable once none is left) |
| QUEUED (waiting) | a dependency ends FAILED or CANCELLED | CANCELLED |
| RUNNING | AwaitReview | WAITING |                       (issue: waiting for a person; the lease ends)
| CANCEL_REQUESTED | AwaitReview | CANCELLED |             (the user asked it to stop, as with Release)
| WAITING | Resolve | QUEUED (APPROVE) or FAILED (REJECT) |
| WAITING | Cancel | CANCELLED |                           (nobody holds it, so at once)
| WAITING | job timeout | FAILED (TIMEOUT) |
Cancel is idempotent on CANCEL_REQUESTED / CANCELLED; on READY / FAILED it is refused (§4).
"""

from __future__ import annotations

import pytest

from jobwire.domain.states import (
    LEASED,
    TERMINAL,
    TRANSITIONS,
    Action,
    Status,
    allowed,
    sources,
)

Q = Status.QUEUED
R = Status.RUNNING
CR = Status.CANCEL_REQUESTED
READY = Status.READY
FAILED = Status.FAILED
CANCELLED = Status.CANCELLED
W = Status.WAITING

ALL_STATUSES = (Q, R, CR, READY, FAILED, CANCELLED, W)
ALL_ACTIONS = tuple(Action)

# action -> {from -> set of allowed ends}; every (action, from) pair NOT listed is refused.
EXPECTED: dict[Action, dict[Status, set[Status]]] = {
    Action.SUBMIT: {},  # creates a job; it starts from no status
    Action.CLAIM: {Q: {R}},
    Action.CANCEL: {Q: {CANCELLED}, R: {CR}, CR: {CR}, CANCELLED: {CANCELLED}, W: {CANCELLED}},
    Action.REPORT: {R: {R}, CR: {CR}},
    Action.HEARTBEAT: {R: {R}, CR: {CR}},
    Action.COMPLETE: {R: {READY}, CR: {READY}},
    Action.CONFIRM_CANCEL: {CR: {CANCELLED}},
    Action.FAIL: {R: {Q, FAILED}, CR: {CANCELLED}},
    Action.RELEASE: {R: {Q}, CR: {CANCELLED}},
    # DESIGN §2: "RUNNING | lease expired | RUNNING, stalled" (INSPECT, the default), RETRY
    # requeues while attempts remain, and with no attempts left it ends FAILED (WORKER_LOST).
    # an expired lease is first marked stalled, keeping its status (RUNNING or CANCEL_REQUESTED)
    Action.LEASE_EXPIRED: {R: {R, Q, FAILED}, CR: {CR, CANCELLED}},
    Action.RETRY: {FAILED: {Q}},
    Action.REQUEUE: {R: {Q}},
    Action.ATTEMPT_TIMEOUT: {R: {Q, FAILED}, CR: {CANCELLED}},
    Action.JOB_TIMEOUT: {Q: {FAILED}, R: {FAILED}, CR: {FAILED}, W: {FAILED}},
    Action.NO_PROGRESS: {R: {R, Q, FAILED}},
    # A job waiting for its dependencies is QUEUED; a running job's dependencies all ended READY.
    Action.DEPENDENCY_READY: {Q: {Q}},
    Action.DEPENDENCY_FAILED: {Q: {CANCELLED}},
    Action.AWAIT_REVIEW: {R: {W}, CR: {CANCELLED}},
    Action.RESOLVE: {W: {Q, FAILED}},
}


def _expected(action: Action, current: Status) -> set[Status]:
    return EXPECTED[action].get(current, set())


def _actual(action: Action, current: Status) -> set[Status]:
    return set(TRANSITIONS.get(action, {}).get(current, frozenset()))


CELLS = [(a, s) for a in ALL_ACTIONS for s in ALL_STATUSES]
CELL_IDS = [f"{a.value}-from-{s.value}" for a, s in CELLS]


def test_expected_table_covers_every_action() -> None:
    assert set(EXPECTED) == set(Action)


@pytest.mark.parametrize(("action", "current"), CELLS, ids=CELL_IDS)
def test_cell_targets(action: Action, current: Status) -> None:
    """Each (action, from) cell ends in exactly the statuses the product allows (empty = refused)."""
    assert _actual(action, current) == _expected(action, current)


@pytest.mark.parametrize(("action", "current"), CELLS, ids=CELL_IDS)
def test_cell_is_a_source_exactly_when_allowed(action: Action, current: Status) -> None:
    assert (current in sources(action)) == bool(_expected(action, current))


TRIPLES = [(a, s, t) for a in ALL_ACTIONS for s in ALL_STATUSES for t in ALL_STATUSES]


@pytest.mark.parametrize(
    ("action", "current", "target"),
    TRIPLES,
    ids=[f"{a.value}-{s.value}-to-{t.value}" for a, s, t in TRIPLES],
)
def test_allowed_matches_expected(action: Action, current: Status, target: Status) -> None:
    assert allowed(action, current, target) is (target in _expected(action, current))


# The refusals the product promises by name, so a regression reads plainly.
@pytest.mark.parametrize(
    ("action", "current"),
    [
        (Action.COMPLETE, Q),
        (Action.COMPLETE, READY),
        (Action.COMPLETE, FAILED),
        (Action.COMPLETE, CANCELLED),
        (Action.CONFIRM_CANCEL, R),
        (Action.CONFIRM_CANCEL, Q),
        (Action.CONFIRM_CANCEL, CANCELLED),
        (Action.CANCEL, READY),
        (Action.CANCEL, FAILED),
        (Action.RETRY, Q),
        (Action.RETRY, R),
        (Action.RETRY, CR),
        (Action.RETRY, READY),
        (Action.RETRY, CANCELLED),
        (Action.CLAIM, R),
        (Action.CLAIM, FAILED),
        (Action.RELEASE, Q),
        (Action.FAIL, Q),
        (Action.REPORT, Q),
        (Action.HEARTBEAT, Q),
        (Action.REQUEUE, CR),
        (Action.REQUEUE, FAILED),
        (Action.ATTEMPT_TIMEOUT, Q),
        (Action.ATTEMPT_TIMEOUT, FAILED),
        (Action.JOB_TIMEOUT, READY),
        (Action.JOB_TIMEOUT, FAILED),
        (Action.JOB_TIMEOUT, CANCELLED),
        (Action.NO_PROGRESS, Q),
        (Action.NO_PROGRESS, CR),
        (Action.NO_PROGRESS, W),
        (Action.ATTEMPT_TIMEOUT, W),  # no attempt runs while a person decides
        (Action.LEASE_EXPIRED, W),  # nor is a lease held for the reaper to find
        (Action.HEARTBEAT, W),
        (Action.AWAIT_REVIEW, Q),
        (Action.AWAIT_REVIEW, W),
        (Action.RESOLVE, Q),
        (Action.RESOLVE, R),
        (Action.RESOLVE, FAILED),
        (Action.CLAIM, W),
    ],
    ids=lambda v: v.value,
)
def test_named_refusals(action: Action, current: Status) -> None:
    assert current not in sources(action)
    assert not any(allowed(action, current, t) for t in ALL_STATUSES)


@pytest.mark.parametrize(
    ("action", "current", "target"),
    [
        (Action.CANCEL, CR, CR),
        (Action.CANCEL, CANCELLED, CANCELLED),
        (Action.FAIL, CR, CANCELLED),
        (Action.RELEASE, CR, CANCELLED),
        (Action.RETRY, FAILED, Q),
        (Action.CANCEL, Q, CANCELLED),
        (Action.CANCEL, R, CR),
        (Action.COMPLETE, CR, READY),
        (Action.LEASE_EXPIRED, CR, CANCELLED),
        (Action.ATTEMPT_TIMEOUT, CR, CANCELLED),
        (Action.JOB_TIMEOUT, Q, FAILED),
        (Action.JOB_TIMEOUT, CR, FAILED),
        (Action.NO_PROGRESS, R, R),
        (Action.AWAIT_REVIEW, R, W),
        (Action.AWAIT_REVIEW, CR, CANCELLED),
        (Action.RESOLVE, W, Q),
        (Action.RESOLVE, W, FAILED),
        (Action.CANCEL, W, CANCELLED),
        (Action.JOB_TIMEOUT, W, FAILED),
    ],
    ids=lambda v: v.value,
)
def test_named_allowances(action: Action, current: Status, target: Status) -> None:
    assert allowed(action, current, target)


@pytest.mark.parametrize("target", [R, FAILED, READY, Q], ids=lambda v: v.value)
def test_fail_or_release_while_cancel_requested_only_ends_cancelled(
    target: Status,
) -> None:
    assert not allowed(Action.FAIL, CR, target)
    assert not allowed(Action.RELEASE, CR, target)


def test_submit_starts_from_nothing() -> None:
    assert sources(Action.SUBMIT) == frozenset()
    assert not any(allowed(Action.SUBMIT, s, t) for s in ALL_STATUSES for t in ALL_STATUSES)


def test_terminal_and_leased_sets() -> None:
    assert {READY, FAILED, CANCELLED} == TERMINAL
    assert {R, CR} == LEASED
    assert W not in TERMINAL and W not in LEASED  # nobody holds it, and it is not over
    for s in ALL_STATUSES:
        assert s.terminal is (s in {READY, FAILED, CANCELLED})


def test_status_values_match_contract_names() -> None:
    assert [s.value for s in Status] == [
        "QUEUED",
        "RUNNING",
        "CANCEL_REQUESTED",
        "READY",
        "FAILED",
        "CANCELLED",
        "WAITING",
    ]


def test_ready_is_a_dead_end() -> None:
    for action in ALL_ACTIONS:
        assert READY not in sources(action)


def test_terminal_states_only_leave_by_retry_or_idempotent_cancel() -> None:
    for action, by_source in TRANSITIONS.items():
        for source, targets in by_source.items():
            if source in TERMINAL:
                assert (action, source, targets) in {
                    (Action.RETRY, FAILED, frozenset({Q})),
                    (Action.CANCEL, CANCELLED, frozenset({CANCELLED})),
                }


def test_only_worker_actions_start_from_a_leased_status() -> None:
    leased_actions = {a for a in ALL_ACTIONS if sources(a) & LEASED}
    assert leased_actions == {
        Action.CANCEL,
        Action.REPORT,
        Action.HEARTBEAT,
        Action.COMPLETE,
        Action.CONFIRM_CANCEL,
        Action.FAIL,
        Action.RELEASE,
        Action.LEASE_EXPIRED,
        Action.REQUEUE,
        Action.ATTEMPT_TIMEOUT,
        Action.JOB_TIMEOUT,
        Action.NO_PROGRESS,
        Action.AWAIT_REVIEW,
    }


def test_only_claim_enters_running_from_elsewhere() -> None:
    for action, by_source in TRANSITIONS.items():
        for source, targets in by_source.items():
            if R in targets and source is not R:
                assert action is Action.CLAIM


def test_table_values_are_statuses() -> None:
    for by_source in TRANSITIONS.values():
        for source, targets in by_source.items():
            assert isinstance(source, Status)
            assert isinstance(targets, frozenset)
            assert targets and all(isinstance(t, Status) for t in targets)
