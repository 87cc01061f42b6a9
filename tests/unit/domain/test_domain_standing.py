"""Where a QUEUED job stands (jobwire.domain.standing), rendered as a person reads it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobwire.domain.flow import Held
from jobwire.domain.job import JobRecord
from jobwire.domain.progress import Progress
from jobwire.domain.standing import QueueStanding, Standing, stand
from jobwire.domain.states import Status
from jobwire.domain.view import render

T0 = datetime(2026, 10, 8, 12, 0, tzinfo=UTC)
SERVED = QueueStanding(served=frozenset({"frames"}))


def job(status: Status = Status.QUEUED, job_type: str = "frames", **fields: object) -> JobRecord:
    return JobRecord(
        job_no="PT-20261008-001", tenant="acme", job_type=job_type, queue="default", owner="alice", labels={},
        status=status, priority=0, stage=None, progress=Progress(stage_index=0, stage_count=4, processed_units=0),
        created_at=T0, updated_at=T0, **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def detail(record: JobRecord, standing: Standing, locale: str = "en") -> str:
    return render(stand(record, standing), locale).detail


def test_a_served_job_in_an_open_queue_reads_its_place_when_read_and_none_in_a_later_message() -> None:
    assert detail(job(), Standing(queue=SERVED, queue_position=0)) == "Queued · next in line"
    assert detail(job(), Standing(queue=SERVED, queue_position=2)) == "Queued · 2 jobs ahead"
    assert detail(job(), Standing(queue=SERVED)) == "Queued"


def test_a_kind_nobody_serves_says_so_place_or_not() -> None:
    unserved = job(job_type="orphan")
    said = "Queued · No worker is serving this kind of job yet"
    assert detail(unserved, Standing(queue=SERVED, queue_position=0)) == said
    assert detail(unserved, Standing(queue=SERVED)) == said
    assert stand(unserved, Standing(queue=SERVED)).no_worker


@pytest.mark.parametrize(
    ("held", "en", "zh"),
    [
        (Held.PAUSED, "Queued: the queue is paused", "排队中：队列已暂停"),
        (Held.AT_LIMIT, "Queued: the queue is at its limit", "排队中：队列已达到处理上限"),
    ],
)
def test_a_held_queue_says_why_instead_of_a_place(held: Held, en: str, zh: str) -> None:
    standing = Standing(queue=QueueStanding(served=SERVED.served, held=held), queue_position=3)
    assert detail(job(), standing) == en
    assert detail(job(), standing, "zh-CN") == zh
    assert detail(job(), Standing(queue=QueueStanding(served=SERVED.served, held=held))) == en


def test_a_job_waiting_for_dependencies_names_them_whatever_its_queue_says() -> None:
    waiting = job(depends_on=("PT-1", "PT-2"))
    paused = QueueStanding(served=SERVED.served, held=Held.PAUSED)
    stood = stand(waiting, Standing(queue=paused, waiting_for=("PT-2",), queue_position=4))
    assert render(stood, "en").detail == "Queued · Waiting for PT-2"
    assert (stood.held, stood.queue_position) == (None, None)  # not in line yet


def test_the_dependencies_read_replace_what_the_row_alone_told() -> None:
    told = job(depends_on=("PT-1",), waiting_for=("PT-1",))  # a snapshot: none had ended then
    assert stand(told, Standing(queue=SERVED)).waiting_for == ()  # PT-1 is READY by now


@pytest.mark.parametrize("status", [s for s in Status if s is not Status.QUEUED], ids=lambda s: s.value)
def test_only_a_queued_job_stands_anywhere(status: Status) -> None:
    record = job(status=status, job_type="orphan")
    assert stand(record, Standing(queue=QueueStanding(held=Held.PAUSED), queue_position=1)) is record
