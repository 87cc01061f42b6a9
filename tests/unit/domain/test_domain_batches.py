"""A batch's counts: finished is READY, FAILED and CANCELLED; progress is finished over total."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobwire.domain import limits
from jobwire.domain.batches import BatchRecord, new_batch_id
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.states import Status

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def test_progress_counts_only_finished_jobs_whatever_their_ending() -> None:
    counts = {Status.QUEUED: 3, Status.RUNNING: 2, Status.CANCEL_REQUESTED: 1, Status.READY: 2, Status.FAILED: 1,
              Status.CANCELLED: 1}  # fmt: skip
    batch = BatchRecord(batch_id=new_batch_id(), tenant="t", total=10, created_at=NOW, counts=counts)
    assert (batch.finished, batch.progress) == (4, 0.4)


def test_a_new_batch_id_is_one_the_limits_accept() -> None:
    assert limits.batch_id(new_batch_id())
    with pytest.raises(InvalidArgument, match="batch_id"):
        limits.batch_id("B-xyz")


def test_depends_on_collapses_repeats_and_names_its_field() -> None:
    assert limits.depends_on(["PT-20261008-002", "PT-20261008-001", "PT-20261008-002"]) == (
        "PT-20261008-002",
        "PT-20261008-001",
    )
    with pytest.raises(InvalidArgument, match=r"^depends_on: "):
        limits.depends_on(["pt-1"])
    with pytest.raises(InvalidArgument, match="at most 100"):
        limits.depends_on([f"PT-20261008-{i:03}" for i in range(101)])
