"""Dependencies decided on values: what a new job waits for, and what a waiting job becomes
when a dependency ends (no store)."""

from __future__ import annotations

import pytest

from jobwire.domain.dependencies import Settled, on_dependency_ended, waiting_on
from jobwire.domain.errors import DependencyEnded, InvalidArgument
from jobwire.domain.evidence import EventKind
from jobwire.domain.states import Action, Status, allowed


def test_a_new_job_waits_for_each_dependency_not_ready() -> None:
    assert waiting_on([]) == 0
    assert waiting_on([("PT-1", Status.READY), ("PT-2", Status.RUNNING), ("PT-3", Status.QUEUED)]) == 2


@pytest.mark.parametrize("ended", [Status.FAILED, Status.CANCELLED])
def test_a_dependency_that_ended_otherwise_refuses_the_new_job(ended: Status) -> None:
    with pytest.raises(DependencyEnded, match=f"PT-2 has ended {ended.value}") as refused:
        waiting_on([("PT-1", Status.READY), ("PT-2", ended)])
    assert refused.value.job_no == "PT-2"


def test_a_number_the_tenant_has_no_job_of_is_refused_first_come_first_told() -> None:
    with pytest.raises(InvalidArgument, match="PT-9 is not a job of yours"):
        waiting_on([("PT-9", None), ("PT-2", Status.FAILED)])
    with pytest.raises(DependencyEnded):  # in the order named: the ended one comes first here
        waiting_on([("PT-2", Status.FAILED), ("PT-9", None)])


def test_one_fewer_to_wait_for_keeps_the_job_queued_and_says_how_many_are_left() -> None:
    assert on_dependency_ended(Status.QUEUED, 3, 2, None) == Settled(
        status=Status.QUEUED, kind=EventKind.DEPENDENCY_READY, waiting_on=2, detail="1 more READY; waiting for 2"
    )
    last = on_dependency_ended(Status.QUEUED, 1, 0, None)
    assert last is not None and (last.waiting_on, last.detail) == (0, "every dependency is READY; runnable")


@pytest.mark.parametrize("ended", [Status.FAILED, Status.CANCELLED])
def test_a_dependency_that_ended_otherwise_cancels_the_waiting_job(ended: Status) -> None:
    settled = on_dependency_ended(Status.QUEUED, 2, 2, ("PT-7", ended))
    assert settled == Settled(
        status=Status.CANCELLED,
        kind=EventKind.DEPENDENCY_FAILED,
        waiting_on=0,
        detail=f"dependency PT-7 ended {ended.value}; cancelled with it",
    )
    assert allowed(Action.DEPENDENCY_FAILED, Status.QUEUED, settled.status)


def test_nothing_changes_for_a_job_no_longer_waiting_or_already_counted() -> None:
    assert on_dependency_ended(Status.QUEUED, 2, 2, None) is None  # counted for this end already
    assert on_dependency_ended(Status.QUEUED, 0, 0, ("PT-7", Status.FAILED)) is None  # runnable already
    for status in (s for s in Status if s is not Status.QUEUED):
        assert on_dependency_ended(status, 2, 0, ("PT-7", Status.FAILED)) is None
