"""A SubmitBatch reply is weighed before the store runs (jobwire.rpc.convert.reply_bytes): the
weight must bound what a new job really takes in the reply, whatever the server fills in."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from jobwire.domain.batches import REPLY_BUDGET, NewBatch
from jobwire.domain.commands import NewJob
from jobwire.domain.flow import Held
from jobwire.domain.job import JobRecord
from jobwire.domain.progress import Progress
from jobwire.domain.states import Status
from jobwire.rpc.convert import job_to_proto, reply_bytes

LATE = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
DEPENDS = tuple(f"PT-20261008-{n:012d}" for n in range(100))  # the most a job may name, the longest numbers
NEW = NewJob(
    tenant="acme", job_type="t" * 64, queue="q" * 64, payload=b"", owner="o" * 128, priority=-(2**31),
    labels={f"k{i:02d}": "值" * 256 for i in range(32)}, depends_on=DEPENDS, batch_id="B-" + "f" * 20,
)  # fmt: skip


def made(**server: Any) -> JobRecord:
    """`NEW` as the store makes it, with the server's own fields at their longest."""
    fields: dict[str, Any] = {
        "job_no": "ZZZZZZZZZZZZZZZZ-20261008-999999999999", "tenant": NEW.tenant, "job_type": NEW.job_type,
        "queue": NEW.queue, "owner": NEW.owner, "labels": NEW.labels, "status": Status.QUEUED,
        "priority": NEW.priority, "stage": None, "progress": Progress(stage_index=0, stage_count=2**31 - 1),
        "attempt": 0, "max_attempts": 2**31 - 1, "created_at": LATE, "updated_at": LATE, "run_after": LATE,
        "version": 2**62, "locale": "zh-CN", "queue_position": 2**62, "depends_on": DEPENDS,
        "batch_id": NEW.batch_id,
    }  # fmt: skip
    return JobRecord(**{**fields, **server})


@pytest.mark.parametrize(
    "server",
    [{}, {"waiting_for": DEPENDS}, {"no_worker": True}, {"held": Held.AT_LIMIT}, {"locale": "en"}],
    ids=["in line", "waiting for its dependencies", "no worker", "held back", "in English"],
)
def test_the_weight_bounds_the_reply(server: dict[str, Any]) -> None:
    listed = job_to_proto(made(**server)).ByteSize() + 8  # with its field's tag and length
    assert listed <= reply_bytes(NEW)


def test_a_batch_over_the_budget_is_refused_and_one_under_is_not() -> None:
    def batch(weight: int) -> NewBatch:
        return NewBatch(tenant="acme", batch_id="B-" + "0" * 20, jobs=[NEW], reply_bytes=weight)

    assert batch(REPLY_BUDGET).refusal() is None
    refused = batch(REPLY_BUDGET + 1).refusal()
    assert refused is not None and refused.code == "RESOURCE_EXHAUSTED" and "split the batch" in refused.message
