"""The rules under the streams, without I/O: a stream's inbox and the feed's gap cursor."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from jobwire.db.feed import FeedCursor, coalesced
from jobwire.domain.job import JobRecord
from jobwire.domain.progress import Progress
from jobwire.domain.states import Status
from jobwire.jobapi.feed import Update
from jobwire.jobapi.watch import Inbox, Lost, Pending, ServerStopping

NOW = datetime(2026, 10, 8, 12, 0, 0)
STAGES = ("PREPARING", "PROCESSING", "VERIFYING", "DELIVERING")


def update(version: int, status: Status = Status.RUNNING, stage: str | None = "PROCESSING", units: int = 0,
           job_no: str = "PT-20261008-001", attempt: int = 1) -> Update:  # fmt: skip
    index = STAGES.index(stage) + 1 if stage else 0
    record = JobRecord(
        job_no=job_no, tenant="default", job_type="frames", queue="default", owner="", labels={}, status=status,
        priority=0, stage=stage, progress=Progress(stage_index=index, stage_count=4, processed_units=units),
        attempt=attempt, created_at=NOW, updated_at=NOW, version=version,
    )  # fmt: skip
    return Update(1, record)


def drain(box: Inbox) -> list[Pending | Lost]:
    out = []
    while box.backlog:
        out.append(asyncio.run(box.next()))
    return out


def test_progress_within_a_stage_is_coalesced_to_the_newest() -> None:
    box = Inbox()
    for version, units in ((2, 10), (3, 20), (4, 30)):
        box.offer(update(version, units=units))
    (item,) = drain(box)
    assert isinstance(item, Pending) and (item.update.version, item.first) == (4, 2)
    assert box.coalesced == 2


def test_status_stage_attempt_and_end_are_never_coalesced() -> None:
    box = Inbox()
    box.offer(update(2, stage="PREPARING"))
    box.offer(update(3, stage="PROCESSING", units=1))
    box.offer(update(4, stage="PROCESSING", units=2))
    box.offer(update(5, status=Status.CANCEL_REQUESTED, units=2))
    box.offer(update(6, status=Status.QUEUED, stage=None))
    box.offer(update(7, stage="PREPARING", attempt=2))
    box.offer(update(8, status=Status.READY, stage=None, attempt=2))
    kept = [(i.update.version, i.first) for i in drain(box) if isinstance(i, Pending)]
    assert kept == [(2, 2), (4, 3), (5, 5), (6, 6), (7, 7), (8, 8)]


def test_old_and_repeated_versions_are_ignored() -> None:
    box = Inbox()
    box.offer(update(3, units=3))
    box.offer(update(3, units=3))
    box.offer(update(2, units=2))
    assert [i.update.version for i in drain(box) if isinstance(i, Pending)] == [3]


def test_an_item_being_sent_is_not_changed_by_later_progress() -> None:
    box = Inbox()
    box.offer(update(2, units=1))
    (taken,) = drain(box)
    box.offer(update(3, units=2))
    assert isinstance(taken, Pending) and taken.update.version == 2
    (following,) = drain(box)
    assert isinstance(following, Pending) and (following.update.version, following.first) == (3, 3)


def test_a_full_inbox_drops_the_oldest_and_asks_for_a_replay() -> None:
    box = Inbox(limit=3)
    statuses = [Status.QUEUED, Status.RUNNING] * 3
    for version, status in enumerate(statuses, start=10):
        box.offer(update(version, status=status, stage=None if status is Status.QUEUED else "PREPARING"))
    work = drain(box)
    assert isinstance(work[0], Lost) and work[0].after == 9  # replay everything after 9
    assert [w.update.version for w in work[1:] if isinstance(w, Pending)] == [13, 14, 15]


def test_a_closed_inbox_raises_at_once() -> None:
    async def scenario() -> None:
        box = Inbox()
        box.offer(update(2))
        box.close(ServerStopping())
        with pytest.raises(ServerStopping):
            await box.next()
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with pytest.raises(ServerStopping):  # a wait for `never` would end in TimeoutError instead
            await asyncio.wait_for(box.until(never), 10)

    asyncio.run(scenario())


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cursor_keeps_missing_ids_open_until_they_fill() -> None:
    cursor = FeedCursor(10, grace_s=30, clock=FakeClock())
    cursor.advance([11, 14])
    assert cursor.high == 14 and set(cursor.gaps) == {12, 13}
    cursor.advance([12, 15])
    assert cursor.high == 15 and set(cursor.gaps) == {13}


def test_cursor_gives_up_on_a_gap_after_the_grace_period() -> None:
    clock = FakeClock()
    cursor = FeedCursor(0, grace_s=30, clock=clock)
    cursor.advance([2])
    clock.now = 29
    cursor.advance([])
    assert set(cursor.gaps) == {1}
    clock.now = 31
    cursor.advance([])
    assert cursor.gaps == {}


def test_cursor_caps_its_gaps_dropping_the_oldest() -> None:
    cursor = FeedCursor(0, grace_s=30, max_gaps=3, clock=FakeClock())
    cursor.advance([6])
    assert list(cursor.gaps) == [3, 4, 5]


def test_replay_keeps_the_last_progress_of_each_run() -> None:
    marks = [(1, "SUBMITTED"), (2, "CLAIMED"), (3, "PROGRESS"), (4, "PROGRESS"), (5, "STAGE_CHANGED"),
             (6, "PROGRESS"), (7, "PROGRESS"), (8, "PROGRESS")]  # fmt: skip
    assert coalesced(marks) == [1, 2, 4, 5, 8]
